"""The public loader API's argument checks: each raises one ValueError naming what it
must be, before any byte is read (``loaders/api.py`` re-exports them).

May import: ``loadscope.loaders.autoread`` (the knobs' declaration), ``loadscope.base``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadscope.loaders.autoread import KNOBS

#: The knobs the API's options are checked against: ``auto``'s declaration.
_DECLARED = {k.name: k for k in KNOBS}


def check_knobs(threads: int | None, block_bytes: int | None, direct: str) -> dict[str, Any]:
    """The API's knobs checked (ValueError naming the bad one) and as a strategy's knobs.

    The same declaration as the ``auto`` strategy's knobs (and ``bench --knob``) checks them.
    """
    knobs: dict[str, Any] = {}
    for name, value in (("threads", threads), ("block_bytes", block_bytes), ("direct", direct)):
        if value is None:
            continue
        if name != "direct" and not isinstance(value, int):
            raise ValueError(f"{name} must be an integer, not {value!r}")
        knobs[name] = _DECLARED[name].parse(value)
    return knobs


def check_local_ranks(local_ranks: object) -> tuple[int, int] | None:
    """``local_ranks`` checked: None, or ``(rank, world)`` with ``0 <= rank < world``
    (ValueError saying what it must be)."""
    if local_ranks is None:
        return None
    pair = list(local_ranks) if isinstance(local_ranks, tuple | list) else []
    if (
        len(pair) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
        or not 0 <= pair[0] < pair[1]
    ):
        raise ValueError(
            f"local_ranks must be (rank, world) with 0 <= rank < world, not {local_ranks!r}"
        )
    return int(pair[0]), int(pair[1])


def check_device(device: object) -> str:
    """``device`` checked before any byte is read (ValueError naming it), as torch spells it.

    A device torch does not parse ("gpu"), one it cannot use here ("cuda" on a machine
    without a usable GPU, "cuda:3" with two), a second CPU ("cpu:1") and "meta" (no data)
    are refused up front: moving a loaded model there would fail only after the load.
    """
    import torch

    try:
        dev = torch.device(device)  # type: ignore[call-overload]
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"device {device!r} is not a device torch knows (e.g. 'cpu', 'cuda', 'cuda:1')"
        ) from None
    if dev.type == "cpu":
        if dev.index not in (None, 0):
            raise ValueError(f"device {device!r}: the CPU is one device, 'cpu'")
        return "cpu"
    if dev.type == "meta":
        raise ValueError("device 'meta' holds no data: load to 'cpu' or an accelerator")
    backend = getattr(torch, dev.type, None)
    # torch.cuda.is_available(), torch.xpu...; torch.backends.mps.is_available() on a Mac.
    available = getattr(backend, "is_available", None) or getattr(
        getattr(torch.backends, dev.type, None), "is_available", None
    )
    if not callable(available) or not available():
        raise ValueError(f"device {device!r}: torch sees no usable {dev.type} device here")
    count = getattr(backend, "device_count", None)
    if dev.index is not None and callable(count) and dev.index >= (n := int(count())):
        raise ValueError(f"device {device!r}: torch sees {n} {dev.type} device(s) here")
    return str(dev)


def check_hints(hints: object) -> dict[str, Any]:
    """``hints`` as a dict (None: none), or a ValueError saying what it must be."""
    if hints is None:
        return {}
    if not isinstance(hints, Mapping):
        raise ValueError(
            f"hints must be a dict like {{'threads': 16, 'block_bytes': 1 << 20}}, not {hints!r}"
        )
    for name, value in hints.items():
        if name not in _DECLARED:  # a misspelt hint would be ignored without a word
            raise ValueError(f"hints: unknown key {name!r} (accepted: {', '.join(_DECLARED)})")
        try:  # checked now, not once earlier shards are loaded
            _DECLARED[name].parse(value)
        except ValueError as exc:
            raise ValueError(f"hints: {exc}") from None
    return dict(hints)
