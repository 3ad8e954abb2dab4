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
    run = SimpleNamespace(
        options=options, sampled=SimpleNamespace(scopes={}, once=set(), sets={}), late={}
    )
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


def test_a_favoured_trial_run_whole_once_joins_the_extra_rounds() -> None:
    """A whole-only trial the plan runs once (round 1 only) gets its second trial in an
    extra round when it fits: a figure printed under a fix from one trial has no spread.
    A trial that failed is not run again."""
    options = BenchOptions(
        repeats=2, warmup=False, deadline=time.monotonic() + 30.0, favoured=("hf", "mmap")
    )
    once = {("hf", "cold"), ("bad", "cold")}
    run = SimpleNamespace(
        options=options, sampled=SimpleNamespace(scopes={}, once=once, sets={}), late={}
    )
    walls = {"mmap": 1.0, "hf": 8.0, "bad": 1.0}
    plan = _Plan(run, list(walls), ["cold"])  # type: ignore[arg-type]
    assert [t.strategy for t in plan.trials if t.repeat == 2] == ["mmap"]  # once: round 1
    plan.trials = [
        replace(t, wall_s=walls[t.strategy], status="failed" if t.strategy == "bad" else "ok")
        for t in plan.trials
    ]
    assert plan.another_round()
    assert sorted(t.strategy for t in plan.trials if t.repeat == 3) == ["hf", "mmap"]
    assert all(t.wall_s is None and t.id == 0 for t in plan.trials if t.repeat == 3)  # not run
    tight = _Plan(run, list(walls), ["cold"])  # type: ignore[arg-type]
    tight.trials = [replace(t, wall_s=walls[t.strategy], status="ok") for t in tight.trials]
    run.options = replace(options, deadline=time.monotonic() + 5.0)
    assert tight.another_round()  # mmap's round fits, the 8 s whole load does not
    assert [t.strategy for t in tight.trials if t.repeat == 3] == ["mmap"]
