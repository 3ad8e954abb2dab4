"""fio as a core probe (``fio``, with ``--fio``): the jobs that reproduce the cold
latency and throughput just measured, run after them on the largest file, and how every
output shows fio's figures beside the probe's (or the jobs' command lines to run them).

Owns :func:`jobs_from` (the jobs, from the latency's and throughput's results), the
probe's run and its declaration; the jobs and their command lines are
:mod:`loadscope.probes.fio`'s.
May import: ``loadscope.probes.fio``, ``loadscope.probes.iobench``,
``loadscope.probes.result``, ``loadscope.probes.spec``, ``loadscope.base``.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from loadscope.base.units import format_rate, format_us
from loadscope.probes import fio
from loadscope.probes.iobench import LatencyResult, ThroughputResult
from loadscope.probes.result import ProbeResult, Unavailable
from loadscope.probes.spec import (
    Commands,
    ProbeContext,
    ProbeSpec,
    Shown,
    block_of,
    blocks_of,
    ok,
    status_text,
)


def jobs_from(
    path: str,
    size: int,
    direct: bool,
    throughput: ProbeResult[ThroughputResult],
    latency: ProbeResult[LatencyResult],
) -> list[fio.FioJob]:
    """The fio jobs that reproduce what was measured on ``path`` (none when throughput
    was not)."""
    if throughput.data is None or not throughput.data.sequential:
        return []
    thr = throughput.data
    best = max(thr.parallel or thr.sequential, key=lambda p: p.bytes_per_s)
    return fio.jobs_for(
        path,
        size,
        direct=direct,
        seq_blocks=[p.block_bytes for p in thr.sequential],
        readers=best.readers,
        par_block=best.block_bytes,
        latency_samples=latency.data.samples if latency.data else 256,
    )


def _run(ctx: ProbeContext) -> list[fio.FioMeasure]:
    """The jobs ``ctx.earlier["fio_jobs"]`` (see :func:`jobs_from`), each on its own: one
    that fails does not take the others' figures with it (its reason goes to the notes)."""
    if why := fio.unavailable_reason():
        raise Unavailable(why)
    reads = ctx.reads
    if reads is not None and reads.stalled:
        raise Unavailable(f"not run: {reads.stalled[0]}")
    jobs: list[fio.FioJob] = list(ctx.earlier.get("fio_jobs") or [])
    if not jobs:
        raise Unavailable("the probe's own throughput was not measured: nothing to set beside")
    measured, failed = [], []
    for job in jobs:
        try:
            measured.append(fio.run_job(job))
        except Unavailable as exc:
            failed.append(str(exc))
    if not measured:
        raise Unavailable("; ".join(failed))
    if reads is not None:
        reads.notes.extend(failed)
    return measured


def probe_value(
    job: fio.FioJob,
    latency: ProbeResult[LatencyResult],
    throughput: ProbeResult[ThroughputResult],
) -> float | None:
    """The probe's own figure ``job`` stands beside."""
    if job.measures == "latency":
        return latency.data.p50_us if latency.data else None
    thr = throughput.data
    if thr is None:
        return None
    if job.measures == "sequential":
        same = [p for p in thr.sequential if p.block_bytes == job.block_bytes]
        return same[0].bytes_per_s if same else None
    best = max(thr.parallel, key=lambda p: p.bytes_per_s, default=None)
    return best.bytes_per_s if best else None


def fio_block(
    result: ProbeResult[list[fio.FioMeasure]],
    jobs: list[fio.FioJob],
    latency: ProbeResult[LatencyResult],
    throughput: ProbeResult[ThroughputResult],
) -> dict[str, Any]:
    """fio's block in the probe report's JSON: its status, and every job (run or not)
    with its command line, the probe's figure, fio's and their ratio."""
    measured = {m.job: m for m in result.data or []}
    out = []
    for job in jobs:
        mine = probe_value(job, latency, throughput)
        got = measured.get(job)
        out.append(
            {
                "measures": job.measures,
                "label": job.label,
                **({"block_bytes": job.block_bytes} if job.block_bytes else {}),
                "metric": job.metric,
                "command": fio.command_line(job),
                "probe": mine,
                "fio": got.value if got else None,
                "fio_over_probe": got.value / mine if got and mine else None,
                "detail": got.detail if got else None,
            }
        )
    return {"status": result.status.value, "reason": result.reason, "jobs": out}


def fio_shown(block: Mapping[str, Any]) -> Shown:
    """fio's figures beside the probe's (with --fio), else how to reproduce with fio."""
    jobs = blocks_of(block.get("jobs"))
    if not jobs:
        return []
    if not ok(block):
        rows: Shown = [] if block.get("status") == "skipped" else [("fio", status_text(block))]
        hint = (
            "loadscope probe --fio runs the fio jobs that reproduce these numbers"
            " (their command lines: fio.jobs[].command in --json)"
        )
        return [*rows, ("fio", hint)]
    shown: Shown = []
    for job in jobs:
        if job.get("fio") is None:
            continue
        if job.get("metric") == "p50_us":
            mine = format_us(job["probe"]) if job.get("probe") else "-"
            text = f"{job.get('label')}: p50 {format_us(job['fio'])} (probe {mine})"
        else:
            mine = format_rate(job["probe"]) if job.get("probe") else "-"
            text = f"{job.get('label')}: {format_rate(job['fio'])} (probe {mine})"
        ratio = job.get("fio_over_probe")
        shown.append(("fio", text + (f", fio/probe {ratio:.2f}x" if ratio else "")))
    shown.append(("fio", "the jobs (read-only):"))
    commands = "\n".join(line for job in jobs for line in _shell_lines(str(job.get("command"))))
    return [*shown, Commands(commands)]


def job_said(job: Mapping[str, Any]) -> str:
    """One fio job of the report's JSON in words: what it reproduces, the probe's figure
    and fio's ("cold 4 KiB random reads (probe p50 210 us, fio p50 190 us)")."""
    mine, theirs = job.get("probe"), job.get("fio")
    if job.get("metric") == "p50_us":
        said = f"probe p50 {format_us(mine)}" if mine else "probe: not measured"
        said += f", fio p50 {format_us(theirs)}" if theirs else ""
    else:
        said = f"probe {format_rate(mine)}" if mine else "probe: not measured"
        said += f", fio {format_rate(theirs)}" if theirs else ""
    return f"{job.get('label') or job.get('measures')} ({said})"


def _shell_lines(command: str, width: int = 78) -> list[str]:
    """A long shell command as lines continued with a backslash, broken between words."""
    words = shlex.split(command)
    lines, line = [], ""
    for word in (shlex.quote(w) for w in words):
        if len(line) + 1 + len(word) > width - 2 and line.strip():
            lines.append(line + " \\")
            line = "  "
        line += (" " if line.strip() else "") + word
    return [*lines, line]


SPEC = ProbeSpec(
    "fio",
    "fio",
    fio.FioMeasure,
    _run,
    lambda _block: [],
    core=True,
    part="middle",
    shown=lambda doc: fio_shown(block_of(doc.get("fio"))),
)
