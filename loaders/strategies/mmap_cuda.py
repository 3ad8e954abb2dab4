"""``mmap-cuda``: ``safetensors.torch.load_file(path, device="cuda:N")`` — the GPU default.

safetensors memory-maps the file and moves each tensor to the device from the
mapping: a page-faulting read of pageable memory (on cold storage, the same
small-read pattern as ``mmap``) followed by a synchronous copy per tensor.
"""

from __future__ import annotations

from loadscope.loaders import strategy
from loadscope.loaders.cuda import cuda_device


class MmapCuda(strategy.Strategy):
    name = "mmap-cuda"
    summary = "safetensors.torch.load_file(path, device='cuda:N')"
    requires = strategy.Requirements(gpu=True, ram_multiple=0.0)
    default_load = True
    warm_trial = True
    reads = "buffered"

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
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
