"""``loadscope bench``: run loader strategies side by side, cold and warm, in isolated workers.

The plan is interleaved (A B C A B C ...) so every strategy sees the same
machine state, with one warm-up round reported as first-run cost and excluded
from the medians. Before each trial the cache is put in the asked state and
*verified* (cold: evicted and checked with mincore; warm: pre-read and
checked); a trial whose cache state could not be verified is marked and kept
out of the medians. Each trial runs in a fresh worker process in its own
process group, streams JSON-line events, and is killed on timeout; its tensors'
digests are compared with a reference read. Strategies that would hold the
model in RAM are skipped, with the numbers, when they would not fit.

Huge models: with ``--budget``, a pilot round on a sample estimates every
trial's fixed cost and load rate; when the plan does not fit, each strategy runs
on a sample sized to an equal share of the budget (whole shards where they are
small enough, else a span of tensors per file: :mod:`loadscope.engine.sampling`), at that
size, a quarter and (with two rounds or more) a half of it, and its whole-model time
is the fitted fixed cost plus the model at the fitted rate, with the fit's error. A
strategy that loads whole files runs on whole shards, runs whole, or is skipped with
the reason: never scaled from a tensor sample.

Owns the run: which strategies run here and why the others cannot (:func:`memory_guard`
among them), the plan, its trials one after the other, the summaries and the report.
One trial is :mod:`loadscope.engine.trial_run`'s, a sampled run's pieces
:mod:`loadscope.engine.sampled`'s, the records :mod:`loadscope.engine.bench_records`',
the summaries :mod:`loadscope.engine.summaries`'; their public names are importable from
here too (the text and the tables are :mod:`loadscope.report.bench_text`'s).

May import: those, ``loadscope.engine.trials``, ``loadscope.engine.sampling``,
``loadscope.loaders``, ``loadscope.model``, ``loadscope.probes``,
``loadscope.engine.bench_records``, ``loadscope.engine.rounds``,
``loadscope.engine.sampled``, ``loadscope.engine.summaries``,
``loadscope.engine.trial_run``, ``loadscope.base``.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadscope.base.tempdirs import owned_tempdir
from loadscope.base.units import format_bytes
from loadscope.engine.bench_records import (
    SCHEMA_VERSION,
    BenchCancelled,
    BenchError,
    BenchEvent,
    BenchOptions,
    BenchReport,
    Listener,
    Sample,
    Summary,
    Trial,
    TrialFinished,
    TrialProgress,
    TrialStarted,
    WorkerStartFailed,
)
from loadscope.engine.rounds import RoundPlan as _Plan
from loadscope.engine.rounds import wanted_in
from loadscope.engine.sampled import (
    SampledChoices,
    TrialKey,
    choose_scopes,
    extrapolate_trials,
    fit_budget,
)
from loadscope.engine.sampling import SampleSet, sample_size
from loadscope.engine.summaries import bench_summaries
from loadscope.engine.trial_run import bounded_references, describe_strategies, run_trial
from loadscope.engine.trials import (
    CacheMode,
    ram_refusal,
    reference_digests,
    target_record,
)
from loadscope.loaders.cachestate import NOWAIT_NOTE, WARM_ENOUGH
from loadscope.loaders.strategies import GPU_STRATEGIES, reads_torch
from loadscope.model.targets import Target, WeightFile
from loadscope.probes.memory import memory_headroom, page_cache_room
from loadscope.probes.pagecache import ColdCache
from loadscope.probes.sources import FILES, SOURCES, supports

__all__ = [
    "GPU_STRATEGIES",
    "NOWAIT_NOTE",
    "RUNTIME_OVERHEAD_BYTES",
    "SCHEMA_VERSION",
    "SCRATCH_PREFIX",
    "BenchCancelled",
    "BenchError",
    "BenchEvent",
    "BenchOptions",
    "BenchReport",
    "Listener",
    "Sample",
    "Summary",
    "Trial",
    "TrialFinished",
    "TrialProgress",
    "TrialStarted",
    "WorkerStartFailed",
    "describe_strategies",
    "memory_guard",
    "reference_digests",
    "run_bench",
    "run_trial",
]

#: Memory kept free beyond a strategy's predicted peak: the interpreter, torch, slack.
RUNTIME_OVERHEAD_BYTES = 600 << 20
SCRATCH_PREFIX = "loadscope-scratch-"


# -- which strategies run here ------------------------------------------------------------------


def _applicable(
    target: Target,
    available: dict[str, dict[str, Any]],
    names: tuple[str, ...] | None,
    device: str = "cpu",
    cpu_too: bool = False,
) -> tuple[list[str], dict[str, str]]:
    """The strategies to run on ``device`` and why the others asked for cannot run.

    Without ``names``, the strategies of the device's kind (CPU or GPU) are considered;
    one of the other kind asked for by name is skipped with the reason, except a CPU one
    on a GPU run with ``cpu_too`` (it runs on the CPU).
    """
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise BenchError(f"unknown device {device!r} (use cpu, cuda or cuda:N)")
    gpu_run = device != "cpu"
    formats = target.all_formats
    chosen, skipped = [], {}
    every = tuple(
        n
        for n, i in available.items()
        if bool(i.get("gpu")) == gpu_run
        # A model in another source: the strategies that read it (not every file one, each
        # skipped with the same reason).
        and supports(frozenset(i.get("sources", [FILES])), target.source)
    )
    for name in names or every:
        info = available.get(name)
        if info is None:
            raise BenchError(f"unknown strategy {name!r} (known: {', '.join(available)})")
        if info.get("gpu") and not gpu_run:
            skipped[name] = "needs a GPU (--device cuda)"
        elif not info.get("gpu") and gpu_run and not (cpu_too and names):
            skipped[name] = (
                f"a CPU strategy: it does not load to {device} (run it without --device)"
            )
        elif not supports(frozenset(info.get("sources", [FILES])), target.source):
            skipped[name] = (
                f"reads {' or '.join(info.get('sources', [FILES]))}; this model is in"
                f" {target.detail or target.source}"
            )
        elif not formats & set(info["formats"]):
            skipped[name] = (
                f"reads {' or '.join(info['formats'])} checkpoints;"
                f" this target is {' and '.join(sorted(formats))}"
            )
        elif info.get("unavailable"):
            skipped[name] = str(info["unavailable"])
        else:
            chosen.append(name)
    return chosen, skipped


def memory_guard(name: str, info: dict[str, Any], model_bytes: int, headroom: int) -> str | None:
    """Why ``name`` must not run (it would not fit in RAM), or None."""
    multiple = float(info.get("ram_multiple", 1.0))
    if multiple <= 0:
        return None
    need = int(multiple * model_bytes) + RUNTIME_OVERHEAD_BYTES
    how = f"{multiple:g}x the {format_bytes(model_bytes)} loaded + runtime"
    return ram_refusal(need, how, headroom, "free")


def _headroom(options: BenchOptions) -> int:
    if options.memory_headroom_bytes is not None:
        return options.memory_headroom_bytes
    return memory_headroom()


def _no_strategy_left(names: list[str], skipped: dict[str, str]) -> None:
    if not names:
        raise BenchError(
            "no strategy can run on this target here: "
            + "; ".join(f"{k}: {v}" for k, v in skipped.items())
        )


def _block_stat_of(path: Path) -> str | None:
    dev = os.stat(path).st_dev
    stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    return str(stat) if os.major(dev) != 0 and stat.exists() else None


# -- the run ------------------------------------------------------------------------------------


def run_bench(
    target: Target, options: BenchOptions, listener: Listener | None = None
) -> BenchReport:
    """Plan, run and summarise the trials for ``target``.

    The workers get a scratch directory for what their libraries cache under the temp
    dir; it is removed when the run ends, and one left by a run that was killed
    outright (its process gone) is removed by the next run."""
    scratch = str(owned_tempdir(SCRATCH_PREFIX))
    try:
        return _run_bench(target, options, listener, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_bench(
    target: Target, options: BenchOptions, listener: Listener | None, scratch: str
) -> BenchReport:
    from loadscope.loaders.strategies import check_knobs

    try:
        options = replace(options, knobs=check_knobs(options.knobs))
    except ValueError as exc:
        raise BenchError(f"knob {exc}") from None
    available = describe_strategies()
    names, skipped = _applicable(
        target, available, options.strategies, options.device, options.cpu_too
    )
    run = _Run(target, options, available, listener or (lambda _e: None), scratch)
    names = run.choose(names, skipped)
    references = run.references(names)
    caches = run.caches()
    plan = _Plan(run, names, caches)
    run.run_plan(plan, references)
    return run.report(names, skipped, plan.trials)


class _Run:
    """One ``bench`` run's state, from the strategies chosen to the report."""

    def __init__(
        self,
        target: Target,
        options: BenchOptions,
        available: dict[str, dict[str, Any]],
        say: Listener,
        scratch: str,
    ) -> None:
        self.target, self.options, self.available = target, options, available
        self.say, self.scratch = say, scratch
        self.files = list(target.files)
        self.total = target.total_bytes
        #: The model's source when it is not files: no page cache to set or sample by.
        self.source = None if target.on_files else SOURCES[target.source]
        self.sampleable = target.formats == {"safetensors"} and self.source is None
        # Said, not passed over: the other format's files in the folder that cannot be used.
        self.notes: list[str] = [target.alternates_problem] if target.alternates_problem else []
        #: The sample's bytes (the smallest any strategy reads); None: whole loads.
        self.sampling: int | None = None
        self.sampled = SampledChoices()
        self.block_stat: str | None = None
        self.cold = ColdCache(allow_drop_caches=options.allow_drop_caches)
        #: The skipped whole-only strategies ``options.late`` may run at the end, with
        #: their estimates, and the skipped list they leave when they run.
        self.late: dict[str, tuple[float, float]] = {}
        self.ran_late: list[str] = []
        self.skipped: dict[str, str] = {}
        #: Whether the references hold every tensor (what a whole trial is checked on).
        self.whole_reference = False
        #: Torch checkpoints: the first trial's digests.
        self.learned: dict[str, str] = {}

    def files_for(self, name: str) -> list[WeightFile]:
        """A strategy's files: the target's, or the same model in the other format."""
        return list(self.target.files_in(frozenset(self.available[name]["formats"])))

    def choose(self, names: list[str], skipped: dict[str, str]) -> list[str]:
        """The strategies that run, and whether on a sample (``skipped`` gets the rest)."""
        options = self.options
        self.sampling = options.sample_bytes if self.sampleable else None
        other = self._other_format(names)
        headroom = _headroom(options)
        if self.sampling is None:
            for name in list(names):
                mine = sum(f.size_bytes for f in self.files_for(name))
                if why := memory_guard(name, self.available[name], mine, headroom):
                    skipped[name] = why
                    names.remove(name)
        _no_strategy_left(names, skipped)
        self.block_stat = _block_stat_of(self.files[0].path) if self.source is None else None
        sizes: dict[TrialKey, int] = {}
        reason = options.sample_reason
        if options.budget_s is not None and self.sampling is None and self.sampleable and not other:
            planned = fit_budget(
                self.target, names, self.available, options, self.block_stat, self.cold, self.say
            )
            if planned is not None:
                sizes, reason = planned
                self.sampling = min(sizes.values())
        if self.sampling is not None:
            names = self._sample(names, skipped, sizes, reason, headroom)
        if self.sampling is not None and any(reads_torch(n) for n in names):
            self.notes.append("torch checkpoints are loaded whole even when sampling")
        return names

    def _other_format(self, names: list[str]) -> list[str]:
        """The strategies that read the model's other format (a folder holding both): the
        torch strategies on the pickles beside safetensors, or the safetensors strategies
        on the safetensors beside a torch model; checked against the chosen format's
        tensors; whole files, never sampled."""
        files = self.files
        other = [n for n in names if self.files_for(n) != files]
        if other:
            rest = [n for n in names if n not in other]
            # The other format: the pickles beside chosen safetensors, or the safetensors
            # beside a torch model named by its index or pytorch_model.bin.
            theirs, ours = (
                ("torch files", "safetensors")
                if files[0].format == "safetensors"
                else ("safetensors", "torch files")
            )
            self.notes.append(
                f"{', '.join(other)} read the {theirs} ({len(self.files_for(other[0]))})"
                " beside the"
                + (
                    f" {ours} ({len(files)}) that {', '.join(rest)} read: both formats,"
                    f" every trial checked against the {ours}' tensors"
                    if rest
                    else f" {ours} ({len(files)}), checked against their tensors"
                )
            )
            if self.sampling is not None or self.options.budget_s is not None:
                self.notes.append("not sampled: the torch files are loaded whole")
            self.sampling = None
        return other

    def _sample(
        self,
        names: list[str],
        skipped: dict[str, str],
        sizes: dict[TrialKey, int],
        reason: str,
        headroom: int,
    ) -> list[str]:
        """What each strategy reads at the sample's size in each cache state, the ones
        that cannot, and the report's sample (none when every trial runs whole after all)."""
        assert self.sampling is not None
        files, total, sampling = self.files, self.total, self.sampling
        options = self.options
        planned = bool(sizes or options.sample_bytes_for)
        trials: list[TrialKey] = [
            (n, c) for n in names for c in options.cache if wanted_in(options, n, c)
        ]
        sizes = {t: sizes.get(t, options.sample_bytes_for.get(t, sampling)) for t in trials}
        scopes, sets, unsampled = choose_scopes(
            files,
            trials,
            self.available,
            sizes,
            self.options.repeats,
            # Sizes the budget chose (not a sample the user asked for): a strategy whose
            # whole load costs no more than its samples is measured whole.
            lambda n: planned and memory_guard(n, self.available[n], total, headroom) is None,
        )
        skipped.update(unsampled)
        self.skipped = skipped
        self.late = {n: options.late[n] for n in unsampled if n in options.late}
        for (name, _cache), (big, _small, _middle) in sets.items():
            nbytes = total if big is None else sample_size(files, big)[0]
            if name not in skipped and (
                why := memory_guard(name, self.available[name], nbytes, headroom)
            ):
                skipped[name] = why
        names = [n for n in names if n not in skipped]
        _no_strategy_left(names, skipped)
        scopes = {t: scope for t, scope in scopes.items() if t[0] in names}
        sets = {t: pair for t, pair in sets.items() if t[0] in names}
        once = {t for t, scope in scopes.items() if scope == "whole" and sizes[t] < total}
        extrapolated = [t for t, scope in scopes.items() if scope != "whole"]
        if not extrapolated:
            self.sampling = None
            return names
        # The report's sample: the smallest any strategy read.
        first = min(extrapolated, key=lambda n: sample_size(files, sets[n][0] or {})[0])
        big, small, _middle = sets[first]
        assert big is not None
        nbytes, count = sample_size(files, big)
        sample = Sample(
            nbytes,
            total,
            count,
            len(big),
            None,
            reason,
            sample_size(files, small)[0] if small else None,
            "shards" if scopes[first] == "shards" else "tensors",
        )
        self.sampled = SampledChoices(scopes, sets, once, sample)
        return names

    def references(self, names: list[str]) -> dict[int, dict[str, str]]:
        """The reference of each distinct set of tensors a trial loads (key 0: every
        tensor), from one read of them all; none for torch checkpoints (their first
        trial's digests are)."""
        sets, scopes = self.sampled.sets, self.sampled.scopes
        distinct = {id(s): s for trio in sets.values() for s in trio if s is not None}
        if not self.sampleable:
            return {}
        # Every tensor's too where a trial runs whole, or one skipped may (options.late).
        every = self.sampling is None or "whole" in scopes.values() or bool(self.late)
        return bounded_references(self.files, distinct, every, self.options.trial_timeout_s)

    def caches(self) -> list[CacheMode]:
        """The cache states asked for that can run: warm only where the files fit."""
        caches = list(self.options.cache)
        if self.source is not None and "warm" in caches:
            caches.remove("warm")
            self.notes.append(f"warm trials not run: {self.source.cold_means}")
        if "warm" in caches:
            room, what = page_cache_room()
            if self.total > WARM_ENOUGH * room:
                caches.remove("warm")
                self.notes.append(
                    f"warm trials not run: the {format_bytes(self.total)} of files cannot stay"
                    f" in the page cache within {what}"
                )
        if not caches:
            raise BenchError(self.notes[-1])
        return caches

    def run_plan(self, plan: _Plan, references: dict[int, dict[str, str]]) -> None:
        """Every trial of ``plan`` in order (more rounds while the deadline allows); the
        ones the deadline leaves no time for are skipped."""
        options = self.options
        extra = options.more_rounds if options.deadline is not None else 0
        self.whole_reference = 0 in references
        i = 0
        while i < len(plan.trials):
            trial = plan.trials[i] = replace(plan.trials[i], id=i + 1)
            i += 1
            if options.cancel is not None and options.cancel.is_set():
                raise BenchCancelled("stopped before the next trial")
            late = options.deadline is not None and time.monotonic() >= options.deadline
            if late and not (trial.fit and trial.strategy in options.denominators):
                plan.trials[i - 1] = replace(
                    trial, status="skipped", reason="the time budget was spent"
                )
                continue
            self.say(TrialStarted(trial, i - 1, len(plan.trials)))
            trial = plan.trials[i - 1] = self._one(trial, references)
            self.say(TrialFinished(trial))
            if i == len(plan.trials) and (extra > 0 or self.late) and plan.another_round(extra):
                extra -= 1

    def _one(self, trial: Trial, references: dict[int, dict[str, str]]) -> Trial:
        """Run ``trial`` on what its strategy reads, checked against its reference; the
        trial finished."""
        chosen: SampleSet | None = None
        if self.sampling is not None:
            # A fit trial of round 1 reads the quarter-size set, of round 2 the half.
            size = min(trial.repeat, 2) if trial.fit else 0
            chosen = self.sampled.sets[(trial.strategy, trial.cache)][size]
        if self.sampleable:
            reference = references[id(chosen) if chosen is not None else 0]
        else:
            reference = self.learned
        its_files = self.files_for(trial.strategy)
        finished, digests = run_trial(
            trial,
            its_files,
            chosen,
            options=self.options,
            reference=reference,
            block_stat=self.block_stat,
            cold=self.cold,
            listener=self.say,
            total_bytes=(
                sum(f.size_bytes for f in its_files)
                if chosen is None
                else sample_size(self.files, chosen)[0]
            ),
            scratch_dir=self.scratch,
            source=self.source,
            address=self.target.address,
        )
        if not self.sampleable and not self.learned and finished.status == "ok" and digests:
            # Torch checkpoints have no header to read a reference from (nor is another
            # source's model read here but by its strategies): the first trial's tensors
            # become the reference every later trial must match.
            self.learned.update(digests)
            return replace(finished, detail={**finished.detail, "reference": True})
        return finished

    def report(self, names: list[str], skipped: dict[str, str], plan: list[Trial]) -> BenchReport:
        options = self.options
        if late := sum(1 for t in plan if t.status == "skipped"):
            self.notes.append(f"{late} of {len(plan)} trials not run: the time budget was spent")
        fits, plan = extrapolate_trials(plan, self.total)
        sample = self.sampled.sample
        if sample is not None:
            errors = [f.error for f in fits.values() if f.error is not None]
            sample = replace(sample, error_estimate=max(errors) if errors else None)
        return BenchReport(
            target=target_record(self.target),
            options={
                "strategies": names + [n for n in self.ran_late if n not in names],
                "cache": list(options.cache),
                "repeats": options.repeats,
                "warmup": options.warmup,
                "budget_s": options.budget_s,
                "knobs": options.knobs,
                "hints": options.hints,
                # Only GPU runs say so: CPU reports keep the shape they always had.
                **({"device": options.device} if options.device != "cpu" else {}),
            },
            trials=plan,
            summary=bench_summaries(plan, fits, self.sampled.scopes),
            skipped=skipped,
            sample=sample,
            notes=self.notes,
        )
