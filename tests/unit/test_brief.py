"""The answer on one screen (issue 40): ``doctor`` and ``demo`` print, within 24 lines at
80 columns, the verdict first, then the top fix in the user's stack with its number and
code, and where the full report is — for a problem, a healthy disk and a run that could
not measure, with a 70-character model path and three stacks installed."""

from __future__ import annotations

import copy
import json
import re
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


def _numbers(line: str) -> list[str]:
    return re.findall(r"\d+\.\d+x", line)


def test_a_problem_leads_with_the_verdict_then_the_users_stack_fix_and_its_code() -> None:
    doc = _doc("doctor_stacks")
    lines = brief_lines(doc, THREE, SAVED)
    _fits(lines)
    text = "\n".join(lines)
    # The detected stack's best routes, each with its own number and code, the higher first.
    vllm = [line for line in lines if line.startswith("  vllm (")]
    assert [v.split(" - ")[0] for v in vllm] == ["  vllm (a flag)", "  vllm (no code change)"]
    assert float(_numbers(vllm[0])[0][:-1]) >= float(_numbers(vllm[1])[0][:-1])
    assert f"vllm serve {MODEL} --load-format runai_streamer" in text
    assert "transformers (no code change) - 2.7x vs hf-pretrained cold" in text
    # Three installed, two shown: the third named with the option that shows it.
    assert "also installed: diffusers; --stack NAME" in text
    assert text.index("vllm (") < text.index("evidence: ") < text.index("full report: ")
    assert "best read 1.06 GB/s" in text


def test_the_verdicts_number_is_one_of_the_routes_printed_below_it() -> None:
    """The top fix's number (13.8x, loadscope's own reader) is no route of vLLM's or
    transformers': the verdict then says the problem without it, and every number shown
    is a route's own, with its code under it."""
    doc = _doc("doctor_stacks")
    doc["verdict"]["problem"] = doc["verdict"]["headline"].split(", 13.8x")[0]
    lines = brief_lines(doc, THREE, SAVED)
    head = " ".join(lines[: lines.index("")])
    assert "13.8x" not in "\n".join(lines)
    assert not _numbers(head.split(":", 2)[-1].split("(")[0]), head
    # For the library call, whose route carries the top fix's number, the verdict keeps it.
    doc["recommendations"][0]["expected_speedup"] = 11.0
    lines = brief_lines(doc, ("safetensors",), SAVED)
    assert "fix: " in "\n".join(lines)


def test_a_stacks_no_code_route_is_its_best_measured_across_the_fixes() -> None:
    """Readahead measured (fix 3) above warm-first (fix 1's route): the no-code route shown
    for transformers and for the shell is the readahead, by number; below it, warm-first."""
    doc = _doc("doctor_stacks")
    readahead = next(r for r in doc["recommendations"] if r["id"] == "raise-readahead")
    first = "# run first (root): echo 8192 | sudo tee /sys/class/bdi/0:40/read_ahead_kb\n"
    readahead["snippets"].append({"stack": "transformers", "code": first + "model = ..."})
    for snip in readahead["snippets"]:
        if snip["stack"] in ("transformers", "shell"):
            snip.update(strategy="readahead", route="no code change", speedup=9.2, how="measured")
            snip.update(what="the mount's readahead raised", trial_ids=[1, 2], note="")
    lines = brief_lines(doc, ("transformers",), SAVED)
    text = "\n".join(lines)
    assert "transformers (no code change) - 9.2x" in text and "read_ahead_kb" in text
    assert "2.7x vs hf-pretrained" not in text  # one no-code route: the better
    shell = brief_lines(doc, ("shell",), SAVED, asked=True)
    numbers = [
        float(n[:-1]) for line in shell if line.startswith("  shell (") for n in _numbers(line)[:1]
    ]
    assert numbers == sorted(numbers, reverse=True) and numbers[0] == 9.2, shell
    # Readahead measured below warm-first: warm-first is the one.
    for snip in readahead["snippets"]:
        if snip.get("strategy") == "readahead":
            snip["speedup"] = 1.2
    text = "\n".join(brief_lines(doc, ("transformers",), SAVED))
    assert "2.7x vs hf-pretrained" in text and "1.2x" not in text


def test_routes_whose_trials_overlap_are_a_tie() -> None:
    doc = _doc("doctor_stacks")
    top = doc["recommendations"][0]
    vllm = [s for s in top["snippets"] if s["stack"] == "vllm" and s.get("speedup")]
    vllm[0].update(low=3.0, high=6.8)
    vllm[1].update(low=3.2, high=3.9)
    text = " ".join(" ".join(brief_lines(doc, ("vllm",), SAVED)).split())
    assert "vllm: a tie (their trials' ranges overlap)" in text
    vllm[0].update(low=5.0, high=6.0)
    text = " ".join(" ".join(brief_lines(doc, ("vllm",), SAVED)).split())
    assert "a tie" not in text


def test_a_stacks_route_not_measured_at_this_budget_is_named_with_why() -> None:
    doc = _doc("doctor_stacks")
    top = doc["recommendations"][0]
    route = next(s for s in top["snippets"] if s.get("strategy") == "hf-load-model")
    route["note"] = "not measured here: skipped: cannot be sampled (--budget 60 measures it)"
    text = " ".join(" ".join(brief_lines(doc, ("transformers",), SAVED)).split())
    assert "not measured: transformers (code change) - not measured here: skipped" in text


def test_no_stack_installed_shows_the_library_call_and_the_shell() -> None:
    lines = brief_lines(_doc("doctor_stacks"), (), SAVED)
    _fits(lines)
    text = "\n".join(lines)
    assert "safetensors (code change) - 11.0x" in text
    assert "shell (no code change) - 3.5x" in text


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
    assert "evidence: " in text and "(the rest: in the full report)" in text
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


def test_a_bucket_asked_for_and_not_timed_is_said_on_the_screen() -> None:
    """``doctor MNT --bucket s3://...`` whose bucket could not be read: the one-screen
    answer says so (it was only in the full report), and still fits the screen."""
    doc = _doc("doctor_stacks")
    why = "--bucket s3://b/llm: not timed: s3://b: no credentials found (set AWS_ACCESS_KEY_ID)"
    doc["failures"] = [*doc.get("failures", []), why]
    lines = brief_lines(doc, ("vllm",), SAVED, asked=True)
    assert why in " ".join(" ".join(lines).split())
    assert height(lines) <= LINES


def test_a_profiled_start_says_what_a_load_fix_can_save_on_the_screen() -> None:
    """``doctor --cmd ... --profile``: the one-screen answer says how much of the user's
    start-up is reading weights (what a load fix saves at most) and the phase that holds
    most of it, as the full report does."""
    doc = _doc("doctor_stacks")
    doc["user_command"] = {
        "argv": ["python", "serve.py"],
        "variants": [],
        "phases": {
            "wall_s": 90.0,
            "samples": 2000,
            "phases": [
                {"name": "compilation", "seconds": 63.0, "share": 0.7, "frames": []},
                {"name": "reading weights", "seconds": 9.0, "share": 0.1, "frames": []},
                {"name": "imports", "seconds": 18.0, "share": 0.2, "frames": []},
            ],
            "reason": "",
            "rate_hz": 25,
        },
    }
    lines = brief_lines(doc, ("vllm",), SAVED, asked=True)
    text = " ".join(" ".join(lines).split())
    assert "your start: reading weights: 9.00 s of 90 s (10%): a load fix saves at most" in text
    assert "your start: 70% in compilation: a persistent compile cache" in text
    assert height(lines) <= LINES


def test_the_users_own_command_is_on_the_one_screen_answer() -> None:
    """``doctor --cmd``: its cold time and the best no-code fix's ratio, or why it was not
    timed with the last line the command wrote (a missing module was only in the full
    report); a fix that did not help is not offered as one."""

    def user(as_is: float | None, warm: float | None, tail: list[str]) -> dict[str, Any]:
        run = {"reason": "" if as_is else "the command failed (exit 1): not timed"}
        return {
            "variants": [
                {"name": "as-is", "median_seconds": as_is, "runs": [run | {"tail": tail}]},
                {"name": "warm", "median_seconds": warm, "speedup": as_is / warm
                 if as_is and warm else None, "runs": []},
            ]
        }  # fmt: skip

    doc = _doc("doctor_stacks")
    doc["user_command"] = user(None, None, ["Traceback", "ModuleNotFoundError: No module 'x'", ""])
    lines = brief_lines(doc, THREE, SAVED)
    _fits(lines)
    text = " ".join(" ".join(lines).split())
    assert (
        "your command: the command failed (exit 1): not timed (its last line:"
        " ModuleNotFoundError: No module 'x')" in text
    )
    doc["user_command"] = user(9.0, 3.0, [])
    text = " ".join(" ".join(brief_lines(doc, THREE, SAVED)).split())
    assert "your command, cold: 9 s as it is; 3.00x with loadscope warm first" in text
    doc["user_command"] = user(9.0, 9.5, [])
    text = " ".join(" ".join(brief_lines(doc, THREE, SAVED)).split())
    assert "your command, cold: 9 s as it is; no no-code fix sped it up" in text
