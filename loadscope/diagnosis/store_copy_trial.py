"""The download-then-load route of a model in an object store, measured: a sample of its
objects copied to the local disk the probes found with ``loadscope copy``'s own code
(:func:`~loadscope.actions.storecopy.copy_from_store`: many ranged GETs, every block
checked), then ``load_file`` run cold on the copy, trial after trial.

What the fix changes is each start after the copy: it loads from the local disk instead
of streaming the store. Its figure is that per-start ratio, against the route the store's
other fixes are taken against (Run:ai's streamer at its defaults where it ran, else one
GET per object: ``advice/objstore_rules.py``), with the copy's own time and the starts it
takes to repay it (a first start pays the copy and the load; each later one the load).

Whole objects only, the smallest first, up to :data:`SAMPLE_BYTES` (the whole model when
smaller), scaled to the model as the file copy trial's are. Nothing runs where it would
not fit what the budget leaves, or where the disk has no room for it: the report says
why, with no number.

May import: ``loadscope.advice``, ``loadscope.actions``, ``loadscope.engine``,
``loadscope.model``, ``loadscope.probes`` (the store's objects), ``loadscope.base``, and
:mod:`~loadscope.diagnosis.copy_trial` (the cold loads), :mod:`~loadscope.diagnosis.trial_costs`.
"""

from __future__ import annotations

import math
import shlex
import shutil
import statistics
import threading
import time
from dataclasses import dataclass, field

from loadscope.actions.storecopy import copy_from_store
from loadscope.advice.facts import Facts, ratio_terms
from loadscope.advice.objstore_rules import BASELINE, NAIVE
from loadscope.advice.placement_rules import COPY_ROUTE, copy_destination, copy_snippets
from loadscope.advice.results import Advice, Evidence, Recommendation
from loadscope.base import fix_ids
from loadscope.base.errors import LoadscopeError
from loadscope.base.tempdirs import owned_tempdir
from loadscope.base.units import format_bytes, format_rate, format_speedup
from loadscope.diagnosis.copy_trial import SAMPLE_BYTES, cold_loads, summary_of
from loadscope.diagnosis.trial_costs import SERVER_START_S, TRIAL_OVERHEAD_S
from loadscope.engine.bench import BenchCancelled
from loadscope.model.targets import Target, resolve

#: Cold loads of the copy (one bench, one fork server).
LOADS = 3
#: What makes the copy worth printing as a fix: each start this much faster.
WORTH_IT = 1.2
#: The most of the budget the trial's time is kept from the streaming trials: the copy is
#: the bucket's other route, so more than the file checks' share.
RESERVE_SHARE = 0.4


@dataclass(slots=True)
class StoreCopyTrial:
    """What the trial measured, or why it did not run (``reason``)."""

    sample_bytes: int = 0
    model_bytes: int = 0
    where: str = ""
    copy_seconds: float | None = None
    local_s: list[float] = field(default_factory=list)
    reason: str = ""
    removed: bool = False


def sample_names(target: Target, cap: int = SAMPLE_BYTES) -> list[str]:
    """The objects the trial copies: smallest first, whole, up to ``cap`` bytes (at least
    the smallest)."""
    out: list[str] = []
    total = 0
    for wf in sorted(target.files, key=lambda w: w.size_bytes):
        if out and total + wf.size_bytes > cap:
            break
        out.append(str(wf.path))
        total += wf.size_bytes
    return out


def _sample_bytes(target: Target) -> int:
    names = set(sample_names(target))
    return sum(w.size_bytes for w in target.files if str(w.path) in names)


def reserve_s(target: Target, facts: Facts) -> float:
    """The seconds the trial needs (kept out of the store trials' time), from the store's
    ceiling and the local disk's rates; 0 where it cannot run (no local disk)."""
    disk = facts.local_disk
    if disk is None or not target.files:
        return 0.0
    sample = _sample_bytes(target)
    ceiling = float(facts.probed.get("store_ceiling_bytes_per_s") or 0.0) or 50e6
    write = min(ceiling, disk.write_bytes_per_s or ceiling)
    read = max(1.0, disk.cold_read_bytes_per_s)
    copy_s = sample / max(1.0, write) + sample / read  # fetched, then read back to verify
    return 1.0 + copy_s + SERVER_START_S + LOADS * (TRIAL_OVERHEAD_S + sample / read)


def kept_from_trials_s(target: Target, facts: Facts, budget_s: float) -> float:
    """What the streaming trials leave of ``budget_s`` for this one: :func:`reserve_s`, at
    most :data:`RESERVE_SHARE` of the budget."""
    return min(RESERVE_SHARE * budget_s, reserve_s(target, facts))


def measure_store_copy(
    target: Target,
    facts: Facts,
    advice: Advice,
    deadline: float,
    cancel: threading.Event | None = None,
) -> StoreCopyTrial:
    """Copy a sample of the model in ``target`` to the local disk, load it cold there, and
    add the copy fix to ``advice`` when each start gains :data:`WORTH_IT` (else a note
    saying what it measured). The trial, with why it did not run (``reason``), either way."""
    trial = StoreCopyTrial(model_bytes=target.total_bytes)
    disk = facts.local_disk
    baseline = _baseline(facts)
    if disk is None:
        trial.reason = "no local disk to copy to"
    elif baseline is None:
        trial.reason = "no streaming route of the store completed to compare it with"
    else:
        trial.where = disk.directory
        trial.sample_bytes = _sample_bytes(target)
        _run(target, trial, (deadline, reserve_s(target, facts), facts.budget_s), cancel)
    if not trial.reason and baseline is not None:
        rec, note = _fix(target.spec, facts, trial, baseline)
        if note:
            advice.notes.append(note)
        if rec is not None:
            advice.recommendations.append(rec)
            advice.recommendations.sort(key=lambda r: -(r.expected_speedup or 0.0))
            if advice.verdict.status == "healthy":
                advice.verdict.status = "problem"
    return trial


def _baseline(f: Facts) -> str | None:
    """The route the store's fixes are taken against: Run:ai at its defaults, else one GET
    per object; None where neither completed."""
    for name in (BASELINE, NAIVE):
        known = f.cold.get(name)
        if known is not None and known.median_seconds:
            return name
    return None


def _run(
    target: Target,
    trial: StoreCopyTrial,
    time_s: tuple[float, float, float | None],
    cancel: threading.Event | None,
) -> None:
    """Copy the sample and time :data:`LOADS` cold loads of it (``trial.reason`` says why
    not); ``time_s``: the deadline, the seconds it needs, the budget asked for."""
    deadline, need, budget_s = time_s
    left = deadline - time.monotonic()
    if need > left:
        more = math.ceil((budget_s + need - left + 1) / 10) * 10 if budget_s else None
        trial.reason = (
            f"copying {format_bytes(trial.sample_bytes)} and loading it {LOADS} times needs"
            f" ~{need:.0f} s, over the {max(0.0, left):.0f} s the budget leaves"
            + (f" (about --budget {more} measures it)" if more else "")
        )
        return
    try:
        free = shutil.disk_usage(trial.where).free
    except OSError as exc:
        trial.reason = f"cannot use {trial.where}: {exc.strerror or exc}"
        return
    if trial.sample_bytes + (64 << 20) > free:
        trial.reason = f"{trial.where} has no room for {format_bytes(trial.sample_bytes)}"
        return
    try:
        folder = owned_tempdir("loadscope-store-copy-", trial.where)
    except OSError as exc:
        trial.reason = f"cannot write in {trial.where}: {exc.strerror or exc}"
        return
    try:
        t0 = time.perf_counter()
        copy_from_store(target.spec, folder / "model", only=sample_names(target), cancel=cancel)
        trial.copy_seconds = time.perf_counter() - t0
        if time.monotonic() >= deadline:
            trial.reason = "the budget was spent by the copy; no time left to load it"
            return
        trial.local_s = cold_loads(resolve(str(folder / "model")), LOADS, deadline, cancel)
    except BenchCancelled:
        raise
    except (LoadscopeError, OSError) as exc:
        trial.reason = f"the copy trial failed: {exc}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        trial.removed = not folder.exists()


def _scale(trial: StoreCopyTrial) -> float:
    return trial.model_bytes / max(1, trial.sample_bytes)


def _fix(
    address: str, f: Facts, trial: StoreCopyTrial, baseline: str
) -> tuple[Recommendation | None, str]:
    """The copy fix with the trial's per-start ratio, or None and what was measured where
    each start gains under :data:`WORTH_IT`."""
    base = f.cold[baseline]
    base_s = float(base.median_seconds or 0.0)
    scale = _scale(trial)
    local_s = statistics.median(trial.local_s) * scale
    copy_s = (trial.copy_seconds or 0.0) * scale
    gain = base_s / local_s
    terms = ratio_terms(gain, base, summary_of(trial.local_s))
    against = "Run:ai's streamer at its defaults" if baseline == BASELINE else "one GET per object"
    what = "the model" if scale == 1 else f"{format_bytes(trial.sample_bytes)} of the model"
    saved = base_s - local_s
    repaid = max(1, math.ceil(copy_s / saved)) if saved > 0 else None
    if gain < WORTH_IT:
        return None, (
            f"copy to a local disk: measured here, a start from the copy loads in"
            f" {local_s:.3g} s against {base_s:.3g} s with {against}"
            f" ({format_speedup(gain)}, {terms.how}): under {WORTH_IT}x, no fix"
        )
    dest = copy_destination(trial.where, address)
    rec = Recommendation(
        fix_ids.COPY_TO_LOCAL_DISK,
        "Copy the model to a local disk once",
        f"copy the model to {trial.where} (local disk) once with loadscope copy: measured here,"
        f" {what} fetched and verified in {trial.copy_seconds:.3g} s"
        f" ({format_rate(trial.sample_bytes / max(1e-9, trial.copy_seconds or 0.0))}); each"
        f" start then loads it cold from there {format_speedup(gain)} faster than {against}"
        f" ({terms.how})"
        + (f"; the whole model ~{copy_s:.3g} s to copy" if scale > 1 else "")
        + (f", repaid after {repaid} start(s)" if repaid else ", never repaid here"),
        strategy=COPY_ROUTE,
        route="loadscope copy (a bucket)",
        expected_speedup=gain,
        evidence=[
            Evidence(against, base_s, "s"),
            Evidence(
                f"copy trial: {what} copied (verified) to {trial.where}", trial.copy_seconds, "s"
            ),
            Evidence(
                f"copy trial: load_file cold from the copy of {what}, {len(trial.local_s)} runs",
                statistics.median(trial.local_s),
                "s",
            ),
        ],
        risk=f"needs {format_bytes(trial.model_bytes)} of disk space on every node; the copy"
        " goes stale when the bucket's model is updated",
        confidence="high" if not terms.unsteady and terms.error <= 0.1 else "medium",
        how=terms.how,
        apply={"kind": "copy", "source": address, "dest": dest},
    )
    rec.snippets = copy_snippets(address, dest, shell_alt=_aws_cp(address, dest))
    for snip in rec.snippets:
        snip.speedup, snip.how, snip.low, snip.high = gain, terms.how, terms.low, terms.high
        snip.baseline = baseline
        snip.proxy = f"load_file cold from a copy of {what} on {trial.where}, against {against}"
        snip.note = ""
    return rec, ""


def _aws_cp(address: str, dest: str) -> str:
    """The same copy with the AWS CLI (unverified), for an ``s3://`` model."""
    if not address.startswith("s3://"):
        return ""
    if address.endswith(".safetensors"):  # one object: into the folder, not a prefix
        return f"aws s3 cp {shlex.quote(address)} {shlex.quote(dest.rstrip('/') + '/')}"
    return f"aws s3 cp --recursive {shlex.quote(address)} {shlex.quote(dest)}"
