"""``loadscope demo``: through the emulated disk where FUSE works, else locally, saying why."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from loadscope.diagnosis import demo
from loadscope.diagnosis.demo import DemoOptions, run_demo
from loadscope.report.brief import brief_lines
from loadscope.report.store import last
from loadscope.tools.emulator import EmulatorSettings, fuse_unavailable_reason, is_mounted
from tests.conftest import CliRunner

pytestmark = pytest.mark.integration


def _kept() -> dict[str, Any]:
    """The report the demo kept (the newest in this session's reports folder)."""
    path = last()
    assert path is not None
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def test_demo_without_fuse_explains_and_uses_local_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: CliRunner
) -> None:
    monkeypatch.setattr(demo, "fuse_unavailable_reason", lambda: "no /dev/fuse (test)")
    args = ["--size", "8MiB", "--budget", "15", "--work-dir", str(tmp_path), "--no-progress"]
    args += ["--stack", "safetensors"]  # where it runs is the subject, not which stack wins
    result = cli("demo", *args)
    assert result.code == 0, result.err
    # What it builds and serves goes with the progress (stderr); the answer to stdout.
    text = result.err + result.out
    assert "no emulated slow disk here (no /dev/fuse (test))" in result.err
    mount = _kept()["probe"]["files"][0]["mount"]
    assert mount["status"] == "ok" and mount["storage_class"] != "fuse"
    assert result.out.startswith("verdict: ") and "verdict: " in text
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(
    (why := fuse_unavailable_reason()) is not None, reason=f"emulated disk unavailable: {why}"
)
def test_demo_through_the_emulator(tmp_path: Path) -> None:
    out = io.StringIO()  # what it builds and serves (the CLI's stderr)
    options = DemoOptions(
        size_bytes=16 << 20,
        settings=EmulatorSettings(latency_s=0.002, jitter_s=0, readahead_kb=128),
        budget_s=20,
        work_dir=str(tmp_path),
        stacks=("safetensors",),
    )
    report = run_demo(options, out)
    assert report.bench is not None
    assert "hf-pretrained" in report.bench.skipped  # --stack safetensors: not timed
    mount = report.probe.files[0].storage.mount.data
    assert mount is not None and mount.storage_class == "fuse"
    assert report.bench is not None and any(t.status == "ok" for t in report.bench.trials)
    text = out.getvalue() + "\n".join(brief_lines(report.to_dict(), (), "kept"))
    assert "emulated network disk: 2 ms per read request" in text and "verdict: " in text
    assert list(tmp_path.iterdir()) == []
    assert not any(is_mounted(p) for p in tmp_path.glob("*/mnt"))
