"""``read-to-cuda``: read the whole file into memory, build CPU tensors, then ``.to("cuda")``.

What many users do (``load(open(p, "rb").read())`` and then ``model.to(device)``):
one big buffered read, a copy into CPU tensors, and a synchronous copy of each
tensor from pageable memory to the device. Holds the file twice in RAM at the peak.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from loadscope.loaders.cuda import cuda_device, cuda_unavailable
from loadscope.loaders.strategy import (
    FileRequest,
    LoadContext,
    Requirements,
    Strategy,
    group_by_span,
    selected,
    tensors_from_buffer,
)

if TYPE_CHECKING:
    import torch


class ReadToCuda(Strategy):
    name = "read-to-cuda"
    summary = "safetensors.torch.load(open(p, 'rb').read()), then .to('cuda') per tensor"
    requires = Requirements(gpu=True, ram_multiple=2.0)

    def unavailable(self) -> str | None:
        return cuda_unavailable()

    def load(
        self, files: list[FileRequest], ctx: LoadContext
    ) -> Iterator[tuple[str, torch.Tensor]]:
        from safetensors.torch import load

        from loadscope.loaders.safetensors_format import read_header

        device = cuda_device(ctx.device)
        for f in files:
            if f.tensors is None:
                with open(f.path, "rb") as fh:
                    cpu = load(fh.read())
                for name, t in cpu.items():
                    yield name, t.to(device)
                continue
            # A sample: one read per span of the chosen tensors (the same one-big-read
            # pattern, on the bytes the trial is asked to load), CPU copies, then .to().
            header = read_header(f.path)
            fd = os.open(f.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                for start, end, entries in group_by_span(header, selected(header, f)):
                    data = bytearray(os.pread(fd, end - start, start))
                    for name, t in tensors_from_buffer(data, start, header, entries):
                        yield name, t.clone().to(device)
            finally:
                os.close(fd)
