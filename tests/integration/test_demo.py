"""``loadscope demo``: through the emulated disk where FUSE works, else locally, saying why."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from loadscope import demo
from loadscope.demo import DemoOptions, run_demo
from loadscope.emulator import EmulatorSettings, fuse_unavailable_reason, is_mounted

pytestmark = pytest.mark.integration


def test_demo_without_fuse_explains_and_uses_local_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "fuse_unavailable_reason", lambda: "no /dev/fuse (test)")
    out = io.StringIO()
    report, bench = run_demo(
        DemoOptions(size_bytes=8 << 20, budget_s=2, work_dir=str(tmp_path), strategies=()), out
    )
    assert bench is None
    text = out.getvalue()
    assert "no emulated slow disk here (no /dev/fuse (test))" in text
    assert report.files[0].storage.mount.data is not None
    assert report.files[0].storage.mount.data.storage_class != "fuse"
    assert "what this shows" in text
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(
    (why := fuse_unavailable_reason()) is not None, reason=f"emulated disk unavailable: {why}"
)
def test_demo_through_the_emulator(tmp_path: Path) -> None:
    out = io.StringIO()
    options = DemoOptions(
        size_bytes=16 << 20,
        settings=EmulatorSettings(latency_s=0.002, jitter_s=0, readahead_kb=128),
        budget_s=3,
        work_dir=str(tmp_path),
        strategies=("mmap", "auto"),
    )
    report, bench = run_demo(options, out)
    assert bench is not None
    assert [t.status for t in bench.trials] == ["ok", "ok"]
    assert "x mmap" in out.getvalue()
    storage = report.files[0].storage
    assert storage.mount.data is not None and storage.mount.data.storage_class == "fuse"
    assert report.latency.data is not None and report.latency.data.p50_us >= 2000
    assert "emulated network disk: 2 ms per read request" in out.getvalue()
    assert list(tmp_path.iterdir()) == []
    assert not any(is_mounted(p) for p in tmp_path.glob("*/mnt"))
