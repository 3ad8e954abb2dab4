"""``mmap-cuda``: ``safetensors.torch.load_file(path, device="cuda:N")`` — the GPU default.

safetensors memory-maps the file and moves each tensor to the device from the
mapping: a page-faulting read of pageable memory (on cold storage, the same
small-read pattern as ``mmap``) followed by a synchronous copy per tensor.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from loadscope.loaders.cuda import cuda_device, cuda_unavailable
from loadscope.loaders.strategy import FileRequest, LoadContext, Requirements, Strategy

if TYPE_CHECKING:
    import torch


class MmapCuda(Strategy):
    name = "mmap-cuda"
    summary = "safetensors.torch.load_file(path, device='cuda:N')"
    requires = Requirements(gpu=True, ram_multiple=0.0)

    def unavailable(self) -> str | None:
        return cuda_unavailable()

    def load(
        self, files: list[FileRequest], ctx: LoadContext
    ) -> Iterator[tuple[str, torch.Tensor]]:
        from safetensors import safe_open
        from safetensors.torch import load_file

        device = str(cuda_device(ctx.device))
        for f in files:
            if f.tensors is None:
                yield from load_file(f.path, device=device).items()
            else:
                with safe_open(f.path, framework="pt", device=device) as handle:
                    for name in f.tensors:
                        yield name, handle.get_tensor(name)
