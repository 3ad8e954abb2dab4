"""``pickle`` and ``pickle-mmap``: ``torch.load(weights_only=True)`` of torch checkpoints.

Never executes pickled code: ``weights_only=True`` always, and refused outright
on torch older than 2.6, whose ``weights_only`` loader had a remote-code
execution hole (CVE-2025-32434).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from loadscope.loaders.strategy import FileRequest, LoadContext, Requirements, Strategy

if TYPE_CHECKING:
    import torch

MIN_SAFE_TORCH = (2, 6)


def torch_too_old() -> str | None:
    import torch

    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if version < MIN_SAFE_TORCH:
        return (
            f"torch {torch.__version__} is older than 2.6: its weights_only loader can execute"
            " code (CVE-2025-32434); refusing to load pickles"
        )
    return None


def _flatten(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix or "tensor", obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from _flatten(value, f"{prefix}.{i}" if prefix else str(i))


class Pickle(Strategy):
    name = "pickle"
    summary = "torch.load(weights_only=True)"
    requires = Requirements(formats=frozenset({"torch"}), ram_multiple=1.0)
    use_mmap = False

    def unavailable(self) -> str | None:
        return torch_too_old()

    def load(
        self, files: list[FileRequest], ctx: LoadContext
    ) -> Iterator[tuple[str, torch.Tensor]]:
        import torch

        for f in files:
            state = torch.load(f.path, map_location="cpu", weights_only=True, mmap=self.use_mmap)
            wanted = set(f.tensors) if f.tensors is not None else None
            for name, t in _flatten(state):
                if wanted is None or name in wanted:
                    yield name, t


class PickleMmap(Pickle):
    name = "pickle-mmap"
    summary = "torch.load(weights_only=True, mmap=True)"
    requires = Requirements(formats=frozenset({"torch"}), ram_multiple=0.0)
    use_mmap = True
