"""``mmap``: ``safetensors.torch.load_file`` — the default everyone uses.

The file is memory-mapped and tensors are views on the mapping: zero-copy when
the page cache is warm, one page fault (plus the kernel's read-around) per
missing page when it is cold — the pattern that stalls on high-latency storage.
"""

from __future__ import annotations

from loadscope.loaders import strategy
from loadscope.loaders.mapped import NAME, load_mapped


class MmapLoadFile(strategy.FileByFile):
    name = NAME
    summary = "safetensors.torch.load_file (memory-mapped, lazy)"
    requires = strategy.Requirements(ram_multiple=0.0)
    default_load = True
    doctor_order = 10
    on_gpu_box = True
    warm_trial = True
    reads = "buffered"

    def load_one(self, f: strategy.FileRequest, ctx: strategy.LoadContext) -> strategy.Tensors:
        yield from load_mapped(f)
