"""A warm trial is warm only when every page is resident, read again where one is not.

On slow storage one missing page is one slow read inside a "warm" load: a warm trial at
99.6% residency came out 25x slower than a fully resident one and was taken for a warm
figure. ``prepare_cache`` pre-reads the files again while mincore finds any page missing,
and fails the trial's cache state, saying which files, when some stay short.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loadscope.loaders import cachestate
from loadscope.probes.pagecache import ColdCache


@pytest.fixture
def files(tmp_path: Path) -> list[tuple[str, int]]:
    out = []
    for name in ("a.safetensors", "b.safetensors"):
        p = tmp_path / name
        p.write_bytes(b"\0" * (1 << 16))
        out.append((str(p), 1 << 16))
    return out


def _fake(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[float]]) -> list[list[str]]:
    fills: list[list[str]] = []

    class Fill:
        def __init__(self, ranges: object, **_kw: object) -> None:
            self.paths = sorted({Path(r.path).name for r in ranges})  # type: ignore[attr-defined]

        def run(self) -> None:
            fills.append(self.paths)

    def fraction(path: str) -> tuple[float, bool]:
        seq = answers[Path(path).name]
        return (seq.pop(0) if len(seq) > 1 else seq[0]), False

    monkeypatch.setattr(cachestate, "PageFill", Fill)
    monkeypatch.setattr(cachestate, "checked_fraction", fraction)
    return fills


def test_a_missing_page_is_read_again(
    monkeypatch: pytest.MonkeyPatch, files: list[tuple[str, int]]
) -> None:
    fills = _fake(monkeypatch, {"a.safetensors": [0.996, 1.0], "b.safetensors": [1.0]})
    ok, mean, note = cachestate.prepare_cache(files, "warm", ColdCache())
    assert ok and mean == 1.0, note
    # The second fill reads only the file that was short.
    assert fills == [["a.safetensors", "b.safetensors"], ["a.safetensors"]]


def test_a_file_that_stays_short_is_not_warm(
    monkeypatch: pytest.MonkeyPatch, files: list[tuple[str, int]]
) -> None:
    fills = _fake(monkeypatch, {"a.safetensors": [0.996], "b.safetensors": [1.0]})
    ok, mean, note = cachestate.prepare_cache(files, "warm", ColdCache())
    assert not ok
    assert mean is not None and mean > cachestate.WARM_ENOUGH
    assert "a.safetensors" in note and "b.safetensors" not in note
    assert len(fills) == cachestate.WARM_FILLS


def test_real_files_end_wholly_resident(files: list[tuple[str, int]]) -> None:
    ok, mean, note = cachestate.prepare_cache(files, "warm", ColdCache())
    assert ok and mean == 1.0, note
