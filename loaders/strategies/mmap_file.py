"""``mmap``: ``safetensors.torch.load_file`` — the default everyone uses.

The file is memory-mapped and tensors are views on the mapping: zero-copy when
the page cache is warm, one page fault (plus the kernel's read-around) per
missing page when it is cold — the pattern that stalls on high-latency storage.
"""

from __future__ import annotations

from loadscope.loaders import strategy


class MmapLoadFile(strategy.FileByFile):
    name = "mmap"
    summary = "safetensors.torch.load_file (memory-mapped, lazy)"
    requires = strategy.Requirements(ram_multiple=0.0)
    default_load = True
    doctor_order = 10
    on_gpu_box = True
    warm_trial = True
    reads = "buffered"

    def load_one(self, f: strategy.FileRequest, ctx: strategy.LoadContext) -> strategy.Tensors:
        from safetensors import safe_open
        from safetensors.torch import load_file

        if f.tensors is None:
            yield from load_file(f.path).items()
        else:
            # load_file's own steps on the sampled tensors: map every tensor, close
            # the file, then hand them out (touching a view while the file is open
            # measured 20-30% faster than load_file on the emulated disk, which
            # made sampled mmap times optimistic).
            with safe_open(f.path, framework="pt") as handle:
                got = {name: handle.get_tensor(name) for name in f.tensors}
            yield from got.items()
