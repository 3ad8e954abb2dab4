"""Issue 49: at 1 GiB and --budget 60 transformers' warm-first (``hf-prewarm``, which
only runs whole) had no figure in 5 of 5 doctor runs while the peers' trials each had
a sample. Where one of loadscope's own routes has no trial, the other trials give way
one at a time (the evidence first, then the peers that run whole) until it has one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from loadscope.diagnosis import trial_plan

STRATEGIES = (
    "mmap",
    "auto",
    "api",
    "prewarm",
    "vllm-prefetch",
    "fastsafetensors",
    "runai",
    "hf-pretrained",
    "hf-prewarm",
    "hf-load-model",
)
TOTAL = 1000


def _planner(room_without: set[str]) -> Any:
    """A planner that gives hf-prewarm a whole load only once none of ``room_without``
    is planned; every other trial a sample."""

    def plan(_probe: Any, trials: list[tuple[str, str]], remaining: float) -> Any:
        names = {s for s, _ in trials}
        room = not (names & room_without) or remaining >= 100.0
        whole = {s for s in names if s.startswith("hf-") and (room or s != "hf-prewarm")}
        sizes = {t: TOTAL if t[0] in whole else 10 for t in trials}
        return 1, 10, sizes

    return plan


def _make_room(monkeypatch: pytest.MonkeyPatch, room_without: set[str]) -> Any:
    probe = SimpleNamespace(files=[object()], target={"total_bytes": TOTAL})
    planner = _planner(room_without)
    monkeypatch.setattr(trial_plan, "plan_trials", planner)
    trials = [(s, "cold") for s in STRATEGIES]
    failures: list[str] = []
    before = planner(probe, trials, 0.0)
    assert trial_plan._unrun(probe, trials, before, trial_plan.OWN_ROUTES) == ["hf-prewarm"]
    kept, fewer, after = trial_plan._make_room(probe, STRATEGIES, trials, 50.0, before, failures)
    return probe, kept, fewer, after, failures


def test_the_evidence_then_the_peers_that_run_whole_give_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probe, kept, fewer, after, failures = _make_room(monkeypatch, {"fastsafetensors", "runai"})
    assert "hf-prewarm" in kept and not trial_plan._unrun(probe, fewer, after, kept)
    # auto (evidence) went first, then the whole-only peers; vLLM's prefetch, sampled,
    # stays: the room was made without it.
    assert set(STRATEGIES) - set(kept) == {"auto", "fastsafetensors", "runai"}
    assert "vllm-prefetch" in kept
    assert failures == [
        "evidence trials not run (auto): the budget went to the figures the answer prints"
        " (a larger --budget runs them too)"
    ]


def test_nothing_is_left_out_where_that_would_not_give_the_route_a_trial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _probe, kept, _fewer, _after, failures = _make_room(monkeypatch, {"hf-pretrained"})
    assert kept == STRATEGIES and failures == []


def test_own_routes_are_read_from_the_routes_code() -> None:
    own = set(trial_plan.OWN_ROUTES)
    assert {"mmap", "api", "prewarm", "hf-pretrained", "hf-prewarm", "hf-load-model"} <= own
    assert not own & {"fastsafetensors", "runai", "vllm-prefetch", "fullread", "auto"}


def test_the_budget_that_runs_the_trials_that_gave_way_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every trial has room from 100 s of trials on: at 50 s that is 2x the budget."""
    probe, *_ = _make_room(monkeypatch, {"fastsafetensors", "runai"})
    assert trial_plan._budget_for(probe, STRATEGIES, 50.0, 30.0) == 60
    assert trial_plan._budget_for(probe, STRATEGIES, 10.0, 30.0) is None  # past 8x
