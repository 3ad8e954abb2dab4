"""The toy memory source's strategies (``toy_memory_probe`` declares the source): each
object copied out of the store whole and parsed with safetensors, and read tensor by
tensor from the store's bytes without a copy of the whole object. Named in
``$LOADSCOPE_STRATEGY_MODULES``."""

from __future__ import annotations

import json
import struct

import toy_memory_probe as toy

from loadscope.loaders.strategies import register
from loadscope.loaders.strategy import FileRequest, LoadContext, Requirements, Strategy, Tensors

_SOURCE = frozenset({toy.NAME})


class _Toy(Strategy):
    def prepare(self, files: list[FileRequest], ctx: LoadContext) -> None:
        # The store is built before the clock: what a trial times is reading it.
        for f in files:
            toy.read(f.path, 0, 0)


class CopyThenParse(_Toy):
    name = "memory-copy"
    summary = "each object copied out of the store whole, then safetensors.torch.load"
    requires = Requirements(sources=_SOURCE, ram_multiple=2.0)

    def load(self, files: list[FileRequest], ctx: LoadContext) -> Tensors:
        import safetensors.torch

        for f in files:
            tensors = safetensors.torch.load(bytes(toy.read(f.path, 0, f.size_bytes)))
            for name, tensor in tensors.items():
                if f.tensors is None or name in f.tensors:
                    yield name, tensor


class TensorByTensor(_Toy):
    name = "memory-tensors"
    summary = "each tensor read from the store's bytes by its header's offsets"
    requires = Requirements(sources=_SOURCE, ram_multiple=1.0)

    def load(self, files: list[FileRequest], ctx: LoadContext) -> Tensors:
        import torch

        for f in files:
            (length,) = struct.unpack("<Q", toy.read(f.path, 0, 8))
            header = json.loads(bytes(toy.read(f.path, 8, length)))
            for name, info in header.items():
                if name == "__metadata__" or (f.tensors is not None and name not in f.tensors):
                    continue
                begin, end = info["data_offsets"]
                raw = bytearray(toy.read(f.path, 8 + length + begin, end - begin))
                yield name, torch.frombuffer(raw, dtype=torch.float32).reshape(info["shape"])


register(CopyThenParse())
register(TensorByTensor())
