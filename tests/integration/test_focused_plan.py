"""Where the budget cannot run every strategy whole twice, the doctor runs the
routes' strategies and their defaults (what the answer prints) and leaves loadscope's
own readers out, saying so: at 256 MiB and --budget 30 one sampled trial of each swung
the printed figures 2x between runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadscope.diagnosis.trial_plan import (
    FAVOURED,
    INTERNAL_READERS,
    choose_strategies,
    plan_doctor,
)
from loadscope.engine.probing import run_probes
from loadscope.model.targets import resolve
from tests.conftest import slow_synthetic

pytestmark = pytest.mark.integration


def test_a_tight_budget_goes_to_the_printed_figures_and_a_large_one_to_every_trial(
    tmp_path: Path,
) -> None:
    with slow_synthetic(tmp_path, 64 << 20, seed=43, latency_s=0.005) as model:
        target = resolve(str(model))
        probe = run_probes(target, budget_s=6, local_disks=False)
    every = choose_strategies(probe)
    assert set(every) - set(FAVOURED), every  # there is evidence to leave out
    failures: list[str] = []
    tight = plan_doctor(target, probe, probe.elapsed_s + 12.0, "cpu", None, failures)
    assert set(tight.strategies) <= set(FAVOURED), tight.strategies
    assert not set(tight.strategies) & set(INTERNAL_READERS)
    assert "mmap" in tight.strategies and "api" in tight.strategies
    (said,) = [f for f in failures if f.startswith("evidence trials not run")]
    assert all(n in said for n in set(every) - set(tight.strategies)), said
    roomy: list[str] = []
    large = plan_doctor(target, probe, probe.elapsed_s + 3600.0, "cpu", None, roomy)
    assert large.strategies == every and large.sample is None and large.repeats >= 2
    assert not [f for f in roomy if f.startswith("evidence trials not run")]


def test_the_readahead_check_after_the_trials_has_its_time_kept_out_of_theirs(
    tmp_path: Path,
) -> None:
    """At 1 GiB and --budget 60 the doctor took 13% over its budget: the readahead check
    (its own fork server, two loads, from_pretrained once more) ran after the trials'
    deadline. Where it will run, its time is taken from the trials' before they are
    planned; where it will not (not allowed, or a large readahead already), nothing is."""
    from loadscope.diagnosis.trial_costs import readahead_reserve_s

    with slow_synthetic(tmp_path, 64 << 20, seed=44, latency_s=0.005) as model:
        target = resolve(str(model))
        probe = run_probes(target, budget_s=6, local_disks=False)
    reserve = readahead_reserve_s(probe, allowed=True)
    assert 3.0 < reserve < 15.0, reserve
    assert readahead_reserve_s(probe, allowed=False) == 0.0
    budget = probe.elapsed_s + 40.0
    plain = plan_doctor(target, probe, budget, "cpu", None, [])
    kept = plan_doctor(target, probe, budget, "cpu", None, [], reserve)
    assert kept.trial_s == pytest.approx(plain.trial_s - reserve)


def test_the_whole_only_routes_are_offered_late_in_the_plans_order(tmp_path: Path) -> None:
    """Issue 49: the routes' trials that only run whole, which a tight plan may skip, are
    handed to the bench to run at the end where time is left (each with its fixed cost
    and its load by the planner's rates), in the plan's order with the routes' baselines
    first; a plan whose whole loads fit hands none."""
    from loadscope.diagnosis.trial_plan import late_estimates

    with slow_synthetic(tmp_path, 64 << 20, seed=45, latency_s=0.005) as model:
        target = resolve(str(model))
        probe = run_probes(target, budget_s=6, local_disks=False)
    tight = plan_doctor(target, probe, probe.elapsed_s + 12.0, "cpu", None, [])
    late = late_estimates(probe, tight)
    whole_only = [s for s in tight.strategies if s in ("fastsafetensors", "runai")]
    assert list(late) == whole_only, (late, tight.strategies)  # one file: peers run whole
    assert all(fixed > 0 and load > 0 for fixed, load in late.values()), late
    roomy = plan_doctor(target, probe, probe.elapsed_s + 3600.0, "cpu", None, [])
    assert late_estimates(probe, roomy) == {}
