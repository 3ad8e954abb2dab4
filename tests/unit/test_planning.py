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
    # Warm mmap (10 GB/s) loads the whole model in 0.107 s and auto (1 GB/s) in 1.07 s:
    # cheapest first, each runs whole while what is left still pays the others' fixed
    # costs. A trial that runs whole pays its fixed cost in its own two rounds only; cold
    # mmap (0.1 GB/s) pays four (two, and the fit's quarter and half) and gets the rest,
    # shared over its (2 + 1/4 + 1/2) loads.
    loads = 2 + sum(fit_fractions(2))
    assert loads == 2.75
    fixed = 2 * 0.5 + 2 * 0.5 + 4 * 0.5
    rest = budget - fixed - 2 * MODEL / (10 * GB) - 2 * MODEL / GB
    assert plan.sizes[("mmap", "warm")] == MODEL
    assert plan.sizes[("auto", "cold")] == MODEL
    assert plan.sizes[("mmap", "cold")] == int(rest / loads * 0.1 * GB)
    assert plan.sample == plan.sizes[("mmap", "cold")]


def test_the_fast_trial_runs_whole_before_the_slow_one_is_sampled() -> None:
    """Issue 37: fast routes fitted on 10 MiB samples of a 256 MiB model came out ±227%;
    whole loads of them (0.15 s each) fitted the budget. The cheap whole load is taken."""
    trials = [("mmap", "cold"), ("auto", "cold")]
    plan = plan_budget(costs(), trials, MODEL, 6.0)
    # auto whole: 2 x (0.5 + 1.07) s; mmap's four rounds of fixed cost: 2 s.
    share = (6.0 - 2 * (0.5 + MODEL / GB) - 4 * 0.5) / 2.75
    assert plan.sizes == {("mmap", "cold"): int(share * 0.1 * GB), ("auto", "cold"): MODEL}
    # Where even one round of it does not fit, both are sampled with the same share of
    # the time: one round and the fit's quarter, 2 x 2 x 0.5 s of fixed costs.
    tight = plan_budget(costs(), trials, MODEL, 2.5)
    assert tight.repeats == 1 and tight.sizes[("auto", "cold")] < MODEL
    share = (2.5 - 2 * 1.0) / (1.25 * 2)
    assert tight.sizes == {
        ("mmap", "cold"): int(share * 0.1 * GB),
        ("auto", "cold"): int(share * GB),
    }


def test_fixed_costs_that_eat_the_budget_drop_to_one_round_and_the_floor_holds() -> None:
    plan = plan_budget(costs(fixed=1.0), TRIALS, MODEL, 7.5, floor_bytes=64 << 20)
    # 7.5 - 3 x 3 s of fixed costs leaves nothing for two rounds: one round and the fit.
    assert plan.repeats == 1
    assert plan.sizes[("mmap", "cold")] >= 64 << 20  # at least the floor
    # auto's whole load (1 s + 1.07 s) costs less than its two sampled rounds at the
    # floor would (2 x 1 s of fixed cost): it runs whole, and what it saves goes to mmap.
    assert plan.sizes[("auto", "cold")] == MODEL
    tiny = plan_budget(costs(fixed=1.0), TRIALS, MODEL, 4.0, floor_bytes=64 << 20)
    assert tiny.sizes[("mmap", "cold")] == 64 << 20  # the floor, not the tiny share


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


def test_what_a_sample_cannot_measure_gets_its_whole_loads_first() -> None:
    """Issue 37: at 256 MiB with --budget 30 the routes that only run whole (prewarm,
    the peers) were skipped while cheaper trials took the time: they come first."""
    rates = {
        ("mmap", "cold"): 1 / (0.1 * GB),
        ("auto", "cold"): 1 / (0.7 * GB),  # dearer than the peer at half its cost
        ("peer", "cold"): 1 / (0.5 * GB),
    }
    trials = [("mmap", "cold"), ("auto", "cold"), ("peer", "cold")]
    budget = 2 * (0.5 + MODEL / (0.5 * GB)) + 4 * 0.5 * 2 + 0.5
    plain = plan_budget(CostModel(rates, 0.5), trials, MODEL, budget)
    first = plan_budget(
        CostModel(rates, 0.5), trials, MODEL, budget, whole_only=frozenset({"peer"})
    )
    assert plain.sizes[("peer", "cold")] < MODEL  # auto, cheaper, took the room
    assert first.sizes[("peer", "cold")] == MODEL


def test_a_whole_only_trial_that_fits_once_runs_whole_once() -> None:
    """Issue 49: at 1 GiB and --budget 60, from_pretrained (whole only, 14 s) was charged
    in every round of a sampled run and so not measured at all, where one whole load
    fitted: it is charged once, and its size is what the bench reads as "whole, once"
    (its samples' bytes add up to one whole load)."""
    sampled = ("mmap", "auto", "direct", "parallel", "prefetch")
    rates = {(s, "cold"): 1 / (0.1 * GB) for s in (*sampled, "hf")}
    trials = list(rates)
    whole = MODEL / (0.1 * GB)  # 10.7 s
    floors = len(sampled) * 4 * (0.5 + (8 << 20) / (0.1 * GB))  # every other trial's floor
    budget = whole + 0.5 + floors + 1.0  # once, not twice
    plan = plan_budget(
        CostModel(rates, 0.5), trials, MODEL, budget, floor_bytes=8 << 20,
        whole_only=frozenset({"hf"}),
    )  # fmt: skip
    assert plan.repeats == 2
    want = plan.sizes[("hf", "cold")]
    loads = plan.repeats + sum(fit_fractions(plan.repeats))
    assert want < MODEL <= loads * want  # the bench's "once is cheaper": run whole, once
    # With half the time it does not fit even once: skipped, as before.
    tight = plan_budget(
        CostModel(rates, 0.5), trials, MODEL, budget / 2, floor_bytes=8 << 20,
        whole_only=frozenset({"hf"}),
    )  # fmt: skip
    assert tight.sizes[("hf", "cold")] * loads < MODEL


def test_a_routes_baseline_gets_its_whole_load_before_the_cheaper_route() -> None:
    """Issue 49: at 256 MiB and --budget 30 the plan gave loadscope.from_pretrained (the
    cheaper route) its whole load and skipped from_pretrained, every transformers route's
    baseline: no route had a figure. The baseline leads, then the cheapest."""
    rates = {
        ("mmap", "cold"): 1 / (0.1 * GB),
        ("base", "cold"): 1 / (0.25 * GB),  # 4.3 s whole
        ("route", "cold"): 1 / (1.0 * GB),  # 1.1 s whole
    }
    trials = list(rates)
    room = 2 * (0.5 + (8 << 20) / (0.1 * GB)) + 0.5 + MODEL / (0.25 * GB) + 0.4
    kw = {"floor_bytes": 8 << 20, "whole_only": frozenset({"base", "route"})}
    both = frozenset({"base", "route"})
    cheap = plan_budget(CostModel(rates, 0.5), trials, MODEL, room, first=both, **kw)
    led = plan_budget(
        CostModel(rates, 0.5), trials, MODEL, room, first=both, lead=frozenset({"base"}), **kw
    )
    assert cheap.sizes[("route", "cold")] == MODEL > cheap.sizes[("base", "cold")]
    assert led.sizes[("base", "cold")] == MODEL
