"""``pickle``, ``pickle-mmap`` and ``pickle-cuda``: ``torch.load(weights_only=True)`` of
torch checkpoints, to the CPU (with and without ``mmap=True``) or straight to the GPU
(``map_location="cuda:N"``, what a GPU user of ``torch.load`` writes).

Never executes pickled code: ``weights_only=True`` always, and refused outright
on torch older than 2.6, whose ``weights_only`` loader had a remote-code
execution hole (CVE-2025-32434). The worker checks the torch it imported; the
parent checks the installed one by its package metadata (without importing
torch) before it plans any load, so the refusal is one line up front.
"""

from __future__ import annotations

from typing import Any

from loadscope.loaders import strategy
from loadscope.loaders.cuda import cuda_device, cuda_unavailable
from loadscope.loaders.torch_safety import torch_too_old
from loadscope.loaders.torchload import torch_load


class Pickle(strategy.FileByFile):
    name = "pickle"
    summary = "torch.load(weights_only=True)"
    requires = strategy.Requirements(formats=frozenset({"torch"}), ram_multiple=1.0)
    default_load = True
    warm_trial = True
    reads = "buffered"
    use_mmap = False

    def unavailable(self) -> str | None:
        return torch_too_old()

    def map_location(self, ctx: strategy.LoadContext) -> Any:
        return "cpu"

    def load_one(self, f: strategy.FileRequest, ctx: strategy.LoadContext) -> strategy.Tensors:
        state = torch_load(f.path, self.map_location(ctx), use_mmap=self.use_mmap)
        yield from strategy.only_requested(f, state)


class PickleMmap(Pickle):
    name = "pickle-mmap"
    summary = "torch.load(weights_only=True, mmap=True)"
    requires = strategy.Requirements(formats=frozenset({"torch"}), ram_multiple=0.0)
    default_load = False
    use_mmap = True


class PickleCuda(Pickle):
    """The GPU side of seed 000's comparison: ``torch.load`` onto the device, beside
    ``mmap-cuda`` (``load_file(device="cuda:N")``) on the same tensors."""

    name = "pickle-cuda"
    summary = "torch.load(weights_only=True, map_location='cuda:N')"
    # torch.load reads each storage into host memory before copying it to the device.
    requires = strategy.Requirements(formats=frozenset({"torch"}), gpu=True, ram_multiple=1.0)

    def unavailable(self) -> str | None:
        return torch_too_old() or cuda_unavailable()

    def map_location(self, ctx: strategy.LoadContext) -> Any:
        return cuda_device(ctx.device)
