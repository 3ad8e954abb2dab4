"""The summaries of both trial runners: one row per (strategy or mode, cache state).

Owns how a run's trials become its summary, for ``bench`` (:func:`bench_summaries`: the
steady trials' medians, the warm-up's first-run time, the fit's whole-model time, the
speed-up over ``mmap``) and ``bench --ranks`` (:func:`rank_summaries`: the slowest
rank's medians, read and storage amplification, RSS, the speed-up over
``independent``). Both group the trials the same way and take their times with
:func:`~loadscope.engine.trials.spread`.

May import: ``loadscope.engine.bench_records``, ``loadscope.engine.rank_records``,
``loadscope.engine.sampling``, ``loadscope.engine.trials``, ``loadscope.loaders.strategies``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TypeVar

from loadscope.engine.bench_records import Summary, Trial
from loadscope.engine.rank_records import BroadcastSummary, BroadcastTrial
from loadscope.engine.sampling import Fit, Scope
from loadscope.engine.trials import CacheMode, median, speedups, spread
from loadscope.loaders.strategies import DEFAULT

T = TypeVar("T")
K = TypeVar("K")


def _groups(trials: Iterable[T], key: Callable[[T], K]) -> dict[K, list[T]]:
    """The trials per ``key`` (name, cache state), in the plan's order."""
    out: dict[K, list[T]] = {}
    for t in trials:
        out.setdefault(key(t), []).append(t)
    return out


def _first_run(t: Trial | BroadcastTrial) -> bool:
    """The warm-up round's trial, when it ended ok: the first-run time."""
    return t.warmup and t.status == "ok"


def _counted(t: Trial) -> bool:
    """A steady ``bench`` trial: what the medians are of."""
    return not t.warmup and not t.fit and t.status == "ok" and bool(t.cache_verified)


def bench_summaries(
    trials: list[Trial],
    fits: Mapping[tuple[str, str], Fit],
    scopes: Mapping[tuple[str, str], Scope],
) -> list[Summary]:
    out: list[Summary] = []
    whole_times: dict[tuple[str, str], float | None] = {}
    for (strategy, cache), group in _groups(trials, lambda t: (t.strategy, t.cache)).items():
        summary = _summary(group, strategy, cache, fits.get((strategy, cache)), scopes)
        whole = summary.extrapolated_median_seconds or summary.median_seconds
        whole_times[(strategy, cache)] = whole
        out.append(summary)
    # Whole-model times on both sides: a sampled strategy's fixed cost is not scaled.
    faster = speedups(whole_times, DEFAULT)
    return [replace(s, x_vs_mmap=faster.get((s.strategy, s.cache))) for s in out]


def _summary(
    group: list[Trial],
    strategy: str,
    cache: CacheMode,
    fitted: Fit | None,
    scopes: Mapping[tuple[str, str], Scope],
) -> Summary:
    times = spread(group, lambda t: t.seconds, steady=_counted, warmup=_first_run)
    steady = [t for t in group if _counted(t) and t.seconds]
    med = times.median_s
    loaded = median(t.bytes for t in steady if t.bytes)
    used = fitted if med is not None else None
    return Summary(
        strategy,
        cache,
        times.trials,
        med,
        median(t.bytes_per_s for t in steady if t.bytes_per_s),
        None,
        times.first_run_s,
        times.min_s,
        times.max_s,
        used.seconds if used else None,
        median(t.first_tensor_s for t in steady),
        scopes.get((strategy, cache)),
        fixed_seconds=used.fixed_s if used else None,
        fit_bytes_per_s=used.bytes_per_s if used else None,
        error_estimate=used.error if used else None,
        fit_note=used.note if used else "",
        measured_bytes=int(loaded) if loaded is not None else None,
        setup_seconds=used.setup_s if used and used.setup_s else None,
    )


def _rank_counted(t: BroadcastTrial) -> bool:
    """A steady ``--ranks`` trial: what the medians are of."""
    return not t.warmup and t.status == "ok" and bool(t.cache_verified)


def rank_summaries(trials: list[BroadcastTrial]) -> list[BroadcastSummary]:
    out: list[BroadcastSummary] = []
    for (mode, cache), group in _groups(trials, lambda t: (t.mode, t.cache)).items():
        times = spread(group, lambda t: t.slowest_seconds, steady=_rank_counted, warmup=_first_run)
        steady = [t for t in group if _rank_counted(t) and t.slowest_seconds]
        out.append(
            BroadcastSummary(
                mode,
                cache,
                times.trials,
                times.median_s,
                median(t.bytes_per_s for t in steady),
                times.min_s,
                times.max_s,
                times.first_run_s,
                median(t.read_amplification for t in steady),
                median(t.storage_amplification for t in steady),
                median(t.peak_rss_bytes_total for t in steady),
                median(t.rss_delta_bytes_total for t in steady),
            )
        )
    faster = speedups({(s.mode, s.cache): s.median_seconds for s in out}, "independent")
    return [replace(s, speedup_vs_independent=faster.get((s.mode, s.cache))) for s in out]


#: An extrapolated figure whose fit's relative error is above this is not a figure.
#: A time scaled from one sample size stands only where that sample's load took this
#: long: a fixed cost of tens of milliseconds is then a small part of it.
MIN_SCALED_SAMPLE_S = 0.5
MAX_FIT_ERROR = 0.25
#: A cold load may not beat a warm one by more than this. Wide: on a local disk served
#: from its host's cache a cold load of a small model takes about what a warm one does,
#: and two 20 ms trials on a busy 2-core machine differ by a third.
WARM_SLACK = 1.5
#: ... and by more than this: loads of a few tens of milliseconds (a small model on a
#: local disk, where cold and warm take about the same) scatter by that much on a busy
#: machine, and a doctor under the test suite's load called 16 ms cold against 25 ms warm
#: unreliable.
WARM_MARGIN_S = 0.03


def whole_seconds(s: Summary) -> float | None:
    """A summary's whole-model time: the extrapolated one, else the measured median."""
    return s.extrapolated_median_seconds or s.median_seconds


def is_estimate(s: Summary) -> bool:
    """Whether ``s``'s whole-model time is a fit's, not whole loads timed."""
    return s.extrapolated_median_seconds is not None and s.scope not in (None, "whole")


#: A fit with no error to show (two sizes) is trusted only where its samples' time was
#: mostly the load, not the trial's fixed cost: then the rate it extrapolates by is what
#: the samples measured. At 1 GiB with --budget 10, a two-size fit of 8 MiB samples whose
#: time was mostly fixed cost said 3.1x for what loaded whole at 15.6x; mmap's from 3% of
#: 1 GiB (its samples' time nearly all reading) was within 2%.
MIN_RATE_SHARE = 0.5


def shaky(s: Summary, warm: Mapping[str, Summary], model_bytes: int | None = None) -> str | None:
    """Why ``s``'s whole-model time cannot be trusted, or None: a fit's error over
    :data:`MAX_FIT_ERROR`, or a cold load faster than the warm load
    of itself or of ``mmap`` by more than :data:`WARM_SLACK` (``warm`` by strategy)."""
    seconds = whole_seconds(s)
    if seconds is None:
        return None
    # A fit through two sizes has no error to measure: it is an estimate ("estimated"),
    # held to the bounds below like any other, not refused for want of a third point
    # (at 1 GiB with --budget 120 that refused mmap's estimate, within 2% of whole loads).
    if is_estimate(s) and (why := _scaled_from_too_little(s)):
        return why
    if is_estimate(s) and s.error_estimate is not None and s.error_estimate > MAX_FIT_ERROR:
        return f"fit error ±{s.error_estimate:.0%}, over ±{MAX_FIT_ERROR:.0%}"
    if is_estimate(s) and s.error_estimate is None and (why := _unchecked(s, model_bytes)):
        return why
    if s.cache != "cold":
        return None
    for name in dict.fromkeys((s.strategy, DEFAULT)):
        w = warm.get(name)
        warm_s = whole_seconds(w) if w else None
        if warm_s and seconds * WARM_SLACK < warm_s and warm_s - seconds > WARM_MARGIN_S:
            return (
                f"cold {seconds:.3g} s is faster than {name} warm {warm_s:.3g} s:"
                " a cold load cannot beat a warm one"
            )
    return None


def _scaled_from_too_little(s: Summary) -> str | None:
    """Why a time scaled from one sample size cannot stand: that sample was too short to
    tell a load's fixed cost (threads, the header, the first requests' latency: tens of
    milliseconds) from its reading, and scaling multiplies that cost with the bytes (at
    1 GiB, a 32 ms sample of 0.7% of the model scaled to 4.5 s where a whole load took
    0.78 s)."""
    if not (s.fit_note or "").startswith("one size") or s.median_seconds is None:
        return None
    if s.median_seconds >= MIN_SCALED_SAMPLE_S:
        return None
    return (
        f"scaled from one sample size whose load took {s.median_seconds * 1000:.0f} ms, too"
        " short to tell its fixed cost from its reading"
    )


def _unchecked(s: Summary, model_bytes: int | None) -> str | None:
    """Why a two-size fit (no error to show) cannot stand: its samples' time was mostly
    the fitted fixed cost (the rate is then ill-determined; a set-up the trials measured
    apart is known, not fitted, and does not count), or, without the fit's parts, its
    sample was under 5% of the model."""
    if s.fit_bytes_per_s and s.measured_bytes and s.fixed_seconds is not None:
        load = s.measured_bytes / s.fit_bytes_per_s
        fixed = max(0.0, s.fixed_seconds - (s.setup_seconds or 0.0))
        share = load / (load + fixed) if load + fixed > 0 else 0.0
        if share < MIN_RATE_SHARE:
            return (
                f"a two-size fit with no error to check it, its samples' time {share:.0%}"
                " reading and the rest fixed cost"
            )
        return None
    share = (s.measured_bytes or 0) / model_bytes if model_bytes else 1.0
    if share < 0.05:
        return f"a two-size fit with no error to check it, from {share:.1%} of the model"
    return None
