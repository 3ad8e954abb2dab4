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
from typing import Any, TextIO

SCHEMA_VERSION = 1
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
_NAMES = {cls: name for name, cls in _TYPES.items()}


def encode(event: Event) -> str:
    """One JSON line (no newline) for ``event``."""
    return json.dumps({"v": SCHEMA_VERSION, "event": _NAMES[type(event)], **asdict(event)})


def decode(line: str) -> Event:
    """Parse one line into an event; raises :class:`ProtocolError` saying what is wrong."""
    text = line.strip()
    if not text:
        raise ProtocolError("empty line")
    try:
        doc = json.loads(text)
    except ValueError:
        raise ProtocolError(f"not JSON: {text[:80]!r}") from None
    if not isinstance(doc, dict):
        raise ProtocolError(f"not a JSON object: {text[:80]!r}")
    if doc.get("v") != SCHEMA_VERSION:
        raise ProtocolError(f"schema version {doc.get('v')!r}, expected {SCHEMA_VERSION}")
    cls = _TYPES.get(str(doc.get("event")))
    if cls is None:
        raise ProtocolError(f"unknown event {doc.get('event')!r}")
    fields = {k: v for k, v in doc.items() if k not in ("v", "event")}
    try:
        event: Event = cls(**fields)
    except TypeError as exc:
        raise ProtocolError(f"bad {doc['event']} event: {exc}") from None
    return event


class Emitter:
    """Writes events to the worker's stdout; rate-limits progress to ~20 Hz."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._last_progress = 0.0

    def emit(self, event: Event) -> None:
        self.stream.write(encode(event) + "\n")
        self.stream.flush()

    def progress(self, bytes_done: int, tensors_done: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_progress >= PROGRESS_INTERVAL_S:
            self._last_progress = now
            self.emit(Progress(now, bytes_done, tensors_done))
