"""The worker event protocol: round trips, and every kind of bad line is a ProtocolError."""

from __future__ import annotations

import io
import json

import pytest

from loadscope.loaders.events import (
    SCHEMA_VERSION,
    Done,
    Emitter,
    Failed,
    Progress,
    ProtocolError,
    Start,
    decode,
    encode,
)


@pytest.mark.parametrize(
    "event",
    [
        Start("mmap", 123, 1.5, 1 << 20, 10, {"x": 1}),
        Progress(2.0, 4096, 1),
        Done(3.0, 0.5, 0.01, 1 << 20, 10, {"a": "deadbeef:8"}, 1 << 27, {"io": {"majflt": 3}}),
        Failed(4.0, "MemoryError"),
    ],
)
def test_round_trip(event: object) -> None:
    line = encode(event)  # type: ignore[arg-type]
    assert "\n" not in line
    assert json.loads(line)["v"] == SCHEMA_VERSION
    assert decode(line) == event


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("", "empty"),
        ("hello from a library print", "not JSON"),
        ('{"v": 1, "event": "progress", "t": 1.0, "bytes_done": 5', "not JSON"),  # cut mid-write
        ("[1, 2]", "not a JSON object"),
        (
            '{"v": 99, "event": "progress", "t": 1, "bytes_done": 0, "tensors_done": 0}',
            "schema version",
        ),
        ('{"event": "progress", "t": 1, "bytes_done": 0, "tensors_done": 0}', "schema version"),
        ('{"v": 1, "event": "explode"}', "unknown event"),
        ('{"v": 1, "event": "progress", "t": 1}', "bad progress"),
        ('{"v": 1, "event": "failed", "t": 1, "reason": "x", "extra": 2}', "bad failed"),
    ],
)
def test_malformed_lines(line: str, says: str) -> None:
    with pytest.raises(ProtocolError, match=says):
        decode(line)


def test_emitter_rate_limits_progress() -> None:
    out = io.StringIO()
    emitter = Emitter(out)
    for i in range(1000):
        emitter.progress(i, i)
    emitter.progress(1000, 1000, force=True)
    lines = out.getvalue().splitlines()
    assert 2 <= len(lines) < 50  # ~20 Hz, not one line per call
    last = decode(lines[-1])
    assert isinstance(last, Progress) and last.bytes_done == 1000
