"""What an action says of the bytes it moved: their rate, and the timing fields of its JSON.

Shared by :mod:`~loadscope.actions.warm` (bytes read) and
:mod:`~loadscope.actions.localcopy` (bytes copied), so both results count a rate the
same way and write it under the same keys.
May import: the standard library only.
"""

from __future__ import annotations


def rate(moved: int, seconds: float) -> float | None:
    """``moved`` bytes per second; None when nothing moved or no time was measured."""
    return moved / seconds if seconds > 0 and moved else None


def timing_fields(name: str, moved: int, seconds: float) -> dict[str, object]:
    """A result's ``{name: moved, "seconds": ..., "bytes_per_s": ...}``, in that order."""
    return {name: moved, "seconds": round(seconds, 4), "bytes_per_s": rate(moved, seconds)}
