"""A strategy from one module (the test of issue 39's strategy declarations): each file
read whole with ``os.read`` and ``load()``ed, declared with its place in the doctor's plan
and a stack route. Named in ``$LOADSCOPE_STRATEGY_MODULES``."""

from __future__ import annotations

import os

from loadscope.loaders import strategy
from loadscope.loaders.strategies import register


class ToyRead(strategy.FileByFile):
    name = "toy-read"
    summary = "the toy plugin: os.read of the whole file, then safetensors.torch.load"
    requires = strategy.Requirements(ram_multiple=2.0)
    doctor_order = 95
    reads = "buffered"
    fixes = frozenset({"parallel-reads"})
    routes = (
        strategy.StackRoute(
            "safetensors",
            "code change",
            "toyload.read_all",
            "import toyload  # the toy plugin's loader\nstate = toyload.read_all({py})",
        ),
    )

    def load_one(self, f: strategy.FileRequest, ctx: strategy.LoadContext) -> strategy.Tensors:
        from safetensors.torch import load

        fd = os.open(f.path, os.O_RDONLY)
        try:
            chunks = []
            while chunk := os.read(fd, 8 << 20):
                chunks.append(chunk)
        finally:
            os.close(fd)
        yield from strategy.only_requested(f, load(b"".join(chunks)).items())


register(ToyRead())
