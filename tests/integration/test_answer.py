"""``loadscope doctor`` as a user runs it (issue 40): the answer on one screen, the full
report kept in the per-user reports folder and found again by ``report --last``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from loadscope.report.brief import LINES, height
from tests.conftest import run_loadscope


def test_doctor_prints_the_answer_on_one_screen_and_keeps_the_report(tmp_path: Path) -> None:
    env = {**os.environ, "LOADSCOPE_REPORTS": str(tmp_path / "reports")}
    result = run_loadscope(
        "doctor", "synthetic:8MiB", "--budget", "10", "--quiet", "--synth-dir", str(tmp_path),
        env=env, timeout=240,
    )  # fmt: skip
    assert result.code in (0, 10), result.err
    lines = result.out.splitlines()
    assert height(lines) <= LINES, result.out
    assert lines[0].startswith("verdict: ")
    kept = next(line for line in lines if line.startswith("full report: "))
    path = Path(kept.removeprefix("full report: ").strip())
    doc = json.loads(path.read_text())
    assert doc["verdict"]["headline"] in " ".join(" ".join(lines).split())
    again = run_loadscope("report", "--last", env=env)
    assert again.code == 0 and again.out.startswith("### loadscope doctor: "), again.err
