"""``torch.load(weights_only=True)`` of one torch checkpoint, flattened to ``{name: tensor}``.

What the ``pickle`` strategies time and what ``loadscope.load_model`` runs on torch
files. Never executes pickled code: ``weights_only=True`` always (the callers refuse a
torch older than 2.6 first, ``loaders/torch_safety.py``); a pickle that the
weights-only loader refuses is one line naming the global it refused.

May import: ``loadscope.loaders.strategy`` (its types), ``loadscope.loaders.errors``.
"""

from __future__ import annotations

import pickle
from typing import Any

from loadscope.loaders.errors import UnsafePickle
from loadscope.loaders.strategy import Tensors


def torch_load(path: str, map_location: Any, *, use_mmap: bool) -> Tensors:
    """``torch.load(path, map_location, weights_only=True, mmap=use_mmap)``'s tensors, by
    their dotted names in the state it returns."""
    import torch

    try:
        state = torch.load(path, map_location=map_location, weights_only=True, mmap=use_mmap)
    except pickle.UnpicklingError as exc:
        raise _weights_only_refusal(exc, path) from None
    yield from _flatten(state)


def _weights_only_refusal(exc: pickle.UnpicklingError, path: str) -> UnsafePickle:
    """torch's long weights-only error (with its advice to turn the protection off) as one
    line: the global it refused."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    reason = next(
        (x for x in lines if "WeightsUnpickler error" in x),
        next((x for x in lines if "GLOBAL" in x), lines[-1] if lines else type(exc).__name__),
    )
    reason = reason.split("WeightsUnpickler error:", 1)[-1].strip()
    return UnsafePickle(
        f"torch.load(weights_only=True) refused it ({reason[:200]}): it would run code,"
        " not rebuild tensors; nothing was executed",
        path=path,
    )


def _flatten(obj: Any, prefix: str = "") -> Tensors:
    import torch

    if isinstance(obj, torch.Tensor):
        yield prefix or "tensor", obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, list | tuple):
        for i, value in enumerate(obj):
            yield from _flatten(value, f"{prefix}.{i}" if prefix else str(i))
