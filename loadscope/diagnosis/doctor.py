"""``loadscope doctor``: probes, then the trials they call for, then the advice, in one budget.

Owns the run itself (:func:`run_doctor`) and the trials it adds after the first round:
a pickle-only model's sample converted to safetensors and both timed, the multi-rank
round, the readahead fix tried on the mount
(:mod:`~loadscope.diagnosis.readahead_trial`) and the copy to a local disk tried
(:mod:`~loadscope.diagnosis.copy_trial`). The plan within the budget is
:mod:`~loadscope.diagnosis.trial_plan`'s, the report and its text
:mod:`~loadscope.diagnosis.doctor_report`'s, its redaction
:mod:`~loadscope.diagnosis.redaction`'s (their public names are importable from here too).

May import: ``loadscope.advice``, ``loadscope.engine``, ``loadscope.actions``,
``loadscope.model``, ``loadscope.probes``, ``loadscope.loaders.strategies``,
``loadscope.base``, and the modules above.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadscope.actions.convert import (
    ConversionFailed,
    ConversionTrial,
    conversion_folder,
    convert,
)
from loadscope.actions.hostsettings import MountLock, restore_stale
from loadscope.advice.facts import Facts
from loadscope.advice.objstore_rules import advise_object_store
from loadscope.advice.rules import (
    Advice,
    advise_facts,
    facts_from,
    problem_headline,
    problem_words,
    rank_key,
)
from loadscope.advice.source_rules import advise_source
from loadscope.base import fix_ids
from loadscope.base.errors import LoadscopeError
from loadscope.base.units import format_bytes
from loadscope.diagnosis.bucket_trial import measure_bucket
from loadscope.diagnosis.bucket_trial import reserve_s as bucket_reserve_s
from loadscope.diagnosis.copy_trial import measure_copy
from loadscope.diagnosis.device_plan import hints_from
from loadscope.diagnosis.doctor_report import (
    MAX_REPORT_BYTES,
    DoctorReport,
    ReportError,
    load_report,
    to_text,
)
from loadscope.diagnosis.rank_round import (
    file_rank_round,
    ranks_said,
    store_rank_round,
    store_round_s,
)
from loadscope.diagnosis.readahead_trial import (
    device_of,
    readahead_allowed,
    readahead_evidence,
    verify_readahead,
)
from loadscope.diagnosis.redaction import redact
from loadscope.diagnosis.stack_scope import scoped
from loadscope.diagnosis.store_copy_trial import kept_from_trials_s, measure_store_copy
from loadscope.diagnosis.timing import TimeReport, UserCommand, for_doctor, quote_in_advice
from loadscope.diagnosis.trial_costs import (
    TRIAL_OVERHEAD_S,
    estimate_rates,
    readahead_reserve_s,
)
from loadscope.diagnosis.trial_plan import (
    BASELINE_STRATEGIES,
    FAVOURED,
    MAX_ROUNDS,
    WARM_STRATEGIES,
    TrialPlan,
    late_estimates,
    plan_doctor,
    source_plan,
)
from loadscope.engine.bench import (
    BenchCancelled,
    BenchError,
    BenchOptions,
    BenchReport,
    Listener,
    memory_guard,
    run_bench,
)
from loadscope.engine.probing import ProbeReport, run_probes
from loadscope.loaders.strategies import DEFAULT, HF_DEFAULT, STRATEGIES, TORCH_DEFAULT
from loadscope.model.targets import Target
from loadscope.probes.memory import memory_headroom
from loadscope.probes.objclient import OBJECT_STORES

__all__ = [
    "DEFAULT_BUDGET_S",
    "MAX_REPORT_BYTES",
    "DoctorOptions",
    "DoctorReport",
    "ReportError",
    "load_report",
    "measure_conversion",
    "redact",
    "run_doctor",
    "to_text",
    "verify_readahead",
]

DEFAULT_BUDGET_S = 120.0


@dataclass(frozen=True, slots=True)
class DoctorOptions:
    """What a diagnosis is asked (as ``BenchOptions`` for ``bench``).

    ``device`` "auto" loads to the GPU when there is a usable one (else the CPU);
    ``ranks`` N >= 2 adds multi-rank trials (independent reads vs rank-0 read +
    broadcast vs sharded) in the last 40% of the trial budget; None means one rank
    per GPU when there are several. ``fio`` also runs the fio jobs that reproduce the
    probe's measurements (up to ~30 s, outside the budget). ``command`` (``--cmd``) is
    the user's own load, run cold as it is and after each no-code fix once the advice
    is made (outside the budget), its gains quoted under the fixes. ``try_readahead`` None
    measures the readahead fix where this process may write the mount's setting (root),
    True insists, False never touches it. Setting ``cancel`` stops the run
    (BenchCancelled) with no worker left behind.
    """

    budget_s: float = DEFAULT_BUDGET_S
    device: str = "auto"
    ranks: int | None = None
    try_readahead: bool | None = None
    fio: bool = False
    command: UserCommand | None = None
    cancel: threading.Event | None = None
    #: The user's stacks (``--stack``): the trials of the others' routes are left out.
    stacks: tuple[str, ...] = ()
    #: The bucket behind the model's mount (``--bucket s3://...``): read directly too.
    bucket: str | None = None


def run_doctor(
    target: Target,
    options: DoctorOptions | None = None,
    *,
    listener: Listener | None = None,
    on_probes: Callable[[ProbeReport], None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> DoctorReport:
    """Probes, trials, advice, as ``options`` ask (:class:`DoctorOptions`). ``listener``
    gets the trial events, ``on_probes`` the probe report as soon as it exists,
    ``progress`` each step's name.

    The run holds its mount's lock (:class:`~loadscope.actions.hostsettings.MountLock`):
    another loadscope measuring the same mount is waited for, and said so."""
    options = options or DoctorOptions()
    failures: list[str] = []
    failures += [f"host settings: {line}" for line in restore_stale()]
    if not target.on_files:  # another source: no mount here that two runs could share
        return _source_doctor(target, options, listener, on_probes, progress, failures)
    with MountLock(device_of(target), on_wait=progress) as lock:
        if lock.waited_s:
            failures.append(
                f"waited {lock.waited_s:.0f} s for another loadscope measuring this mount"
            )
        return _run_doctor(target, options, listener, on_probes, progress, failures)


def _run_doctor(
    target: Target,
    options: DoctorOptions,
    listener: Listener | None,
    on_probes: Callable[[ProbeReport], None] | None,
    progress: Callable[[str], None] | None,
    failures: list[str],
) -> DoctorReport:
    budget_s, cancel, command = options.budget_s, options.cancel, options.command
    started = time.monotonic()

    def step(name: str) -> None:
        if cancel is not None and cancel.is_set():
            raise BenchCancelled(f"stopped during {name}")
        if progress is not None:
            progress(name)

    probe = run_probes(
        target, budget_s=min(15.0, budget_s * 0.15), progress=step, run_fio=options.fio
    )
    if on_probes is not None:
        on_probes(probe)
    step("trials")
    for name, result in (("latency", probe.latency), ("throughput", probe.throughput)):
        if not result.ok:
            failures.append(f"probe {name}: {result.status.value}: {result.reason}")
    plan = _plan(target, probe, options, failures)
    bench = _run_trials(target, probe, plan, budget_s, listener, cancel, failures)
    conversion = None
    if target.formats == {"torch"} and not target.alternates and not probe.stalled:
        # (Safetensors already beside the pickles were loaded among the trials instead.)
        step("conversion")
        total_left = max(10.0, budget_s - (time.monotonic() - started) - 1.0)
        conversion = measure_conversion(
            target, bench, time.monotonic() + total_left, listener, cancel
        )
        if conversion is not None and conversion.reason:
            failures.append(f"conversion to safetensors: not measured: {conversion.reason}")
    rank_report = None
    if plan.ranks is not None and not probe.stalled:
        step("ranks")
        rank_report = file_rank_round(
            target, bench, plan.ranks, plan.device, budget_s, started, cancel, failures
        )
    step("advice")
    facts = facts_from(probe, bench, rank_report, failures, conversion)
    facts.budget_s = facts.budget_s or budget_s  # what "the budget that measures it" scales
    advice = advise_facts(facts)
    checks = (options, started, step, failures)
    _checks_after_trials(target, probe, bench, plan, facts, advice, checks)
    measured_since = any(r.id in MEASURED_SINCE and r.measured for r in advice.recommendations)
    if advice.verdict.status == "problem" and measured_since and not facts.stalled:
        # A fix measured since (the readahead, the copy) may now lead, with its number.
        advice.verdict.headline = problem_headline(facts, advice.recommendations) or (
            advice.verdict.headline
        )
        advice.verdict.problem = problem_words(facts, advice.recommendations)
    user = None
    if command is not None:
        step("your command")
        user = _time_user_command(target, command, advice, progress, failures)
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return DoctorReport(probe, bench, advice, created, failures, rank_report, conversion, user)


#: The fixes measured after the trials (their checks may put a number on them).
MEASURED_SINCE = (
    fix_ids.RAISE_READAHEAD,
    fix_ids.COPY_TO_LOCAL_DISK,
    fix_ids.READ_BUCKET_DIRECTLY,
)


def _checks_after_trials(
    target: Target,
    probe: ProbeReport,
    bench: BenchReport | None,
    plan: TrialPlan,
    facts: Facts,
    advice: Advice,
    checks: tuple[DoctorOptions, float, Callable[[str], None], list[str]],
) -> None:
    """The readahead fix tried, the copy to a local disk tried, and (``--bucket``) the
    bucket behind the mount read directly, each within what the budget leaves;
    ``checks``: the options, when the run started, its step callback, its failures."""
    options, started, step, failures = checks
    budget_s, cancel = options.budget_s, options.cancel
    # --bucket's reads come last: their share of the budget is kept from the checks
    # before them (the readahead check ran to the budget's end and the bucket after it:
    # 1.11x the budget on an rclone mount).
    keep = bucket_reserve_s(target, max(estimate_rates(probe)), budget_s) if options.bucket else 0
    # The check's loads stop at the budget's end (at least the time reserved for them).
    end = max(started + budget_s - keep, time.monotonic() + min(plan.reserve_s - keep, budget_s))
    readahead_evidence(
        target, probe, bench, advice, plan.sample, options.try_readahead, failures, end
    )
    copy = next((r for r in advice.recommendations if r.id == fix_ids.COPY_TO_LOCAL_DISK), None)
    if copy is not None and bench is not None and not facts.stalled:
        step("copy")
        left = max(0.0, budget_s - keep - (time.monotonic() - started))
        tried = measure_copy(target, facts, copy, time.monotonic() + left, cancel)
        if tried.reason:
            failures.append(f"copy trial: not run: {tried.reason}")
    if options.bucket and bench is not None and not facts.stalled:
        step("bucket")
        end = max(started + budget_s, time.monotonic() + keep)
        read = measure_bucket(target, options.bucket, facts, advice, end, cancel)
        if read.reason:
            failures.append(f"--bucket {options.bucket}: not timed: {read.reason}")
    advice.recommendations.sort(key=rank_key)


def _plan(
    target: Target, probe: ProbeReport, options: DoctorOptions, failures: list[str]
) -> TrialPlan:
    """The single-rank and rank trials for what the probes left of the budget."""
    # The readahead check's time, at most a share of the budget: at 256 MiB and --budget
    # 30 all of it (9 s) left from_pretrained no whole load, and transformers no figure.
    reserve = min(
        RESERVE_SHARE * options.budget_s,
        readahead_reserve_s(
            probe,
            readahead_allowed(probe, options.try_readahead),
            with_hf=not scoped((HF_DEFAULT,), options.stacks)[1],
        ),
    )
    if options.bucket:  # the bucket read directly after the trials (--bucket)
        reserve += bucket_reserve_s(target, max(estimate_rates(probe)), options.budget_s)
    return plan_doctor(
        target,
        probe,
        options.budget_s,
        options.device,
        options.ranks,
        failures,
        reserve,
        options.stacks,
    )


def _source_doctor(
    target: Target,
    options: DoctorOptions,
    listener: Listener | None,
    on_probes: Callable[[ProbeReport], None] | None,
    progress: Callable[[str], None] | None,
    failures: list[str],
) -> DoctorReport:
    """A model in another source than files (``probes/sources.py``): the machine's probes
    and the source's own, its strategies' whole loads, then the verdict from them. The
    file checks (the readahead, a copy, the conversion, the ranks' round) have no files
    to run on."""
    say = progress or (lambda _step: None)
    started = time.monotonic()
    probe = run_probes(target, budget_s=min(15.0, options.budget_s * 0.15), progress=say)
    if on_probes is not None:
        on_probes(probe)
    say("trials")
    if options.command is not None:
        failures.append("your command: not timed: --cmd times a model in files")
    store, ranks = target.source in OBJECT_STORES, None
    asked = options.ranks is not None and options.ranks >= 2
    if asked and not store:
        failures.append("ranks: not run: the multi-rank round reads files or an object store")
    # A bucket's download-then-load trial and ranks' round after the streaming trials,
    # their time kept out of the trials'.
    rank_s = store_round_s(options.budget_s) if store and asked else 0.0
    reserve = kept_from_trials_s(target, facts_from(probe, None), options.budget_s) + rank_s
    plan = source_plan(target, probe, options.budget_s, reserve if store else 0.0)
    bench = _run_trials(target, probe, plan, options.budget_s, listener, options.cancel, failures)
    facts = facts_from(probe, bench, None, failures, None)
    facts.budget_s = facts.budget_s or options.budget_s
    title = target.detail or target.source
    if store:
        compatible = bool(os.environ.get("AWS_ENDPOINT_URL"))
        advice = advise_object_store(facts, title, target.spec, compatible)
        say("copy")
        end = max(started + options.budget_s, time.monotonic() + reserve)
        tried = measure_store_copy(target, facts, advice, end - rank_s, options.cancel)
        if tried.reason:
            failures.append(f"copy trial: not run: {tried.reason}")
        if asked:
            say("ranks")
            ranks = store_rank_round(target, probe, options, started + options.budget_s, failures)
            ranks_said(ranks, advice)
    else:
        advice = advise_source(facts, title)
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return DoctorReport(probe, bench, advice, created, failures, ranks)


def _time_user_command(
    target: Target,
    command: UserCommand,
    advice: Advice,
    progress: Callable[[str], None] | None,
    failures: list[str],
) -> TimeReport | None:
    """``--cmd``: the user's command timed as it is and after each no-code fix."""
    try:
        report = for_doctor(
            str(target.root),
            command.argv,
            until=command.until,
            ready_url=command.ready_url,
            progress=progress or (lambda _s: None),
            profile=command.profile,
        )
    except LoadscopeError as exc:
        failures.append(f"your command: not timed: {exc}")
        return None
    quote_in_advice(advice.recommendations, report)
    bad = next((r for r in report.baseline().runs if r.status != "ok"), None)
    if bad is not None:
        failures.append(f"your command: {bad.reason or bad.status}")
    return report


def _too_big(name: str, target: Target) -> str | None:
    """Why the memory guard refuses ``name`` a whole load of ``target``, or None."""
    known = STRATEGIES.get(name)
    if known is None:
        return None
    info = {"ram_multiple": known.requires.ram_multiple}
    return memory_guard(name, info, target.total_bytes, memory_headroom())


def _run_trials(
    target: Target,
    probe: ProbeReport,
    plan: TrialPlan,
    budget_s: float,
    listener: Listener | None,
    cancel: threading.Event | None,
    failures: list[str],
) -> BenchReport | None:
    """The single-rank trials of ``plan`` (None when they could not run, saying why in
    ``failures``, where the skipped and failed ones go too)."""
    hints = hints_from(probe)
    try:
        if probe.stalled:
            # Trials would wait on the same storage: say so rather than time out each one.
            raise BenchError(f"not run: {probe.stalled}")
        bench = run_bench(
            target,
            BenchOptions(
                strategies=plan.strategies,
                # No warm trials where the mount keeps no pages (the plan says why).
                cache=("cold", "warm") if plan.warm else ("cold",),
                warm_strategies=WARM_STRATEGIES,
                hints=hints,
                repeats=plan.repeats,
                # The plan is drawn before any trial, from the probe's rates; rounds
                # that the measured ones show still fit are run too (up to 3), unless
                # the budget asked for was under one round's.
                more_rounds=0 if plan.at_least else max(0, MAX_ROUNDS - plan.repeats),
                favoured=FAVOURED,
                late=late_estimates(probe, plan),
                denominators=BASELINE_STRATEGIES,
                warmup=False,
                sample_bytes=plan.sample,
                sample_bytes_for=plan.sample_sizes,
                sample_reason=f"full loads of every strategy would not fit {budget_s:g} s",
                trial_timeout_s=max(30.0, plan.trial_s),
                deadline=time.monotonic() + plan.trial_s,
                cancel=cancel,
                device=plan.device,
                cpu_too=plan.device != "cpu",
            ),
            listener,
        )
    except BenchError as exc:
        failures.append(f"bench: {exc}")
        return None
    # The trials that gave way to loadscope's own routes are skipped with their reason,
    # unless the whole model would not fit in RAM for them: no budget runs those.
    bench.skipped.update(
        {k: _too_big(k, target) or v for k, v in plan.left_out.items() if k not in bench.skipped}
    )
    failures += [f"{k}: skipped: {v}" for k, v in bench.skipped.items()]
    failures += [
        f"trial #{t.id} {t.strategy} {t.cache}: {t.reason}"
        for t in bench.trials
        if t.status == "failed"
    ]
    return bench


def measure_conversion(
    target: Target,
    bench: BenchReport | None,
    deadline: float,
    listener: Listener | None,
    cancel: threading.Event | None,
) -> ConversionTrial | None:
    """The smallest torch file converted to safetensors in a folder loadscope makes and
    removes, then loaded both ways, interleaved, cold and warm, digests checked; the
    reason instead when it does not fit the time, the memory or the disk."""
    if not target.files:
        return None
    src = min(target.files, key=lambda f: f.size_bytes)
    trial = ConversionTrial(str(src.path), src.size_bytes)
    base = next(
        (
            s
            for s in (bench.summary if bench else [])
            if s.strategy == TORCH_DEFAULT and s.cache == "cold"
        ),
        None,
    )
    if base is None or not base.median_seconds:
        trial.reason = "no cold torch.load trial completed to compare with"
        return trial
    per_byte = base.median_seconds / max(target.total_bytes, 1)
    # Converting reads and writes it (about two loads), then four timed loads.
    estimate = 6 * per_byte * src.size_bytes + 5 * TRIAL_OVERHEAD_S
    left = deadline - time.monotonic()
    if estimate > left:
        trial.reason = (
            f"converting and timing {src.path.name} ({format_bytes(src.size_bytes)}) would take"
            f" ~{estimate:.0f} s, over the {max(0.0, left):.0f} s the budget leaves"
        )
        return trial
    if 2 * src.size_bytes > memory_headroom():
        trial.reason = f"converting {src.path.name} would hold it twice in RAM"
        return trial
    folder: Path | None = None
    try:
        folder, trial.where = conversion_folder(target.root, src.size_bytes)
        converted, trial.convert_seconds = convert(src, folder, timeout_s=max(10.0, left))
        sample = Target(
            f"{src.path.name} converted", "directory", folder, (converted,), alternates=(src,)
        )
        report = run_bench(
            sample,
            BenchOptions(
                strategies=(DEFAULT, TORCH_DEFAULT),
                cache=("cold", "warm"),
                repeats=1,
                more_rounds=2,
                warmup=False,
                deadline=deadline,
                trial_timeout_s=max(30.0, left),
                cancel=cancel,
            ),
            listener,
        )
        med = {(x.strategy, x.cache): x.median_seconds for x in report.summary}
        trial.pickle_cold_s, trial.safetensors_cold_s = (
            med.get((TORCH_DEFAULT, "cold")),
            med.get((DEFAULT, "cold")),
        )
        trial.pickle_warm_s, trial.safetensors_warm_s = (
            med.get((TORCH_DEFAULT, "warm")),
            med.get((DEFAULT, "warm")),
        )
        ok = [t for t in report.trials if t.status == "ok"]
        trial.trial_ids = [t.id for t in ok]
        trial.verified = bool(ok) and all(t.verified for t in ok)
        if trial.speedup is None:
            trial.reason = "no cold trial of both formats completed"
    except (ConversionFailed, BenchError) as exc:
        trial.reason = str(exc)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            trial.removed = not folder.exists()
    return trial


#: The most of the budget kept out of the trials for the readahead check after them.
RESERVE_SHARE = 0.15
