"""``loadscope doctor`` end to end, and its Markdown report against a golden file."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadscope.doctor import run_doctor, to_markdown
from loadscope.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.synth import synthesize
from loadscope.targets import resolve
from tests.conftest import REPO_ROOT, run_loadscope

pytestmark = pytest.mark.integration
GOLDEN = REPO_ROOT / "tests" / "golden"


def test_markdown_matches_golden() -> None:
    doc = json.loads((GOLDEN / "doctor_report.json").read_text())
    assert to_markdown(doc) + "\n" == (GOLDEN / "doctor_report.md").read_text()


def test_report_command_renders_a_saved_report() -> None:
    result = run_loadscope("report", str(GOLDEN / "doctor_report.json"))
    assert result.code == 0, result.err
    assert result.out == (GOLDEN / "doctor_report.md").read_text()


def test_report_command_refuses_other_json(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"hello": 1}')
    result = run_loadscope("report", str(tmp_path / "x.json"))
    assert result.code == 5 and "not a loadscope doctor report" in result.err


@pytest.fixture
def slow_model(tmp_path: Path) -> Iterator[Path]:
    if (why := fuse_unavailable_reason()) is not None:
        pytest.skip(f"emulated slow disk unavailable: {why}")
    src = synthesize(tmp_path / "src", 64 << 20, seed=3)
    settings = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
    with emulated_disk(src.root, tmp_path / "mnt", settings) as disk:
        yield disk.path


def test_doctor_on_the_emulated_disk_recommends_what_the_trials_show(slow_model: Path) -> None:
    report = run_doctor(resolve(str(slow_model)), budget_s=60)
    advice = report.advice
    assert advice.verdict.status == "problem"
    top = advice.recommendations[0]
    assert top.id == "parallel-reads"
    assert report.bench is not None
    fastest = min(
        (s for s in report.bench.summary if s.cache == "cold" and s.median_seconds),
        key=lambda s: s.extrapolated_median_seconds or s.median_seconds or 0,
    )
    assert top.strategy in ("auto", "direct")
    assert fastest.strategy in ("auto", "direct")
    assert top.expected_speedup is not None and top.expected_speedup >= 3
    # mmap beat the full read on this mount: the advice says so instead of repeating folklore
    assert "read-whole-files" not in [r.id for r in advice.recommendations]
    assert any("folklore" in n for n in advice.notes)


@pytest.fixture
def tmpfs_model(synth_single: object) -> Iterator[Path]:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    d = shm / f"loadscope-doctor-{os.getpid()}"
    d.mkdir()
    synthesize(d, 8 << 20)
    try:
        yield d
    finally:
        shutil.rmtree(d)


def test_doctor_on_tmpfs_is_healthy(tmpfs_model: Path) -> None:
    result = run_loadscope("doctor", str(tmpfs_model), "--budget", "30", "--json", "-", timeout=300)
    assert result.code == 0, result.err[-2000:]
    doc = json.loads(result.out)
    assert doc["verdict"]["status"] == "healthy"
    assert doc["schema_version"] == 1 and "recommendations" in doc


def test_doctor_on_local_disk_says_nothing_to_fix(tmp_path: Path) -> None:
    model = synthesize(tmp_path / "m", 256 << 20, seed=4)
    report = run_doctor(resolve(str(model.root)), budget_s=60)
    assert report.advice.verdict.status == "healthy", report.advice.verdict.headline
    assert "nothing to fix" in report.advice.verdict.headline
