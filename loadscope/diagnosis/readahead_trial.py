"""The readahead fix tried on the mount: the default load, and ``from_pretrained`` where
this run timed it, rerun cold with the mount's readahead raised, then put back.

The recommendation then carries the measured gain with its range (its trials are a run
of their own, cited as that run's), each mmap stack's route the default load's figure,
and the transformers route ``from_pretrained``'s own (against it as it is) or "not
measured here" with why. Writes sysfs (root), for this mount only, and always restores;
where it may not write, the fix says "estimated, not measured" and why.

May import: ``loadscope.advice``, ``loadscope.actions``, ``loadscope.engine``,
``loadscope.model``, ``loadscope.probes``, ``loadscope.loaders.strategies``, ``loadscope.base``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from loadscope.actions.hostsettings import changed, mount_key
from loadscope.advice.facts import ratio_terms
from loadscope.advice.rules import Advice, Evidence, Recommendation, rank_key
from loadscope.advice.storage_rules import READAHEAD_ROUTE
from loadscope.base import fix_ids
from loadscope.engine.bench import BenchError, BenchOptions, BenchReport, Summary, run_bench
from loadscope.engine.probing import ProbeReport
from loadscope.engine.summaries import shaky
from loadscope.loaders.strategies import DEFAULT, HF_DEFAULT
from loadscope.model.targets import Target

#: The transformers user's own load, rerun with the readahead raised where it ran.
HF_BASELINE = HF_DEFAULT


def device_of(target: Target) -> tuple[int, int]:
    """The device number of the mount holding the model's first file."""
    where = target.files[0].path if target.files else target.root
    dev = os.stat(where).st_dev
    return os.major(dev), os.minor(dev)


def readahead_allowed(probe: ProbeReport, try_readahead: bool | None) -> bool:
    """Whether the readahead check runs: asked (``--try-readahead``), or by default where
    this process may write the mount's read_ahead_kb."""
    bdi = probe.primary.storage.bdi.data
    knob = Path(bdi.path) / "read_ahead_kb" if bdi else None
    allowed = knob is not None and os.access(knob, os.W_OK)
    return bool(try_readahead or (try_readahead is None and allowed))


def readahead_evidence(
    target: Target,
    probe: ProbeReport,
    bench: BenchReport | None,
    advice: Advice,
    sample: int | None,
    try_readahead: bool | None,
    failures: list[str],
    deadline: float | None = None,
) -> None:
    """The readahead recommendation measured here (by default where this process may write
    the mount's setting), or marked "estimated, not measured" with why; its loads are
    stopped at ``deadline`` (``time.monotonic()``; None: none)."""
    rec = next((r for r in advice.recommendations if r.id == fix_ids.RAISE_READAHEAD), None)
    if rec is None or bench is None:
        return
    if readahead_allowed(probe, try_readahead):
        verify_readahead(target, probe, bench, rec, sample, failures, deadline)
    else:
        why = (
            "--no-try-readahead"
            if try_readahead is False
            else "needs root to write the mount's read_ahead_kb"
        )
        rec.evidence.append(Evidence("estimated, not measured", why))
        for snip in rec.snippets:
            if snip.strategy == READAHEAD_ROUTE:
                snip.note = f"estimated, not measured: {why}"
    advice.recommendations.sort(key=rank_key)


TRY_READAHEAD_KB = 8192
TRY_MAX_BACKGROUND = 64
#: The readahead trial loads whole when two whole loads take at most this (its estimate).
WHOLE_READAHEAD_S = 20.0


def verify_readahead(
    target: Target,
    probe: ProbeReport,
    bench: BenchReport,
    rec: Recommendation,
    sample: int | None,
    failures: list[str],
    deadline: float | None = None,
) -> None:
    """Re-run the mmap trial with the mount's readahead raised, then put it back; stopped
    at ``deadline``, where a load cut there after longer than the default's whole load
    says "no faster" with its bound (on a bucket through FUSE, 2 loads ran 100 s past a
    60 s budget, each slower than the default).

    The recommendation then carries the measured gain instead of the FUSE figure
    from elsewhere. Writes sysfs (root), for this mount only, and always restores.
    """
    storage = probe.primary.storage
    bdi = storage.bdi.data
    before = _cold(bench, DEFAULT)
    if bdi is None or before is None or not before.median_seconds:
        failures.append("readahead check: no bdi or no cold mmap trial to compare with")
        return
    knobs = _knobs(probe, Path(bdi.path))
    try:
        with changed(mount_key(device_of(target)), [(p, str(v)) for p, v in knobs]):
            limits: dict[str, Any] = {"deadline": deadline} if deadline is not None else {}
            after = run_bench(
                target,
                BenchOptions(
                    strategies=(DEFAULT,), repeats=2, warmup=False, sample_bytes=sample, **limits
                ),
            )
            if _cut_slower(rec, before, after, failures):
                return
            # A large readahead streams whole files: a sample of small ranges does not let
            # it (at 1 GiB a sampled estimate said 5.4x where whole loads gave 10.1x).
            # Where the estimate says two whole loads are cheap, they are measured.
            est = _cold(after, DEFAULT)
            whole_s = est.extrapolated_median_seconds if est is not None else None
            if sample is not None and whole_s is not None and 2 * whole_s <= WHOLE_READAHEAD_S:
                after = run_bench(
                    target,
                    BenchOptions(strategies=(DEFAULT,), repeats=2, warmup=False, **limits),
                )
            raised = _cold(after, DEFAULT)
            hf_after = None
            if raised is not None and raised.median_seconds:
                speedup = _whole_s(before) / max(_whole_s(raised), 1e-9)
                hf_after = _from_pretrained_raised(target, bench, speedup, failures, limits)
    except (OSError, BenchError) as exc:
        failures.append(f"readahead check: {exc}")
        rec.evidence.append(Evidence("not verified", f"could not set readahead: {exc}"))
        return
    summary = raised
    if summary is None or not summary.median_seconds:
        cut = _cut_after(after)
        said = (
            f"its load was stopped at the budget after {max(cut):.3g} s, before the"
            f" {_whole_s(before):.3g} s the default load took (a larger --budget measures it)"
            if cut
            else "the budget was spent before its load (a larger --budget measures it)"
            if any(t.status == "skipped" for t in after.trials)
            else "the mmap trial with raised readahead failed"
        )
        failures.append(f"readahead check: not measured: {said}")
        rec.evidence.append(Evidence("readahead check", f"not measured: {said}"))
        return
    total = target.total_bytes
    if why := shaky(summary, {}, total) or shaky(before, {}, total):
        note = f"not measured reliably here ({why})"
        rec.evidence.append(Evidence("readahead check", note))
        for snip in rec.snippets:
            if snip.strategy == READAHEAD_ROUTE:
                snip.note = note
        return
    _credit_readahead(rec, before, summary, [t.id for t in after.trials if t.status == "ok"])
    _credit_transformers(rec, bench, hf_after)


def _knobs(probe: ProbeReport, bdi: Path) -> list[tuple[Path, int]]:
    """The settings the check raises: the readahead, and a FUSE mount's requests in flight."""
    from loadscope.probes.blockdev import fuse_connection_id

    knobs = [(bdi / "read_ahead_kb", TRY_READAHEAD_KB)]
    mount = probe.primary.storage.mount.data
    if mount is not None and mount.fstype.startswith("fuse") and mount.device:
        major, minor = (int(x) for x in mount.device.split(":"))
        conn = Path("/sys/fs/fuse/connections") / str(fuse_connection_id(major, minor))
        knobs.append((conn / "max_background", TRY_MAX_BACKGROUND))
    return knobs


def _cut_after(after: BenchReport) -> list[float]:
    """The seconds each load of ``after`` ran before the deadline stopped it (cut while its
    bytes came, or quiet by then: a page fault on a slow mount reports no progress)."""
    return [
        t.wall_s
        for t in after.trials
        if t.status != "ok"
        and t.wall_s
        and ("stopped after" in (t.reason or "") or "timed out after" in (t.reason or ""))
    ]


def _cut_slower(
    rec: Recommendation, before: Summary, after: BenchReport, failures: list[str]
) -> bool:
    """Where every load with the readahead raised was stopped at the deadline after longer
    than the default's whole load took: the fix is no faster here, its number the bound
    (the default's time over the longest cut load's); True when so."""
    raised = _cold(after, DEFAULT)
    cut = _cut_after(after)
    old_s = _whole_s(before)
    if (raised is not None and raised.median_seconds) or not cut or max(cut) < old_s:
        return False
    longest = max(cut)
    rec.expected_speedup = old_s / longest
    rec.measured, rec.confidence = True, "medium"
    rec.how = f"at most: its load was stopped at the budget after {longest:.3g} s"
    said = (
        f"mmap cold with read_ahead_kb={TRY_READAHEAD_KB} was stopped at the budget after"
        f" {longest:.3g} s, longer than the {old_s:.3g} s of the default load: no faster"
        f" here (at most {rec.expected_speedup:.2f}x)"
    )
    rec.evidence.append(Evidence("readahead check", said))
    rec.action += f"; measured here: {said}"
    for snip in rec.snippets:
        if snip.strategy == READAHEAD_ROUTE:
            snip.speedup, snip.how, snip.note = rec.expected_speedup, rec.how, ""
            snip.low, snip.high = None, rec.expected_speedup
    failures.append(f"readahead check: {said}")
    return True


def _from_pretrained_raised(
    target: Target,
    bench: BenchReport,
    speedup: float,
    failures: list[str],
    limits: dict[str, Any] | None = None,
) -> BenchReport | None:
    """``from_pretrained`` itself (weights touched, the model's code counted) rerun cold
    with the readahead raised, where this run timed it as it is and a whole load of it
    is cheap: its time as is over ``speedup`` (what the raised readahead gave load_file
    here); None otherwise. (Capped at its time as is, 14 s for 1 GiB on the emulated
    disk, it was never rerun there, where it took 2.6 s.)"""
    hf = _cold(bench, HF_BASELINE)
    if hf is None or not hf.median_seconds:
        return None
    if hf.median_seconds / max(1.0, speedup) > WHOLE_READAHEAD_S / 2:
        return None
    try:
        return run_bench(
            target,
            BenchOptions(strategies=(HF_BASELINE,), repeats=1, warmup=False, **(limits or {})),
        )
    except BenchError as exc:
        failures.append(f"readahead check: from_pretrained: {exc}")
        return None


def _whole_s(s: Summary) -> float:
    """A summary's whole-model seconds (its extrapolation where it was sampled)."""
    return s.extrapolated_median_seconds or s.median_seconds or 0.0


def _cold(report: BenchReport | None, strategy: str) -> Summary | None:
    found = report.summary if report is not None else []
    return next((s for s in found if s.strategy == strategy and s.cache == "cold"), None)


def _credit_transformers(
    rec: Recommendation, bench: BenchReport, hf_after: BenchReport | None
) -> None:
    """The transformers readahead route's own number: ``from_pretrained`` cold with the
    readahead raised against it as it is, or "not measured here" with why (the
    ``load_file`` figure is no transformers user's, whose load builds the model)."""
    before, after = _cold(bench, HF_BASELINE), _cold(hf_after, HF_BASELINE)
    for snip in rec.snippets:
        if snip.stack != "transformers" or snip.strategy != READAHEAD_ROUTE:
            continue
        if before is None or after is None or not before.median_seconds or not after.median_seconds:
            why = (
                "from_pretrained's own trial did not run here"
                if before is None or not before.median_seconds
                else "from_pretrained with the readahead raised did not complete"
            )
            snip.speedup, snip.low, snip.high = None, None, None
            snip.note, snip.how, snip.proxy = f"not measured here: {why}", "measured", ""
            continue
        gain = before.median_seconds / after.median_seconds
        terms = ratio_terms(gain, before, after)
        ok = [t.id for t in hf_after.trials if t.status == "ok"] if hf_after else []
        snip.speedup, snip.how, snip.low, snip.high = gain, terms.how, terms.low, terms.high
        snip.baseline, snip.note = HF_BASELINE, ""
        snip.proxy = f"from_pretrained with read_ahead_kb={TRY_READAHEAD_KB}: {_own_run(ok)}"


def _own_run(ids: list[int]) -> str:
    """ "its own run's trials #1, #2" (or "trial #1"): numbered in a run of their own."""
    return f"its own run's trial{'s' if len(ids) > 1 else ''} #{', #'.join(map(str, ids))}"


def _credit_readahead(rec: Recommendation, before: Summary, after: Summary, ok: list[int]) -> None:
    """The readahead fix's number from mmap cold ``before`` and ``after`` (this run's, and
    the rerun's with the readahead raised), with its range and how far it holds."""
    old_s = _whole_s(before)
    new_s = _whole_s(after) or 1.0
    rec.expected_speedup = old_s / new_s
    terms = ratio_terms(rec.expected_speedup, before, after)
    rec.confidence = "high" if not terms.unsteady and terms.error <= 0.1 else "medium"
    rec.measured = True
    rec.how = terms.how
    # Its trials are numbered in a run of their own: cited as that run's, never as
    # this run's trials of the same numbers.
    own_run = f"mmap with read_ahead_kb={TRY_READAHEAD_KB}: {_own_run(ok)}"
    rec.evidence.append(
        Evidence(
            f"mmap cold with read_ahead_kb={TRY_READAHEAD_KB} (restored afterwards;"
            f" a run of its own, trials {', '.join(map(str, ok))})",
            new_s,
            "s",
        )
    )
    rec.action += f"; measured here: mmap {old_s:.3g} s -> {new_s:.3g} s ({old_s / new_s:.1f}x)"
    for snip in rec.snippets:
        if snip.strategy == READAHEAD_ROUTE:
            snip.speedup, snip.how, snip.proxy = rec.expected_speedup, terms.how, own_run
            snip.note = ""
            snip.low, snip.high = terms.low, terms.high
