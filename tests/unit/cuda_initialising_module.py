"""A module whose import makes the fork server believe CUDA is initialised (a test double
for an import that touches CUDA, which a machine without a GPU cannot do for real)."""

import torch

torch.cuda.is_initialized = lambda: True  # type: ignore[assignment]
