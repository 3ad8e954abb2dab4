"""The bucket behind a FUSE mount read directly (``doctor MNT/model --bucket s3://...``).

A bucket mounted through FUSE (mountpoint-s3, gcsfuse, s3fs, rclone) serves each read of
the mount as a request the daemon makes; where the user can reach the same bucket with
credentials, loadscope's own reader (``loadscope.load_model("s3://...")``: many ranged GETs
in flight) and Run:ai's streamer (``--load-format runai_streamer`` in vLLM and SGLang) read
it without the daemon. This trial times them on the bucket the user names, after the
mount's own trials, and puts the ratio against the mount's default load (``load_file``
through the mount, cold) on a fix; where they gain less than :data:`WORTH_IT` a note says
what was measured.

The bucket must hold the model the path holds: the same weight files by name and size,
else one line says so and nothing is timed. A store that does not answer, refuses the
credentials or holds no such prefix is one line too (the source's own error).

May import: ``loadscope.advice``, ``loadscope.engine``, ``loadscope.model``,
``loadscope.loaders.strategies``, ``loadscope.probes`` (the sources), ``loadscope.base``,
:mod:`~loadscope.diagnosis.trial_costs`.
"""

from __future__ import annotations

import os
import shlex
import threading
import time
from dataclasses import dataclass, field

from loadscope.advice.facts import Facts, ratio_terms
from loadscope.advice.objstore_rules import BASELINE, COMPATIBLE_ENV, OWN, load_model_code
from loadscope.advice.results import Advice, Evidence, Recommendation
from loadscope.advice.snippets import Snippet
from loadscope.base import fix_ids
from loadscope.base.errors import LoadscopeError
from loadscope.base.units import format_bytes, format_speedup
from loadscope.diagnosis.trial_costs import SERVER_START_S, TRIAL_OVERHEAD_S
from loadscope.engine.bench import BenchCancelled, BenchOptions, BenchReport, Summary, run_bench
from loadscope.loaders.strategies import DEFAULT, STRATEGIES
from loadscope.model.targets import Target, resolve
from loadscope.probes.objclient import OBJECT_STORES

#: What makes reading the bucket directly worth printing as a fix.
WORTH_IT = 1.2
#: The most of the budget kept from the mount's trials for this one.
RESERVE_SHARE = 0.25
#: Whole loads of each route (the store has no page cache here to evict: each is cold).
REPEATS = 2
#: The routes timed on the bucket: loadscope's reader, then Run:ai's at its defaults.
ROUTES = (OWN, BASELINE)


@dataclass(slots=True)
class BucketTrial:
    """What was timed on the bucket (each route's summary), or why not (``reason``)."""

    address: str
    summaries: dict[str, Summary] = field(default_factory=dict)
    reason: str = ""


def reserve_s(target: Target, mount_bytes_per_s: float, budget_s: float) -> float:
    """The seconds kept for the trial: each route's fork server start and its whole loads
    at the mount's best measured rate (the bucket read directly is no slower, or the fix
    does not stand), at most :data:`RESERVE_SHARE` of ``budget_s``."""
    load = target.total_bytes / max(1e6, mount_bytes_per_s)
    need = len(ROUTES) * (SERVER_START_S + REPEATS * (TRIAL_OVERHEAD_S + load))
    return min(RESERVE_SHARE * budget_s, need)


def same_model(target: Target, bucket: Target) -> str | None:
    """Why ``bucket`` does not hold the model at ``target`` (None: the same weight files,
    by name and size)."""
    here = {w.path.name: w.size_bytes for w in target.files}
    there = {w.path.name: w.size_bytes for w in bucket.files}
    if here == there:
        return None
    missing = sorted(set(here) - set(there))
    if missing:
        return f"it has no {missing[0]}" + (
            f" (and {len(missing) - 1} more)" if missing[1:] else ""
        )
    other = sorted(n for n in here if there.get(n) != here[n]) or sorted(set(there) - set(here))
    return f"its {other[0]} differs from the one here"


def measure_bucket(
    target: Target,
    address: str,
    facts: Facts,
    advice: Advice,
    deadline: float,
    cancel: threading.Event | None = None,
) -> BucketTrial:
    """Time :data:`ROUTES` on the bucket at ``address`` and add the fix (or a note) to
    ``advice``; the trial, with why it did not run (``reason``), either way."""
    trial = BucketTrial(address)
    mount_s = facts.seconds(DEFAULT)
    if not mount_s:
        trial.reason = f"no cold {DEFAULT} through the mount to compare with"
        return trial
    try:
        bucket = resolve(address)
    except LoadscopeError as exc:
        trial.reason = str(exc)
        return trial
    if bucket.source not in OBJECT_STORES:
        trial.reason = "not a bucket's address (s3://, gs:// or az://)"
        return trial
    if (why := same_model(target, bucket)) is not None:
        trial.reason = f"not the model at {target.spec}: {why}"
        return trial
    try:
        report = _timed(bucket, deadline, cancel)
    except BenchCancelled:
        raise
    except LoadscopeError as exc:
        trial.reason = f"the trials failed: {exc}"
        return trial
    trial.summaries = {
        s.strategy: s for s in report.summary if s.cache == "cold" and s.median_seconds
    }
    if OWN not in trial.summaries:
        failed = next((t.reason for t in report.trials if t.reason), "no trial completed")
        trial.reason = f"loadscope.load_model did not complete on the bucket: {failed}"
        return trial
    rec, note = _fix(target, trial, facts)
    if note:
        advice.notes.append(note)
    if rec is not None:
        advice.recommendations.append(rec)
        if advice.verdict.status == "healthy":  # a fix the trials found after all
            advice.verdict.status = "problem"
    return trial


def _timed(bucket: Target, deadline: float, cancel: threading.Event | None) -> BenchReport:
    """:data:`ROUTES` (those installed) on the bucket, whole, interleaved."""
    routes = tuple(n for n in ROUTES if STRATEGIES[n].unavailable() is None)
    return run_bench(
        bucket,
        BenchOptions(
            strategies=routes,
            repeats=REPEATS,
            warmup=False,
            deadline=deadline,
            trial_timeout_s=max(10.0, deadline - time.monotonic()),
            cancel=cancel,
        ),
    )


def _fix(target: Target, trial: BucketTrial, f: Facts) -> tuple[Recommendation | None, str]:
    """The fix with loadscope's reader's ratio over the mount's default load, or None and
    what was measured where it gains under :data:`WORTH_IT`."""
    base = f.cold[DEFAULT]
    mount_s = float(f.seconds(DEFAULT) or 0.0)
    own = trial.summaries[OWN]
    own_s = float(own.median_seconds or 0.0)
    gain = mount_s / own_s
    terms = ratio_terms(gain, base, own)
    if gain < WORTH_IT:
        return None, (
            f"reading the bucket directly ({trial.address}): loadscope.load_model loads the"
            f" {format_bytes(target.total_bytes)} in {own_s:.3g} s against {mount_s:.3g} s"
            f" with {DEFAULT} through the mount ({format_speedup(gain)}, {terms.how}):"
            f" under {WORTH_IT}x, no fix"
        )
    snippets = [
        Snippet(
            "safetensors",
            load_model_code(trial.address),
            OWN,
            "code change",
            "loadscope.load_model on the bucket",
            gain,
            how=terms.how,
            low=terms.low,
            high=terms.high,
        ),
        *_server_snippets(trial, f, mount_s),
    ]
    evidence = [
        Evidence(f"{DEFAULT} cold through the mount", mount_s, "s"),
        Evidence(f"loadscope.load_model on {trial.address}, {own.trials} runs", own_s, "s"),
    ]
    if (runai := trial.summaries.get(BASELINE)) is not None:
        evidence.append(
            Evidence("Run:ai streamer on the bucket, at its defaults", runai.median_seconds, "s")
        )
    rec = Recommendation(
        fix_ids.READ_BUCKET_DIRECTLY,
        "Read the bucket directly, not through the mount",
        f"read {trial.address} with many ranged GETs in flight instead of through the FUSE"
        f" mount: measured here, loadscope.load_model on the bucket loads the"
        f" {format_bytes(target.total_bytes)} {format_speedup(gain)} faster than {DEFAULT}"
        f" through the mount ({terms.how})",
        strategy=OWN,
        route="loadscope.load_model (s3)",
        expected_speedup=gain,
        evidence=evidence,
        risk="needs credentials for the bucket where the model loads (the mount's daemon"
        " holds them today)",
        confidence="high" if not terms.unsteady and terms.error <= 0.1 else "medium",
        how=terms.how,
        snippets=snippets,
    )
    return rec, ""


def _server_snippets(trial: BucketTrial, f: Facts, mount_s: float) -> list[Snippet]:
    """vLLM's and SGLang's streamer on the bucket, with Run:ai's number where it ran."""
    runai = trial.summaries.get(BASELINE)
    where = shlex.quote(trial.address)
    flag = "--load-format runai_streamer"
    # An S3-compatible store (AWS_ENDPOINT_URL) needs the settings its trial ran with.
    env = f"{COMPATIBLE_ENV} " if os.environ.get("AWS_ENDPOINT_URL") else ""
    lines = [
        ("vllm", f"{env}vllm serve {where} {flag}"),
        ("sglang", f"{env}python -m sglang.launch_server --model-path {where} {flag}"),
    ]
    if runai is None or not runai.median_seconds:
        missing = STRATEGIES[BASELINE].unavailable()
        why = f"not measured here: {missing or 'its trial on the bucket did not complete'}"
        return [
            Snippet(s, code, BASELINE, "a flag", "Run:ai's streamer", note=why) for s, code in lines
        ]
    gain = mount_s / runai.median_seconds
    terms = ratio_terms(gain, f.cold[DEFAULT], runai)
    return [
        Snippet(
            stack,
            code,
            BASELINE,
            "a flag",
            "Run:ai's streamer on the bucket",
            gain,
            how=terms.how,
            low=terms.low,
            high=terms.high,
            proxy="timed: runai-model-streamer stream_files at its defaults, as this flag runs it",
        )
        for stack, code in lines
    ]
