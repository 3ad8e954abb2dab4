"""What a load is asked: the files (and tensors) it loads, and the knobs it runs with.

The lowest layer of ``loaders/``: the public API's first call imports this, not the
strategies' declarations (:mod:`loadscope.loaders.strategy` re-exports every name), so a
user's first ``load_file`` pays for four small declarations, not the registry's; and
``loadscope warm``'s defaults, which the API's ``prewarm`` takes.

May import: the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:
    import torch

WeightFormat = Literal["safetensors", "torch"]
#: What a strategy's :meth:`~loadscope.loaders.strategy.Strategy.load` yields: ``(name,
#: tensor)`` as each is usable.
Tensors: TypeAlias = Iterator[tuple[str, "torch.Tensor"]]

#: ``loadscope warm``'s and ``loadscope.prewarm``'s defaults (--threads, --block): the
#: fill (:mod:`loadscope.loaders.pagefill`) reads with them.
WARM_THREADS = 8
WARM_BLOCK_BYTES = 16 << 20


#: Size suffixes a byte-count knob takes (``block_bytes=16MiB``).
_SIZE_UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30}
_SIZE_UNITS["gib"] = 1 << 30


@dataclass(frozen=True, slots=True)
class Knob:
    """One tunable of a strategy: its name, default and help, and the values it takes.

    A text knob takes one of ``choices``; a number is an integer within ``minimum`` ..
    ``maximum`` (a ``*_bytes`` knob: 4 KiB .. 1 GiB, sizes like ``16MiB`` accepted;
    otherwise 1 .. 256), a multiple of ``multiple``. :meth:`parse` is the one check
    the CLI, the API and the worker all use.
    """

    name: str
    default: int | float | str
    help: str
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    multiple: int = 1

    def bounds(self) -> tuple[int, int]:
        """The inclusive range of a number knob."""
        lo, hi = (4096, 1 << 30) if self.name.endswith("_bytes") else (1, 256)
        return (
            lo if self.minimum is None else self.minimum,
            hi if self.maximum is None else self.maximum,
        )

    def takes(self) -> str:
        """What the knob takes, in words (for errors and ``--list-strategies``)."""
        if isinstance(self.default, str):
            return " | ".join(self.choices) if self.choices else "text"
        lo, hi = self.bounds()
        unit = "bytes" if self.name.endswith("_bytes") else "integer"
        text = f"{unit} {lo}..{hi}"
        return text + (f", a multiple of {self.multiple}" if self.multiple > 1 else "")

    def parse(self, value: object) -> int | float | str:
        """``value`` (a string from the command line, or a number) checked and converted.

        Raises ValueError naming the knob and what it takes.
        """
        if isinstance(self.default, str):
            text = str(value).strip().lower()
            if self.choices and text not in self.choices:
                raise ValueError(f"{self.name}={value!r}: expected {self.takes()}")
            return text
        number = _knob_int(value)
        lo, hi = self.bounds()
        if number is None or not lo <= number <= hi or number % self.multiple:
            raise ValueError(f"{self.name}={value!r}: expected {self.takes()}")
        return number


def _knob_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", str(value).lower())
    if m is None or m.group(2) not in _SIZE_UNITS:
        return None
    return int(m.group(1)) * _SIZE_UNITS[m.group(2)]


@dataclass(frozen=True, slots=True)
class FileRequest:
    """One file a trial loads; ``tensors`` None means all of them (else a sample)."""

    path: str
    size_bytes: int
    format: WeightFormat
    tensors: tuple[str, ...] | None = None


def knob_value(
    declared: Sequence[Knob],
    name: str,
    given: Mapping[str, Any],
    hints: Mapping[str, Any] | None = None,
) -> Any:
    """The value knob ``name`` of ``declared`` runs with, parsed: the one ``given``, else the
    probe's hint (``hints`` None: hints are not taken), else its default."""
    knob = next(k for k in declared if k.name == name)
    fallback = knob.default if hints is None else hints.get(name, knob.default)
    return knob.parse(given.get(name, fallback))
