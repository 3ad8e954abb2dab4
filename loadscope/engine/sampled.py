"""A sampled ``bench`` run: the pilot that sizes it, what each strategy reads, the fit.

Owns the parts of a run on a model too big for its budget: the pilot trials that fill
in the budget planner's cost model and the bytes each strategy's sample may hold
(:func:`fit_budget`), what each strategy then reads, whole shards, a tensor sample or
the whole model, or why it cannot run (:func:`choose_scopes`), and the fit that gives every
sampled trial its whole-model time (:func:`extrapolate_trials`).

May import: ``loadscope.engine.bench_records``, ``loadscope.engine.trial_run``,
``loadscope.engine.planning``, ``loadscope.engine.sampling``, ``loadscope.engine.trials``,
``loadscope.model``, ``loadscope.probes``, ``loadscope.base``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from loadscope.base.units import format_bytes
from loadscope.engine.bench_records import BenchOptions, Listener, Sample, Trial
from loadscope.engine.planning import CostModel, plan_budget, runs_once
from loadscope.engine.sampling import (
    MIDDLE_FRACTION,
    SHARD_OVERSHOOT,
    SMALL_FRACTION,
    Fit,
    SampleSet,
    Scope,
    choose_sample,
    choose_shards,
    extrapolate,
    fit,
    sample_size,
    smaller_sample,
    smaller_shards,
)
from loadscope.engine.trial_run import run_trial
from loadscope.engine.trials import reference_digests
from loadscope.model.targets import Target, WeightFile
from loadscope.probes.pagecache import ColdCache

#: A strategy in one cache state: ``(strategy, cache)``.
TrialKey = tuple[str, str]
#: Per (strategy, cache): what its trials read at the sample's size and at the fit's
#: smaller ones, a quarter and a half (None: the whole model, or no such size).
SampleSets = dict[TrialKey, tuple[SampleSet | None, SampleSet | None, SampleSet | None]]


@dataclass(slots=True)
class SampledChoices:
    """A sampled run's choices: what each strategy reads, and the report's sample."""

    #: By (strategy, cache).
    scopes: dict[TrialKey, Scope] = field(default_factory=dict)
    sets: SampleSets = field(default_factory=dict)
    #: Run whole, once, in place of their sampled rounds.
    once: set[TrialKey] = field(default_factory=set)
    sample: Sample | None = None


def _unsampled_reason(info: dict[str, Any], whole: int, sample: int, smallest: int) -> str:
    what = "the whole model folder" if info.get("sample_files") is False else "whole files"
    parts = [f"cannot be sampled: it loads {what}"]
    if info.get("sample_shards") is False:
        parts.append(
            "its time on a subset of them does not scale to the whole (it reads the files"
            " of a load together)"
        )
    elif info.get("sample_files") is not False:
        parts.append(
            f"the smallest ({format_bytes(smallest)}) is over {SHARD_OVERSHOOT:g}x the sample"
        )
    parts.append(
        f"and a whole load ({format_bytes(whole)}) is {_times(whole / max(sample, 1))} the"
        f" {format_bytes(sample)} sample the budget allows"
    )
    return ", ".join(parts)


def _times(factor: float) -> str:
    """ "1.9x", "12x": one decimal under 10 (the doctor scales its budget hint by it)."""
    return f"{factor:.1f}x" if factor < 10 else f"{factor:.0f}x"


def choose_scopes(
    files: list[WeightFile],
    trials: list[TrialKey],
    available: dict[str, dict[str, Any]],
    sizes: Mapping[TrialKey, int],
    repeats: int,
    fits_whole: Callable[[str], bool] = lambda _name: False,
) -> tuple[dict[TrialKey, Scope], SampleSets, dict[str, str]]:
    """Per trial (a strategy in one cache state): what it reads in a sampled run (and at
    the fit's smaller size), given the bytes ``sizes`` allots it (a fast strategy, or a
    warm trial, affords a bigger sample in the same time, and a whole load when its share
    covers the model); per strategy, why it cannot run.

    A trial whose one whole load costs no more than its sampled trials would
    (``repeats`` samples and the fit's smaller one) runs whole, once: always when its
    strategy loads whole files, else when ``fits_whole`` says so (the budget chose the
    sizes, not the user, and the whole load fits in memory): a measured time for the
    price of a fitted one. Else whole shards near the size where the model has such
    shards (a strategy then reads files exactly as the whole load does), else a tensor
    sample; a strategy that loads whole files is skipped, in every cache state, when
    neither fits one of its trials."""
    total = sum(f.size_bytes for f in files)
    tensor_sets: dict[int, tuple[SampleSet, SampleSet | None, SampleSet | None]] = {}
    shard_sets: dict[int, tuple[SampleSet, SampleSet | None, None] | None] = {}
    scopes: dict[TrialKey, Scope] = {}
    sets: SampleSets = {}
    skipped: dict[str, str] = {}
    for key in trials:
        name = key[0]
        info = available[name]
        want = sizes[key]
        once_is_cheaper = runs_once(want, total, repeats)
        if want >= total or (
            once_is_cheaper and (info.get("samples") is False or fits_whole(name))
        ):
            scopes[key], sets[key] = "whole", (None, None, None)
            continue
        if want not in shard_sets:
            shards = choose_shards(files, want)
            # Whole files: half of them is the fit's one smaller size.
            shard_sets[want] = (shards, smaller_shards(files, shards), None) if shards else None
        if (
            shard_sets[want] is not None
            and info.get("sample_files") is not False
            and info.get("sample_shards") is not False
        ):
            # Whole files, read the way the whole load reads each of its files: the most
            # faithful sample there is, when the shards are small enough.
            scopes[key], sets[key] = "shards", shard_sets[want]  # type: ignore[assignment]
        elif info.get("samples") is not False:
            if want not in tensor_sets:
                tensors = choose_sample(files, want)
                tensor_sets[want] = (
                    tensors,
                    smaller_sample(files, tensors, SMALL_FRACTION),
                    smaller_sample(files, tensors, MIDDLE_FRACTION) if repeats >= 2 else None,
                )
            scopes[key], sets[key] = "sampled", tensor_sets[want]
        elif name not in skipped:
            smallest = min(f.size_bytes for f in files)
            skipped[name] = _unsampled_reason(info, total, want, smallest)
    for key in [k for k in scopes if k[0] in skipped]:
        del scopes[key], sets[key]
    return scopes, sets, skipped


def extrapolate_trials(
    plan: list[Trial], total: int
) -> tuple[dict[tuple[str, str], Fit], list[Trial]]:
    """Fit each sampled strategy's trials (both sizes); the fits, and the trials with
    every sampled one given its whole-model time. Trials whose cache was not verified are
    extrapolated, not fitted. A set-up the trial measured apart (``setup_s``: a
    command's start-up, the first call's imports) is a fixed cost known as such: left
    out of the fit and added once to the whole-model time, never scaled with the bytes
    (scaled, a 0.5 s start-up on a 24 MiB sample of 256 MiB read as 5 s)."""
    fits: dict[tuple[str, str], Fit] = {}
    loads: dict[tuple[str, str], Fit] = {}  # the fits of the loads alone, set-up left out
    for key in dict.fromkeys((t.strategy, t.cache) for t in plan if t.sampled):
        group = [t for t in plan if (t.strategy, t.cache) == key and t.sampled and t.bytes]
        points = [
            (t.bytes or 0, (t.seconds or 0.0) - _setup_s(t))
            for t in group
            if not t.warmup and t.status == "ok" and bool(t.cache_verified)
        ]
        fitted = fit(points, total)
        if fitted is not None:
            loads[key] = fitted
            setup = statistics.median(_setup_s(t) for t in group)
            fits[key] = replace(
                fitted,
                seconds=fitted.seconds + setup,
                fixed_s=fitted.fixed_s + setup,
                setup_s=setup,
            )
    return fits, [_extrapolated(t, loads.get((t.strategy, t.cache)), total) for t in plan]


def _extrapolated(trial: Trial, fitted: Fit | None, total: int) -> Trial:
    """A sampled trial that ended ok with its whole-model time, by its strategy's fit of
    the loads alone (its set-up added back once)."""
    if fitted is None or not trial.sampled or trial.status != "ok":
        return trial
    if trial.seconds is None or not trial.bytes:
        return trial
    setup = _setup_s(trial)
    whole = extrapolate(trial.seconds - setup, trial.bytes, total, fitted) + setup
    return replace(trial, extrapolated_seconds=whole)


def _setup_s(trial: Trial) -> float:
    """The part of a trial's time it measured as set-up (added to its load's time)."""
    setup = (trial.detail or {}).get("setup_s")
    return min(float(setup), trial.seconds or 0.0) if isinstance(setup, (int, float)) else 0.0


def fit_budget(
    target: Target,
    names: list[str],
    available: dict[str, dict[str, Any]],
    options: BenchOptions,
    block_stat: str | None,
    cold: ColdCache,
    say: Listener,
) -> tuple[dict[TrialKey, int], str] | None:
    """Pilot every strategy that reads a sample on a small one; when full loads do not
    fit the budget, the bytes each trial's sample may hold (by strategy and cache), and
    why (None: they fit).

    A trial's cost is its worker's fixed cost (measured around each pilot trial: fork,
    cache eviction and check, digests) plus its load, which scales with the bytes; only
    the load is scaled. Every trial's load is given the same share of the time, so a
    fast strategy gets a bigger sample (or the whole model) than a slow one. Strategies
    that load whole files are not piloted (they would read the model) and are planned
    at the median piloted rate.
    """
    assert options.budget_s is not None
    files = list(target.files)
    total = target.total_bytes
    pilot_bytes = min(total // 4, 64 << 20)
    if pilot_bytes <= 0:
        return None
    pilot = choose_sample(files, pilot_bytes)
    pilot_actual, _ = sample_size(files, pilot)
    reference = reference_digests(files, pilot)
    overheads: dict[str, list[float]] = {"cold": [], "warm": []}
    per_byte: dict[tuple[str, str], float] = {}
    whole_only = [n for n in names if available[n].get("samples") is False]
    for name in [n for n in names if n not in whole_only]:
        for cache in options.cache:
            began = time.monotonic()
            t, _ = run_trial(
                Trial(0, name, cache, 0, True),
                files,
                pilot,
                options=options,
                reference=reference,
                block_stat=block_stat,
                cold=cold,
                listener=say,
                total_bytes=pilot_actual,
            )
            overheads[cache].append(max(0.0, time.monotonic() - began - (t.seconds or 0.0)))
            per_byte[(name, cache)] = (t.seconds or 0.0) / max(pilot_actual, 1)
    if not per_byte:
        return None
    for cache in options.cache:
        typical = statistics.median(v for (_, c), v in per_byte.items() if c == cache)
        per_byte.update({(n, cache): typical for n in whole_only})
    fixed = statistics.median(overheads["cold"] or overheads["warm"])
    # A warm pilot follows its cold one, so its cache preparation read the whole model:
    # the page-cache fill each warm round pays once.
    fill = max(0.0, statistics.median(overheads["warm"]) - fixed) if overheads["warm"] else 0.0
    runs = options.repeats + (1 if options.warmup else 0)
    budget_s = options.budget_s
    if options.deadline is not None:
        # What the pilots left of a run that has a hard end (bench --budget): planning the
        # whole budget again would leave the last rounds no time.
        budget_s = min(budget_s, max(0.0, options.deadline - time.monotonic()))
    plan = plan_budget(
        CostModel(per_byte, fixed, fill_s_per_byte=fill / max(total, 1)),
        list(per_byte),
        total,
        budget_s,
        repeats=(runs,),
        floor_bytes=pilot_actual,
    )
    if not plan.sizes:
        return None
    return plan.sizes, (
        f"full loads would take ~{plan.whole_s:.0f} s, over the {options.budget_s:g} s budget"
    )
