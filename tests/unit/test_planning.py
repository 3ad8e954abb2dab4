"""The budget planner: whole loads when they fit, else samples sized by each trial's rate."""

from __future__ import annotations

import pytest

from loadscope.engine.planning import CostModel, plan_budget
from loadscope.engine.sampling import SMALL_FRACTION

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


def test_a_sample_is_sized_by_its_strategys_rate_and_the_slowest_cache_decides() -> None:
    budget = 10.0
    plan = plan_budget(costs(), TRIALS, MODEL, budget)
    assert plan.repeats == 2
    # Three rounds of fixed costs (two and the fit's) leave 10 - 4.5 = 5.5 s, shared by
    # (2 + a quarter) x 3 trial loads.
    share = (budget - 3 * 1.5) / ((2 + SMALL_FRACTION) * 3)
    assert plan.sizes["auto"] == int(share * GB)
    # mmap runs cold (0.1 GB/s) and warm (10 GB/s): its sample is the cold one's.
    assert plan.sizes["mmap"] == int(share * 0.1 * GB)
    assert plan.sample == plan.sizes["mmap"]


def test_fixed_costs_that_eat_the_budget_drop_to_one_round_and_the_floor_holds() -> None:
    plan = plan_budget(costs(fixed=1.0), TRIALS, MODEL, 7.5, floor_bytes=64 << 20)
    # 7.5 - 3 x 3 s of fixed costs leaves nothing for two rounds: one round and the fit.
    assert plan.repeats == 1
    assert plan.sizes["mmap"] == 64 << 20  # the floor, not the tiny share
    assert plan.sizes["auto"] < MODEL


def test_the_page_cache_fill_and_the_server_start_are_paid_for() -> None:
    plain = plan_budget(costs(), TRIALS, MODEL, 12.0)
    filled = plan_budget(costs(fill_s_per_byte=1 / (0.2 * GB), start_s=3.0), TRIALS, MODEL, 12.0)
    # The estimate of the fewest rounds (one): one fill, one start.
    assert filled.whole_s == pytest.approx(plain.whole_s + 3.0 + MODEL / (0.2 * GB))
    assert filled.sizes["auto"] < plain.sizes["auto"]
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
