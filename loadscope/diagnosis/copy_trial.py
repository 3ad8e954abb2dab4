"""The copy route measured: a sample of the model copied to the local disk the advice names,
then loaded cold there with the stack's default, against the same sample in place.

The advice's copy figure was a division: the in-place load over the model's bytes at
the local disk's probe rate (a 64 MiB temporary file, which swung 1.9-3.5 GB/s between
runs), where copying and loading by hand gave 17.5x against a printed 22-42x. Here the
copy is done (``loadscope copy``'s own code, into a folder of the candidate disk removed
afterwards) and timed, and ``load_file`` (the default every stack's figure is against)
runs cold on both copies in turn, round after round, so that the recommendation carries
a measured ratio with its range, the copy's own time and the loads it takes to repay it.

Whole files only (a file cannot be loaded from part of it): the smallest files first, up
to :data:`SAMPLE_BYTES` (the whole model when smaller). Nothing is run when it would
not fit what is left of the budget, or when the sample would not fit the disk: the
recommendation then says why it is estimated.

May import: ``loadscope.advice``, ``loadscope.actions``, ``loadscope.engine``,
``loadscope.model``, ``loadscope.loaders.strategies``, ``loadscope.base``.
"""

from __future__ import annotations

import math
import shutil
import statistics
import threading
import time
from dataclasses import dataclass, field

from loadscope.actions.localcopy import copy_model
from loadscope.advice.facts import Facts, ratio_terms
from loadscope.advice.results import WORTH_IT, Evidence, Recommendation
from loadscope.base.errors import LoadscopeError
from loadscope.base.tempdirs import owned_tempdir
from loadscope.base.units import format_bytes
from loadscope.diagnosis.trial_costs import TRIAL_OVERHEAD_S
from loadscope.engine.bench import BenchCancelled, BenchError, BenchOptions, Summary, run_bench
from loadscope.loaders.strategies import DEFAULT
from loadscope.model.targets import Target, resolve

#: The most a copy trial copies: the whole model when it is smaller.
SAMPLE_BYTES = 256 << 20
#: Rounds of the two cold loads (in place, then the copy; the next round the other way).
ROUNDS = 3


@dataclass(slots=True)
class CopyTrial:
    """What the copy trial measured, or why it did not run (``reason``)."""

    sample_bytes: int = 0
    model_bytes: int = 0
    where: str = ""
    copy_seconds: float | None = None
    in_place_s: list[float] = field(default_factory=list)
    local_s: list[float] = field(default_factory=list)
    reason: str = ""
    removed: bool = False

    @property
    def speedup(self) -> float | None:
        if not self.in_place_s or not self.local_s:
            return None
        return statistics.median(self.in_place_s) / statistics.median(self.local_s)


def sample_files(target: Target, cap: int = SAMPLE_BYTES) -> list[int]:
    """The indices of ``target``'s files the trial copies: smallest first, whole, up to
    ``cap`` bytes (at least the smallest one)."""
    order = sorted(range(len(target.files)), key=lambda i: target.files[i].size_bytes)
    out: list[int] = []
    total = 0
    for i in order:
        size = target.files[i].size_bytes
        if out and total + size > cap:
            break
        out.append(i)
        total += size
    return out


def summary_of(times: list[float]) -> Summary:
    """``times`` (cold loads of ``load_file``) as a bench summary, for ``ratio_terms``."""
    med = statistics.median(times)
    return Summary(DEFAULT, "cold", len(times), med, None, None, None, min(times), max(times))


def cold_loads(
    target: Target, count: int, deadline: float, cancel: threading.Event | None
) -> list[float]:
    """``count`` cold ``load_file`` runs of ``target``'s files (each verified cold), their
    seconds; raises BenchError where none completed."""
    report = run_bench(
        target,
        BenchOptions(
            strategies=(DEFAULT,),
            repeats=count,
            warmup=False,
            deadline=deadline,
            trial_timeout_s=max(10.0, deadline - time.monotonic()),
            cancel=cancel,
        ),
    )
    ok = [t for t in report.trials if t.status == "ok" and t.cache_verified and t.seconds]
    if not ok:
        failed = next((t.reason for t in report.trials if t.reason), "no verified cold trial")
        raise BenchError(f"the cold load did not complete: {failed}")
    return [float(t.seconds or 0.0) for t in ok]


def _cold_load(target: Target, deadline: float, cancel: threading.Event | None) -> float:
    """One cold ``load_file`` of ``target``'s files (verified cold), its seconds."""
    return cold_loads(target, 1, deadline, cancel)[0]


def measure_copy(
    target: Target,
    facts: Facts,
    rec: Recommendation,
    deadline: float,
    cancel: threading.Event | None = None,
) -> CopyTrial:
    """Copy a sample of ``target`` to the local disk of ``rec`` (the copy fix), load it cold
    there and in place in turn, and put the measured figure on ``rec``; the trial (with
    why it did not run, if so) either way."""
    disk = facts.local_disk
    trial = CopyTrial(model_bytes=target.total_bytes)
    if disk is None or not target.files:
        trial.reason = "no local disk to copy to"
        return _say(rec, trial)
    picked = sample_files(target)
    trial.where = disk.directory
    trial.sample_bytes = sum(target.files[i].size_bytes for i in picked)
    share = trial.sample_bytes / max(1, target.total_bytes)
    mmap_s = (facts.seconds(DEFAULT) or 0.0) * share
    copy_est = trial.sample_bytes / max(
        1.0, min(disk.write_bytes_per_s, disk.cold_read_bytes_per_s)
    )
    need = 2 * copy_est + ROUNDS * (mmap_s + 2 * TRIAL_OVERHEAD_S) + 1.0
    left = deadline - time.monotonic()
    if need > left:
        trial.reason = (
            f"copying {format_bytes(trial.sample_bytes)} and loading it {ROUNDS} times each way"
            f" needs ~{need:.0f} s, over the {max(0.0, left):.0f} s the budget leaves"
            + (
                f" (about --budget {math.ceil((facts.budget_s + need - left + 1) / 10) * 10:.0f}"
                " measures it)"
                if facts.budget_s
                else f" (~{math.ceil(need - left + 1)} s more --budget measures it)"
            )
        )
        return _say(rec, trial)
    try:
        free = shutil.disk_usage(disk.directory).free
    except OSError as exc:  # the disk gone or unreadable since the probe
        trial.reason = f"cannot use {disk.directory}: {exc.strerror or exc}"
        return _say(rec, trial)
    if trial.sample_bytes + (64 << 20) > free:
        trial.reason = f"{disk.directory} has no room for {format_bytes(trial.sample_bytes)}"
        return _say(rec, trial)
    sample = Target(
        f"{len(picked)} file(s) of {target.spec}",
        "directory",
        target.root if target.root.is_dir() else target.root.parent,
        tuple(target.files[i] for i in picked),
    )
    # Named after this process: a run killed outright leaves it to the next one to remove.
    try:
        folder = owned_tempdir("loadscope-copy-trial-", disk.directory)
    except OSError as exc:  # not writable (any more)
        trial.reason = f"cannot write in {disk.directory}: {exc.strerror or exc}"
        return _say(rec, trial)
    try:
        t0 = time.perf_counter()
        copy_model(sample, folder / "model", cancel=cancel)
        trial.copy_seconds = time.perf_counter() - t0
        local = resolve(str(folder / "model"))
        for i in range(ROUNDS):
            pair = [(sample, trial.in_place_s), (local, trial.local_s)]
            for where, times in pair if i % 2 == 0 else reversed(pair):
                times.append(_cold_load(where, deadline, cancel))
    except BenchCancelled:
        raise  # the user's Stop stops the run, not the trial alone
    except (LoadscopeError, OSError) as exc:
        trial.reason = f"the copy trial failed: {exc}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        trial.removed = not folder.exists()
    _say(rec, trial)
    if trial.speedup is not None and not trial.reason:
        rec.optional = _optional(trial, facts)
    return trial


def _optional(trial: CopyTrial, facts: Facts) -> bool:
    """Whether the copy fix is optional: unless a load from the copy beats the fastest
    load in place by ``WORTH_IT`` (as the estimate was ranked), a copy is a heavier change
    than a route in place."""
    scale = trial.model_bytes / max(1, trial.sample_bytes)
    from_copy = statistics.median(trial.local_s) * scale
    in_place = [t for name in facts.cold if (t := facts.seconds(name))]
    return bool(in_place) and from_copy * WORTH_IT > min(in_place)


def _say(rec: Recommendation, trial: CopyTrial) -> CopyTrial:
    """The copy fix with the trial's figure (measured), or why it stays estimated."""
    gain = trial.speedup
    if gain is None or trial.copy_seconds is None or trial.reason:
        if trial.reason:
            rec.evidence.append(Evidence("copy trial: not run", trial.reason))
        return trial
    terms = ratio_terms(gain, summary_of(trial.in_place_s), summary_of(trial.local_s))
    scale = trial.model_bytes / max(1, trial.sample_bytes)
    copy_whole = trial.copy_seconds * scale
    in_place = statistics.median(trial.in_place_s) * scale
    local = statistics.median(trial.local_s) * scale
    saved = in_place - local
    repaid = max(1, math.ceil(copy_whole / saved)) if saved > 0 else None
    rec.expected_speedup, rec.measured, rec.how = gain, True, terms.how
    rec.confidence = "high" if not terms.unsteady and terms.error <= 0.1 else "medium"
    what = "the model" if scale == 1 else f"{format_bytes(trial.sample_bytes)} of the model"
    rec.action = (
        f"copy the model to {trial.where} (local disk): measured here, {what} copied in"
        f" {trial.copy_seconds:.3g} s and loaded cold there {gain:.1f}x faster than in place"
        f" ({terms.how})"
        + (f"; for the whole model ~{copy_whole:.3g} s to copy" if scale > 1 else "")
        + (f", repaid after {repaid} cold load(s)" if repaid else ", never repaid here")
    )
    rec.evidence += [
        Evidence(f"copy trial: {what} copied (verified) to {trial.where}", trial.copy_seconds, "s"),
        Evidence(
            f"copy trial: load_file cold in place, {ROUNDS} runs",
            statistics.median(trial.in_place_s),
            "s",
        ),
        Evidence(
            f"copy trial: load_file cold from the copy, {ROUNDS} runs",
            statistics.median(trial.local_s),
            "s",
        ),
    ]
    for snip in rec.snippets:
        snip.speedup, snip.how, snip.low, snip.high = gain, terms.how, terms.low, terms.high
        snip.proxy = f"load_file from a copy of {what} on {trial.where}, against in place"
        snip.note = ""
    return trial
