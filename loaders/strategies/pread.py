"""``pread``: safetensors' own ``load_file(backend="pread")``, where the installed version has it.

Reads each tensor with positional reads instead of mapping the file.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import TYPE_CHECKING

from loadscope.loaders.strategy import FileRequest, LoadContext, Requirements, Strategy

if TYPE_CHECKING:
    import torch


class SafetensorsPread(Strategy):
    name = "pread"
    summary = 'safetensors.torch.load_file(backend="pread")'
    requires = Requirements(ram_multiple=1.0)

    def unavailable(self) -> str | None:
        import safetensors
        from safetensors.torch import load_file

        if "backend" not in inspect.signature(load_file).parameters:
            return f"safetensors {safetensors.__version__} has no backend= option in load_file"
        return None

    def load(
        self, files: list[FileRequest], ctx: LoadContext
    ) -> Iterator[tuple[str, torch.Tensor]]:
        from safetensors.torch import load_file

        for f in files:
            tensors = load_file(f.path, backend="pread")
            wanted = set(f.tensors) if f.tensors is not None else None
            for name, t in tensors.items():
                if wanted is None or name in wanted:
                    yield name, t
