"""What the GPU strategies and the H2D ceiling share: why CUDA cannot be used here, and the device.

Both functions import torch, so they run only in worker processes (``unavailable()``
is asked of a worker by ``describe_strategies``); the parent never imports torch.
Merely asking ``torch.cuda.is_available()`` does not create a CUDA context, but it
must still never run in the fork server, whose children inherit its state.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_DEVICE = re.compile(r"cuda(?::(\d+))?")


def cuda_unavailable() -> str | None:
    """Why no CUDA device can be used in this process, or None when one can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.cuda.is_available():
        return None
    cuda_build = torch.version.cuda
    hip_build = getattr(torch.version, "hip", None)
    if cuda_build is None and hip_build is None:
        build = f"CPU-only torch {torch.__version__}"
    else:
        runtime = f"CUDA {cuda_build}" if cuda_build else f"ROCm/HIP {hip_build}"
        build = f"torch {torch.__version__} built for {runtime}, but no usable device or driver"
    return f"no CUDA device: torch.cuda.is_available() is False ({build})"


def is_cuda(device: str) -> bool:
    return _DEVICE.fullmatch(device) is not None


def cuda_device(device: str) -> torch.device:
    """``device`` ("cuda" or "cuda:N") as a torch device that exists here; ValueError if not."""
    import torch

    m = _DEVICE.fullmatch(device)
    if m is None:
        raise ValueError(f"a GPU strategy needs --device cuda or cuda:N, not {device!r}")
    why = cuda_unavailable()
    if why:
        raise RuntimeError(why)
    index = int(m.group(1)) if m.group(1) is not None else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"{device}: no such device (this machine has {count} CUDA device(s))")
    return torch.device("cuda", index)
