"""An extra round that does not fit whole runs the favoured strategies' part of it: the
figures printed under a fix get their trials' spread before loadscope's own readers."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

from loadscope.engine.bench import BenchOptions, _Plan
from loadscope.engine.bench_records import Trial


def _plan(left_s: float, walls: dict[str, float], favoured: tuple[str, ...]) -> _Plan:
    options = BenchOptions(
        repeats=1, warmup=False, deadline=time.monotonic() + left_s, favoured=favoured
    )
    run = SimpleNamespace(options=options, sampled=SimpleNamespace(scopes={}, once=set(), sets={}))
    plan = _Plan(run, list(walls), ["cold"])  # type: ignore[arg-type]
    plan.trials = [replace(t, wall_s=walls[t.strategy]) for t in plan.trials]
    return plan


def test_a_round_that_fits_runs_whole() -> None:
    plan = _plan(60.0, {"mmap": 2.0, "direct": 3.0}, ("mmap",))
    assert plan.another_round()
    assert [t.strategy for t in plan.trials if t.repeat == 2] == ["mmap", "direct"]


def test_a_round_that_does_not_fit_runs_the_favoured_part() -> None:
    plan = _plan(10.0, {"mmap": 2.0, "direct": 20.0, "api": 3.0}, ("mmap", "api"))
    assert plan.another_round()
    assert sorted(t.strategy for t in plan.trials if t.repeat == 2) == ["api", "mmap"]
    assert all(isinstance(t, Trial) and not t.warmup for t in plan.trials)


def test_the_favoured_trials_that_fit_run_the_quickest_first() -> None:
    plan = _plan(3.0, {"mmap": 2.0, "direct": 20.0, "api": 3.0}, ("mmap", "api"))
    assert plan.another_round()
    assert [t.strategy for t in plan.trials if t.repeat == 2] == ["mmap"]


def test_nothing_is_added_when_no_favoured_trial_fits() -> None:
    plan = _plan(1.0, {"mmap": 2.0, "direct": 20.0, "api": 3.0}, ("mmap", "api"))
    assert not plan.another_round()
    assert not [t for t in plan.trials if t.repeat == 2]
    assert not _plan(10.0, {"mmap": 20.0, "direct": 20.0}, ()).another_round()
