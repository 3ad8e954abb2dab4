"""The answer on one screen (issue 40): ``doctor`` and ``demo`` print, within 24 lines at
80 columns, the verdict first, then the top fix in the user's stack with its number and
code, and where the full report is — for a problem, a healthy disk and a run that could
not measure, with a 70-character model path and three stacks installed."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from loadscope.report.brief import LINES, WIDTH, brief_lines, height

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
MODEL = "/mnt/shared-weights/organisation/llama-3.1-70b-instruct/snapshots/abcd"
assert len(MODEL) == 70
THREE = ("vllm", "transformers", "diffusers")
SAVED = "/home/someone/.local/state/loadscope/reports/doctor-2026-12-06T10-15-00-abcdef.json"


def _doc(name: str) -> dict[str, Any]:
    text = (GOLDEN / f"{name}.json").read_text().replace("<model>", MODEL)
    doc: dict[str, Any] = json.loads(text)
    return doc


def _fits(lines: list[str]) -> None:
    assert height(lines) <= LINES, "\n".join(lines)
    assert lines[0].startswith("verdict: ")
    assert any(line.startswith("full report: ") for line in lines)


def test_a_problem_leads_with_the_verdict_then_the_users_stack_fix_and_its_code() -> None:
    doc = _doc("doctor_stacks")
    lines = brief_lines(doc, THREE, SAVED)
    _fits(lines)
    text = "\n".join(lines)
    # Second: the fix with its number; then the detected stack's route with its own number
    # and code, the model's path in it.
    fix = next(i for i, line in enumerate(lines) if line.startswith("fix: "))
    assert fix <= 4 and "13.8x" in lines[fix]
    assert lines[fix + 1].startswith("  vllm (a flag) - measured 5.5x")
    assert f"vllm serve {MODEL} --load-format runai_streamer" in text
    assert "transformers (no code change) - measured 2.7x" in text
    # Three installed, two shown: the third named with the option that shows it.
    assert "also installed: diffusers; --stack NAME" in text
    assert text.index("fix: ") < text.index("evidence: ") < text.index("full report: ")
    assert "best read 1.06 GB/s" in text


def test_no_stack_installed_shows_the_library_call_and_the_shell() -> None:
    lines = brief_lines(_doc("doctor_stacks"), (), SAVED)
    _fits(lines)
    text = "\n".join(lines)
    assert "safetensors (code change) - measured 11.0x" in text
    assert "shell (no code change) - measured 3.5x" in text


def test_a_stack_the_top_fix_has_no_route_for_gets_the_best_no_code_fix() -> None:
    doc = _doc("doctor_emulated")  # a report from before per-stack routes
    lines = brief_lines(doc, ("transformers",), SAVED)
    _fits(lines)
    text = "\n".join(lines)
    assert "no route" in text and "read_ahead_kb" in text


def test_a_healthy_disk_says_so_and_names_the_optional_tips() -> None:
    doc = _doc("doctor_stacks")
    doc["verdict"] = {
        "status": "healthy",
        "headline": "healthy: local-block storage, nothing to fix",
    }
    for rec in doc["recommendations"]:
        rec["optional"] = True
    lines = brief_lines(doc, THREE, SAVED)
    _fits(lines)
    assert not any(line.startswith("fix: ") for line in lines)
    assert any(line.startswith("optional: ") for line in lines)


def test_a_run_that_could_not_measure_says_why_and_where_the_report_is() -> None:
    doc = copy.deepcopy(_doc("doctor_stacks"))
    doc["verdict"] = {"status": "unmeasured", "headline": "could not measure: no trial completed"}
    doc["recommendations"] = []
    lines = brief_lines(doc, THREE, SAVED)
    _fits(lines)
    assert lines[0] == "verdict: could not measure: no trial completed"
    assert not any(line.startswith(("fix: ", "also: ")) for line in lines)


def test_every_line_is_within_80_columns_but_code_and_the_reports_path() -> None:
    """Code and the path stay whole, to copy (the terminal wraps them; ``height`` counts
    the rows they take)."""
    lines = brief_lines(_doc("doctor_stacks"), THREE, SAVED)
    prose = [line for line in lines if not line.startswith(("    ", "full report: "))]
    assert all(len(line) <= WIDTH for line in prose), prose


def test_a_long_route_is_cut_and_the_evidence_and_the_reports_path_stay() -> None:
    doc = _doc("doctor_stacks")
    top = doc["recommendations"][0]
    vllm = next(s for s in top["snippets"] if s["stack"] == "vllm")
    vllm["code"] = "\n".join(f"vllm serve {MODEL} --flag-{i}" for i in range(40))
    lines = brief_lines(doc, THREE, SAVED)
    _fits(lines)
    text = "\n".join(lines)
    assert "evidence: " in text and "loadscope report --last" in text
    # The stack whose block did not fit is named with the option that shows it.
    assert "also installed: transformers, diffusers; --stack NAME" in text


def test_the_no_code_fallback_can_be_the_copy_to_a_local_disk() -> None:
    """A stack the top fix has no route for gets the best no-code fix: here the copy (its
    server line), with the copy's own number, and it is not listed again under "also"."""
    doc = _doc("doctor_stacks")
    top = doc["recommendations"][0]
    top["snippets"] = [s for s in top["snippets"] if s["stack"] != "sglang"]
    doc["recommendations"] = [r for r in doc["recommendations"] if r["id"] != "raise-readahead"]
    lines = brief_lines(doc, ("sglang",), SAVED)
    _fits(lines)
    text = "\n".join(lines)
    assert "sglang: no route of this fix; instead, Copy the model to a local disk" in text
    assert "(31.3x estimated)" in " ".join(text.split()) and "--model-path /tmp/model-copy" in text
    assert not any(line.startswith("also: ") and "Copy the model" in line for line in lines)


def test_stacks_named_with_stack_are_not_called_installed() -> None:
    """Three named with --stack, two shown: the third is one the user asked for (it may
    not be installed here), not "also installed"."""
    stacks = ("vllm", "transformers", "diffusers")
    text = "\n".join(brief_lines(_doc("doctor_stacks"), stacks, SAVED, asked=True))
    assert "also asked for: diffusers; --stack NAME" in text and "installed" not in text
