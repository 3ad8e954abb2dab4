"""What a load chose and what it cost: :class:`LoadRecord` (per file, a
:class:`FileChoice`), and the calls' wall time as their caller waited (:func:`timed_call`).

``loadscope.load_file``, ``load_model`` and ``from_pretrained`` fill a record the caller
passes (``loaders/api.py``); ``loadscope.LoadRecord`` is this class.

May import: the standard library.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class FileChoice:
    """How one file was loaded, and why."""

    path: str
    #: "mmap" (mapped, as safetensors does), "direct" (O_DIRECT reads), "parallel"
    #: (buffered pread threads) or "torch.load" (a torch checkpoint, mmap=True).
    strategy: str
    reason: str
    size_bytes: int
    seconds: float
    #: Fraction of the file in the page cache before the load (sampled), None if unknown.
    residency: float | None = None
    threads: int | None = None
    block_bytes: int | None = None
    #: Bytes this process's own reads returned, where counted (a node-shared file: the
    #: chunks this rank read; the other ranks read the rest).
    read_bytes: int | None = None


@dataclass(slots=True)
class LoadRecord:
    """What a ``load_file`` / ``load_model`` / ``prewarm`` call chose, per file."""

    files: list[FileChoice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Seconds these calls spent importing torch and safetensors: a process's first load
    #: pays it (about a second for torch), a later one (or one after the caller's own ``import
    #: torch``) finds them imported and pays 0. Not in any file's ``seconds``.
    import_seconds: float = 0.0
    #: The calls' own wall time after their imports: checks, loads, waits and fallbacks.
    call_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        """The loads' time, file by file (the imports excluded: :attr:`wall_seconds`)."""
        return sum(f.seconds for f in self.files)

    @property
    def wall_seconds(self) -> float:
        """What the calls took as their caller waited: the imports they paid, then the
        calls themselves (every check, load and wait)."""
        return self.import_seconds + max(self.call_seconds, self.seconds)

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": [asdict(f) for f in self.files],
            "notes": list(self.notes),
            "import_seconds": self.import_seconds,
            "call_seconds": self.call_seconds,
            "wall_seconds": self.wall_seconds,
        }

    def __str__(self) -> str:
        lines = [f"{f.path}: {f.strategy} ({f.reason}), {f.seconds:.3g} s" for f in self.files]
        if self.import_seconds > 0:
            lines.append(
                f"importing torch and safetensors (a process's first load): "
                f"{self.import_seconds:.3g} s; {self.wall_seconds:.3g} s in all"
            )
        return "\n".join(lines + self.notes)


def check_record(record: object) -> LoadRecord | None:
    """``record`` as given when it is a :class:`LoadRecord` or None, else a ValueError."""
    if record is None or isinstance(record, LoadRecord):
        return record
    raise ValueError(
        f"record must be a loadscope.LoadRecord() (or None), not {type(record).__name__}"
    )


_calls = threading.local()


@contextlib.contextmanager
def timed_call(record: object) -> Iterator[None]:
    """The outermost public call's wall time, less the imports it paid (counted in
    ``import_seconds``), added to ``record.call_seconds`` when ``record`` is a
    :class:`LoadRecord` (a ``load_model`` that calls ``load_file`` per file counts once)."""
    depth = getattr(_calls, "depth", 0)
    _calls.depth = depth + 1
    started = time.monotonic()
    imported = record.import_seconds if isinstance(record, LoadRecord) else 0.0
    try:
        yield
    finally:
        _calls.depth = depth
        if depth == 0 and isinstance(record, LoadRecord):
            spent = time.monotonic() - started - (record.import_seconds - imported)
            record.call_seconds += max(0.0, spent)
