"""Numbers with their confidence: a figure that breaks a bound is never a speed-up.

Issue 37: sampled runs printed "api cold 3.17 GB/s 40.51x" (faster than warm mmap),
"auto cold 20.3 GB/s" on a ~1.4 GB/s disk, and a "problem ... 2.4x" verdict on fits of
±223%. Each of those figures is now "not measured reliably" with the budget it needs,
no verdict rests on one, and an extrapolated figure says "estimated ±E%".
"""

from __future__ import annotations

from dataclasses import replace

from loadscope.advice.rules import advise_facts
from loadscope.engine.bench import Summary
from tests.unit.test_advice import GiB, facts


def _sampled(strategy: str, seconds: float, error: float | None, model: int = GiB) -> Summary:
    """A sampled strategy's summary: its sample's time, and the fit's whole-model figure."""
    return Summary(
        strategy,
        "cold",
        2,
        seconds / 10,
        model / seconds,
        None,
        seconds / 10,
        seconds / 10,
        seconds / 10,
        extrapolated_median_seconds=seconds,
        scope="sampled",
        error_estimate=error,
        measured_bytes=model // 10,
    )


def test_an_estimate_says_so_with_its_error() -> None:
    f = facts({"mmap": 15.0})
    f.cold["api"] = _sampled("api", 1.5, 0.12)
    fig = f.figure("api")
    assert fig is not None and fig.how == "estimated" and fig.label() == "estimated ±12%"
    assert f.figure("mmap").label() == "measured"  # type: ignore[union-attr]
    top = advise_facts(f).recommendations[0]
    api = next(s for s in top.snippets if s.strategy == "api")
    assert api.label().startswith("10.0x vs the default load, estimated ±12%")
    assert "(estimated ±12% over 2 trials)" in top.action


def test_a_loose_fit_is_not_a_figure() -> None:
    f = facts({"mmap": 15.0}, read_ahead_kb=8192)
    f.cold["api"] = _sampled("api", 1.5, 0.40)
    f.budget_s = 30.0
    assert f.speedup("api") is None
    a = advise_facts(f)
    assert "parallel-reads" not in [r.id for r in a.recommendations]
    # No fix fired, but that does not make the storage healthy: the figure was shaky.
    assert a.verdict.status == "unmeasured"
    assert "could not measure reliably: api's cold figure: fit error ±40%" in a.verdict.headline
    assert "--budget" in a.verdict.headline


def test_a_cold_load_faster_than_warm_is_not_a_figure() -> None:
    # 3.17 GB/s cold against a warm mmap of 0.2 s for 1 GiB (5 GB/s) and a 2 GB/s limit:
    # measured whole, the bound is the warm load.
    f = facts({"mmap": 15.0, "api": 0.085}, {"mmap": 0.2})
    fig = f.figure("api")
    assert fig is not None and fig.unreliable and "cannot beat a warm one" in fig.unreliable
    assert f.speedup("api") is None
    snippets = [s for r in advise_facts(f).recommendations for s in r.snippets]
    assert not any(s.strategy == "api" and s.speedup for s in snippets)


def test_an_estimate_above_the_storage_is_not_a_figure() -> None:
    # "auto cold 20.3 GB/s" on a disk whose best measured read is 1.4 GB/s.
    f = facts({"mmap": 2.0}, storage="local-block", limit=1.4e9, seq_limit=1.4e9)
    f.cold["auto"] = _sampled("auto", GiB / 20.3e9, 0.05)
    fig = f.figure("auto")
    assert fig is not None and fig.unreliable and "above the storage's best" in fig.unreliable
    # Measured whole, the same rate is the probe's shortfall, not the loader's error.
    whole = facts({"mmap": 2.0, "auto": GiB / 1.8e9}, storage="local-block", limit=1.4e9)
    assert whole.figure("auto").unreliable is None  # type: ignore[union-attr]


def test_a_shaky_baseline_gives_no_verdict() -> None:
    """`doctor --budget 0.5` on a healthy disk said "problem ... 2.4x" and exited 10."""
    f = facts({"api": 0.5}, storage="local-block")
    f.cold["mmap"] = _sampled("mmap", 1.2, 2.23)
    a = advise_facts(f)
    assert a.verdict.status == "unmeasured" and not a.recommendations
    assert a.verdict.headline.startswith("could not measure reliably: mmap's cold figure")


def test_memory_storage_has_no_cold_bound() -> None:
    f = facts({"mmap": 0.2}, {"mmap": 0.21}, storage="memory")
    assert f.figure("mmap").unreliable is None  # type: ignore[union-attr]


def test_repeats_that_disagree_are_said_with_the_figures_they_touch() -> None:
    f = facts({"mmap": 15.0, "api": 1.0})
    s = f.cold["api"]
    f.cold["api"] = Summary(s.strategy, s.cache, 3, 1.0, s.median_bytes_per_s, None, 1.0, 0.6, 2.4)
    notes = advise_facts(f).notes
    said = [n for n in notes if "repeats of the same trial disagreed" in n]
    assert len(said) == 1 and "api cold (0.6-2.4 s)" in said[0] and "mmap" not in said[0]
    assert not [n for n in advise_facts(facts({"mmap": 15.0, "api": 1.0})).notes if "repeats" in n]


def test_a_two_size_fit_is_trusted_only_from_a_large_enough_sample() -> None:
    """At 1 GiB with --budget 10 a two-size fit of 8 MiB samples said 3.1x where whole
    loads gave 15.6x; at 120 s one of a sixth of the model was within 2%."""
    f = facts({"mmap": 12.0})
    tiny = _sampled("api", 3.9, None)
    f.cold["api"] = replace(tiny, measured_bytes=8 << 20)
    fig = f.figure("api")
    assert fig is not None and fig.unreliable and "two-size fit" in fig.unreliable
    f.cold["api"] = replace(tiny, measured_bytes=GiB // 6)
    fig = f.figure("api")
    assert fig is not None and fig.unreliable is None and fig.label() == "estimated"


def test_a_two_size_fit_stands_where_its_samples_were_mostly_reading() -> None:
    """mmap's two-size fit from 3% of 1 GiB (its samples nearly all reading) was within 2%
    of whole loads; a fast route's from samples mostly fixed cost was off by 80%."""
    f = facts({"api": 0.8}, model=GiB)
    base = _sampled("mmap", 12.0, None)
    f.cold["mmap"] = replace(
        base, measured_bytes=32 << 20, fixed_seconds=0.02, fit_bytes_per_s=75e6
    )
    assert f.figure("mmap").unreliable is None  # type: ignore[union-attr]
    fast = _sampled("direct", 3.9, None)
    f.cold["direct"] = replace(
        fast, measured_bytes=8 << 20, fixed_seconds=0.03, fit_bytes_per_s=1.5e9
    )
    fig = f.figure("direct")
    assert fig is not None and fig.unreliable and "fixed cost" in fig.unreliable


def test_a_time_scaled_from_one_short_sample_is_not_a_figure() -> None:
    """At 1 GiB with --budget 10, a 32 ms api sample (0.7% of the model) scaled to 4.5 s
    where whole loads took 0.78 s, printed 'estimated 2.45x' for 15.5x: the sample's
    fixed cost was multiplied with the bytes. A long enough sample still stands."""
    f = facts({"mmap": 12.0})
    short = replace(
        _sampled("api", 4.5, None),
        median_seconds=0.032,
        fixed_seconds=0.0,
        fit_bytes_per_s=238e6,
        fit_note="one size: scaled with the bytes",
    )
    f.cold["api"] = short
    fig = f.figure("api")
    assert fig is not None and fig.unreliable and "too short" in fig.unreliable
    f.cold["api"] = replace(short, median_seconds=1.15)
    fig = f.figure("api")
    assert fig is not None and fig.unreliable is None


def test_a_route_whose_trials_spread_says_so_where_its_number_is() -> None:
    """Run:ai's cold load on the development VM is bimodal (0.28-0.30 s or 0.51-0.66 s at
    256 MiB): a median of its trials is one of the modes, and the label says so."""
    f = facts({"mmap": 3.3, "runai": 0.31, "api": 0.2}, model=256 << 20)
    f.cold["runai"] = replace(f.cold["runai"], trials=3, min_seconds=0.29, max_seconds=0.61)
    # Both sides' trial counts (the label cites the route's own trial ids: 3 of them).
    assert f.how_obtained("runai") == "unsteady: 5.4x to 11.4x over 3 trials and its default's 2"
    from loadscope.advice.rules import disagreeing_repeats

    (note,) = disagreeing_repeats(f)
    assert "runai cold (0.29-0.61 s)" in note
    assert f.how_obtained("api") == "measured ±<1% over 2 trials"
    # Within 25% over its trials: one figure, its ± the larger deviation from the median.
    f.cold["runai"] = replace(f.cold["runai"], max_seconds=0.34)
    assert f.how_obtained("runai") == "measured ±9% over 3 trials and its default's 2"
    # Three trials or more: no count said.
    for name in ("mmap", "runai"):
        f.cold[name] = replace(f.cold[name], trials=3)
    assert f.how_obtained("runai") == "measured ±9%"
    # One side's trials alone spread past 25%: unsteady too (it printed "±75% from 1
    # trial and its default's 3" as a plain figure).
    f.cold["runai"] = replace(f.cold["runai"], trials=1, min_seconds=0.31, max_seconds=0.31)
    f.cold["mmap"] = replace(f.cold["mmap"], min_seconds=2.0, max_seconds=4.0)
    assert f.how_obtained("runai").startswith("unsteady: "), f.how_obtained("runai")


def test_a_route_skipped_at_this_budget_says_the_budget_that_measures_it() -> None:
    f = facts({"mmap": 15.0})
    f.budget_s = 40.0
    f.not_run = {
        "hf-load-model": "skipped: cannot be sampled: it loads the whole model folder, and a"
        " whole load (512 MiB) is 3x the 148 MiB sample the budget allows"
    }
    why = f.why_not_measured("hf-load-model") or ""
    assert why.endswith("(about --budget 120 measures it)"), why
    f.budget_s = None  # a bench run with no budget: nothing to scale
    assert "--budget" not in (f.why_not_measured("hf-load-model") or "")
