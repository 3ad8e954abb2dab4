"""The versioned JSON-lines protocol between a trial's worker process and the parent.

One event per line on the worker's stdout, each with ``"v"`` (the schema
version) and ``"event"``: ``start``, ``progress`` (bytes and tensors done,
monotonic time; at most ~20 Hz), ``done`` (the worker's own metrics) or
``failed`` (a reason). Anything else on stdout — a stray print from a library,
a truncated line from a worker that died mid-write — is a protocol error the
parent reports, never a crash of the parent.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TextIO, TypeVar

SCHEMA_VERSION = 1
E = TypeVar("E")
#: Progress events closer together than this are dropped by the emitter.
PROGRESS_INTERVAL_S = 0.05


class ProtocolError(ValueError):
    """A line from a worker that is not a valid event."""


@dataclass(frozen=True, slots=True)
class Start:
    strategy: str
    pid: int
    t: float  # time.monotonic() in the worker (same clock as the parent on Linux)
    total_bytes: int
    total_tensors: int
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Progress:
    t: float
    bytes_done: int
    tensors_done: int


@dataclass(frozen=True, slots=True)
class Done:
    t: float
    seconds: float
    first_tensor_s: float | None
    bytes: int
    tensors: int
    #: tensor name -> digest of its bytes, computed after the timed region.
    digests: dict[str, str]
    peak_rss_bytes: int
    #: What the strategy decided and why (``auto``), its knobs, notes.
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Failed:
    t: float
    reason: str


Event = Start | Progress | Done | Failed
_TYPES: dict[str, type[Any]] = {
    "start": Start,
    "progress": Progress,
    "done": Done,
    "failed": Failed,
}


class JsonLines(Generic[E]):
    """A JSON-lines codec for one family ``E`` of event dataclasses, tagged by name.

    Each line is ``{"v": version, "event": name, **fields}``; :meth:`decode` raises
    ``error`` (a ValueError subclass) saying what is wrong with a line. The trial
    worker's events and the rank events share it.
    """

    def __init__(self, types: dict[str, type[Any]], error: type[ValueError], version: int) -> None:
        self.types, self.error, self.version = types, error, version
        self.names = {cls: name for name, cls in types.items()}

    def encode(self, event: E) -> str:
        """One JSON line (no newline) for ``event``."""
        instance: Any = event  # one of the dataclasses in ``types``
        return json.dumps({"v": self.version, "event": self.names[type(event)], **asdict(instance)})

    def decode(self, line: str) -> E:
        """Parse one line into an event; raises ``error`` saying what is wrong."""
        text = line.strip()
        if not text:
            raise self.error("empty line")
        try:
            doc = json.loads(text)
        except ValueError:
            raise self.error(f"not JSON: {text[:80]!r}") from None
        if not isinstance(doc, dict):
            raise self.error(f"not a JSON object: {text[:80]!r}")
        if doc.get("v") != self.version:
            raise self.error(f"schema version {doc.get('v')!r}, expected {self.version}")
        cls = self.types.get(str(doc.get("event")))
        if cls is None:
            raise self.error(f"unknown event {doc.get('event')!r}")
        fields = {k: v for k, v in doc.items() if k not in ("v", "event")}
        try:
            event: E = cls(**fields)
        except TypeError as exc:
            raise self.error(f"bad {doc['event']} event: {exc}") from None
        return event


_CODEC: JsonLines[Event] = JsonLines(_TYPES, ProtocolError, SCHEMA_VERSION)
#: One JSON line (no newline) for an event; and one line parsed into an event (raises
#: :class:`ProtocolError` saying what is wrong).
encode, decode = _CODEC.encode, _CODEC.decode


class LineWriter(Generic[E]):
    """Writes each event as one JSON line to ``stream`` (a child's stdout), flushed at once
    so the parent sees it as it happens. The trial worker's and the ranks' events share it."""

    def __init__(self, stream: TextIO, codec: JsonLines[E]) -> None:
        self.stream = stream
        self._codec = codec

    def emit(self, event: E) -> None:
        self.stream.write(self._codec.encode(event) + "\n")
        self.stream.flush()


class Emitter(LineWriter[Event]):
    """Writes events to the worker's stdout; rate-limits progress to ~20 Hz."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream, _CODEC)
        self._last_progress = 0.0

    def progress(self, bytes_done: int, tensors_done: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_progress >= PROGRESS_INTERVAL_S:
            self._last_progress = now
            self.emit(Progress(now, bytes_done, tensors_done))
