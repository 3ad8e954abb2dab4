"""``loadscope demo``: through the emulated disk where FUSE works, else locally, saying why."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from loadscope.diagnosis import demo
from loadscope.diagnosis.demo import DemoOptions, run_demo
from loadscope.tools.emulator import EmulatorSettings, fuse_unavailable_reason, is_mounted

pytestmark = pytest.mark.integration


def test_demo_without_fuse_explains_and_uses_local_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo, "fuse_unavailable_reason", lambda: "no /dev/fuse (test)")
    out = io.StringIO()
    report = run_demo(DemoOptions(size_bytes=8 << 20, budget_s=15, work_dir=str(tmp_path)), out)
    text = out.getvalue()
    assert "no emulated slow disk here (no /dev/fuse (test))" in text
    mount = report.probe.files[0].storage.mount.data
    assert mount is not None and mount.storage_class != "fuse"
    assert text.splitlines()[3].startswith("verdict: ") or "verdict: " in text
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(
    (why := fuse_unavailable_reason()) is not None, reason=f"emulated disk unavailable: {why}"
)
def test_demo_through_the_emulator(tmp_path: Path) -> None:
    out = io.StringIO()
    options = DemoOptions(
        size_bytes=16 << 20,
        settings=EmulatorSettings(latency_s=0.002, jitter_s=0, readahead_kb=128),
        budget_s=20,
        work_dir=str(tmp_path),
    )
    report = run_demo(options, out)
    mount = report.probe.files[0].storage.mount.data
    assert mount is not None and mount.storage_class == "fuse"
    assert report.bench is not None and any(t.status == "ok" for t in report.bench.trials)
    text = out.getvalue()
    assert "emulated network disk: 2 ms per read request" in text and "verdict: " in text
    assert list(tmp_path.iterdir()) == []
    assert not any(is_mounted(p) for p in tmp_path.glob("*/mnt"))
