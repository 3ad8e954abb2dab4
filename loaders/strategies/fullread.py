"""``fullread``: ``load(open(p, "rb").read())``, the maintainer's fix for network disks.

One big read of the whole file into memory, then tensors are built from the
bytes. Holds the file twice at the peak (the bytes and the tensors).
"""

from __future__ import annotations

from loadscope.loaders import strategy
from loadscope.loaders.buffers import read_spans, tensors_from_buffer


class FullRead(strategy.FileByFile):
    name = "fullread"
    summary = "safetensors.torch.load(open(p, 'rb').read())"
    requires = strategy.Requirements(ram_multiple=2.0)

    def load_one(self, f: strategy.FileRequest, ctx: strategy.LoadContext) -> strategy.Tensors:
        from safetensors.torch import load

        from loadscope.loaders.safetensors_format import read_header

        if f.tensors is not None:
            # A sample: one read per span that holds the chosen tensors.
            yield from read_spans(f)
            return
        with open(f.path, "rb") as fh:
            data = fh.read()
        try:
            tensors = load(data)
        except KeyError as exc:
            # This safetensors cannot build a dtype torch has (F8_E8M0 in 0.7):
            # the same bytes, the same one big read, tensors built here instead.
            ctx.notes.setdefault("fallback", f"safetensors has no dtype {exc}")
            header = read_header(f.path)
            buf = bytearray(data)
            for name, t in tensors_from_buffer(buf, 0, header, list(header.tensors)):
                yield name, t.clone()
            return
        yield from tensors.items()
