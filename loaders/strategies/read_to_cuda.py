"""``read-to-cuda``: read the whole file into memory, build CPU tensors, then ``.to("cuda")``.

What many users do (``load(open(p, "rb").read())`` and then ``model.to(device)``):
one big buffered read, a copy into CPU tensors, and a synchronous copy of each
tensor from pageable memory to the device. Holds the file twice in RAM at the peak.
"""

from __future__ import annotations

from loadscope.loaders import strategy
from loadscope.loaders.buffers import read_spans
from loadscope.loaders.cuda import cuda_device


class ReadToCuda(strategy.Strategy):
    name = "read-to-cuda"
    summary = "safetensors.torch.load(open(p, 'rb').read()), then .to('cuda') per tensor"
    requires = strategy.Requirements(gpu=True, ram_multiple=2.0)
    reads = "buffered"

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        from safetensors.torch import load

        device = cuda_device(ctx.device)
        for f in files:
            if f.tensors is None:
                with open(f.path, "rb") as fh:
                    cpu = load(fh.read())
                for name, t in cpu.items():
                    yield name, t.to(device)
                continue
            # A sample: one read per span of the chosen tensors, CPU copies, then .to().
            for name, t in read_spans(f):
                yield name, t.to(device)
