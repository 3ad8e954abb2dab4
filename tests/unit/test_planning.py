"""The budget planner: whole loads when they fit, else samples sized by each trial's rate."""

from __future__ import annotations

import pytest

from loadscope.engine.planning import CostModel, plan_budget
from loadscope.engine.sampling import fit_fractions

GB = 1e9
MODEL = 1 << 30


def costs(**kw: float) -> CostModel:
    rates = {
        ("mmap", "cold"): 1 / (0.1 * GB),
        ("auto", "cold"): 1 / GB,
        ("mmap", "warm"): 1 / (10 * GB),
    }
    return CostModel(rates, kw.pop("fixed", 0.5), **kw)  # type: ignore[arg-type]


TRIALS = [("mmap", "cold"), ("auto", "cold"), ("mmap", "warm")]


def test_whole_loads_that_fit_are_not_sampled_and_get_the_most_rounds() -> None:
    # One round: 3 x 0.5 s fixed + 1.07 GB at 0.1, 1 and 10 GB/s = 13.4 s.
    one = 1.5 + MODEL * (1 / (0.1 * GB) + 1 / GB + 1 / (10 * GB))
    plan = plan_budget(costs(), TRIALS, MODEL, 2 * one + 0.01)
    assert (plan.repeats, plan.sizes, plan.sample) == (2, {}, None)
    assert plan.whole_s == pytest.approx(2 * one)
    plan = plan_budget(costs(), TRIALS, MODEL, one + 0.01)
    assert (plan.repeats, plan.sizes) == (1, {})


def test_a_sample_is_sized_by_its_trials_rate_and_a_cheap_whole_load_runs_whole() -> None:
    budget = 11.0
    plan = plan_budget(costs(), TRIALS, MODEL, budget)
    assert plan.repeats == 2
    # Four rounds of fixed costs (two, and the fit's quarter and half) leave 11 - 6 = 5 s,
    # shared by (2 + 1/4 + 1/2) loads of each trial: 0.61 s per load. Warm mmap (10 GB/s)
    # loads the whole model in 0.107 s: it runs whole in both rounds. What is left is
    # 0.87 s per cold load, over auto's whole load (1.07 s at 1 GB/s) over 2.75 loads:
    # auto runs whole too, and cold mmap (0.1 GB/s) gets the rest.
    loads = 2 + sum(fit_fractions(2))
    assert loads == 2.75
    rest = budget - 4 * 1.5 - 2 * MODEL / (10 * GB) - 2 * MODEL / GB
    assert plan.sizes[("mmap", "warm")] == MODEL
    assert plan.sizes[("auto", "cold")] == MODEL
    assert plan.sizes[("mmap", "cold")] == int(rest / loads * 0.1 * GB)
    assert plan.sample == plan.sizes[("mmap", "cold")]


def test_without_a_cheap_trial_every_load_gets_the_same_share() -> None:
    trials = [("mmap", "cold"), ("auto", "cold")]
    plan = plan_budget(costs(), trials, MODEL, 6.0)
    share = (6.0 - 4 * 1.0) / (2.75 * 2)
    assert plan.sizes == {
        ("mmap", "cold"): int(share * 0.1 * GB),
        ("auto", "cold"): int(share * GB),
    }


def test_fixed_costs_that_eat_the_budget_drop_to_one_round_and_the_floor_holds() -> None:
    plan = plan_budget(costs(fixed=1.0), TRIALS, MODEL, 7.5, floor_bytes=64 << 20)
    # 7.5 - 3 x 3 s of fixed costs leaves nothing for two rounds: one round and the fit.
    assert plan.repeats == 1
    assert plan.sizes[("mmap", "cold")] == 64 << 20  # the floor, not the tiny share
    assert plan.sizes[("auto", "cold")] < MODEL


def test_the_page_cache_fill_and_the_server_start_are_paid_for() -> None:
    plain = plan_budget(costs(), TRIALS, MODEL, 12.0)
    filled = plan_budget(costs(fill_s_per_byte=1 / (0.2 * GB), start_s=3.0), TRIALS, MODEL, 12.0)
    # The estimate of the fewest rounds (one): one fill, one start.
    assert filled.whole_s == pytest.approx(plain.whole_s + 3.0 + MODEL / (0.2 * GB))
    assert filled.sizes[("auto", "cold")] < plain.sizes[("auto", "cold")]
    # No warm trial: no fill.
    cold = [t for t in TRIALS if t[1] == "cold"]
    a = plan_budget(costs(fill_s_per_byte=1.0), cold, MODEL, 1e9)
    b = plan_budget(costs(), cold, MODEL, 1e9)
    assert a.whole_s == b.whole_s


def test_per_strategy_fixed_costs_count() -> None:
    heavy = costs(fixed_s_for={"auto": 5.0})  # type: ignore[arg-type]
    assert plan_budget(heavy, TRIALS, MODEL, 1e9).whole_s == pytest.approx(
        plan_budget(costs(), TRIALS, MODEL, 1e9).whole_s + 2 * 4.5
    )
