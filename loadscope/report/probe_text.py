"""The probe's summary for a terminal (``loadscope.report.probe_text``): 80 columns, an
11-column gutter of labels; the JSON has everything.

Owns :func:`to_text`.
May import: :mod:`~loadscope.engine.probe_report`, ``loadscope.probes``, ``loadscope.base``.
"""

from __future__ import annotations

import shlex
import textwrap
from typing import Any

from loadscope.base.units import format_bytes, format_rate, format_us
from loadscope.engine.probe_report import FileProbe, ProbeReport
from loadscope.probes.iobench import (
    ThroughputResult,
)
from loadscope.probes.registry import block_lines
from loadscope.probes.result import ProbeResult, Status

# -- the human summary ------------------------------------------------------------------------


def latency_text(lat: dict[str, Any]) -> str:
    """The cold read latency probe's figures (its block in the report's JSON), as the
    terminal, the Markdown, the HTML and the app say them."""
    return (
        f"cold 4 KiB reads ({lat.get('method')}, {lat.get('samples')} samples):"
        f" p50 {format_us(lat['p50_us'])}, p90 {format_us(lat['p90_us'])},"
        f" p99 {format_us(lat['p99_us'])}"
    )


def _bar(value: float, biggest: float, width: int = 20) -> str:
    return "#" * (max(1, round(width * value / biggest)) if biggest > 0 and value > 0 else 0)


_WIDTH = 80
_LABEL = 11


def _wrap(label: str, text: str) -> str:
    """``label`` in an 11-column gutter, ``text`` wrapped to 80 columns beside it."""
    return textwrap.fill(
        text,
        width=_WIDTH,
        initial_indent=f"{label:<{_LABEL}}",
        subsequent_indent=" " * _LABEL,
        break_on_hyphens=False,
    )


def _status_line(name: str, result: ProbeResult[Any]) -> str:
    return _wrap(name, f"{result.status.value}: {result.reason}")


def _storage_lines(f: FileProbe) -> list[str]:
    m = f.storage.mount
    if m.data is None:
        return [_status_line("storage", m)]
    lines = [_wrap("storage", f"{m.data.storage_class}: {m.data.reason}")]
    if m.data.resolved_class:
        lines.append(
            _wrap("", f"under the overlay: {m.data.resolved_class} ({m.data.resolved_reason})")
        )
    lines.append(_wrap("", f"mount {m.data.mount_point} ({m.data.fstype}, {m.data.source})"))
    if f.storage.device.data is not None:
        for disk in f.storage.device.data.disks:
            bits = [disk.transport, disk.model or "no model string"]
            if disk.rotational:
                bits.append("rotational")
            if disk.scheduler:
                bits.append(f"scheduler {disk.scheduler}")
            if disk.max_sectors_kb:
                bits.append(f"max_sectors_kb {disk.max_sectors_kb}")
            lines.append(_wrap("", f"disk {disk.name}: {', '.join(bits)}"))
    bdi = f.storage.bdi.data
    if bdi is not None and bdi.read_ahead_kb is not None:
        lines.append(_wrap("", f"read_ahead_kb {bdi.read_ahead_kb} ({bdi.path})"))
    fuse = f.storage.fuse.data
    if fuse is not None:
        conn = f"max_background {fuse.max_background}, congestion {fuse.congestion_threshold}"
        lines.append(_wrap("", f"fuse connection: {conn}"))
    return lines


def _system_lines(report: ProbeReport) -> list[str]:
    sysr = report.system
    if sysr.data is None:
        return [_status_line("system", sysr)]
    s = sysr.data
    model = report.target["total_bytes"]
    limit = s.cgroup.limit_bytes if s.cgroup else None
    fits = "fits" if s.memory_headroom_bytes >= model else "does NOT fit"
    memory = (
        f"{format_bytes(s.ram_available_bytes)} available of {format_bytes(s.ram_total_bytes)};"
        f" cgroup limit {format_bytes(limit) if limit else 'none'};"
        f" model {format_bytes(model)} ({fits} in RAM)"
    )
    where = s.virtualization or "bare metal?"
    system = (
        f"{s.cpus_usable} CPUs ({s.cpu_model or '?'}), kernel {s.kernel},"
        f" {where}{', ' + s.container if s.container else ''}"
    )
    return [_wrap("memory", memory), _wrap("system", system)]


def _throughput_lines(thr: ProbeResult[ThroughputResult]) -> list[str]:
    if thr.data is None:
        return [_status_line("throughput", thr)]
    points = list(thr.data.sequential) + list(thr.data.parallel)
    if thr.data.into_ram is not None:
        points.append(thr.data.into_ram)  # the bars share one scale, this point's too
    biggest = max(p.bytes_per_s for p in points)
    lines = [f"{'throughput':<{_LABEL}}cold, {thr.data.method}; one reader, by request size:"]
    for p in thr.data.sequential:
        rate, bar = format_rate(p.bytes_per_s), _bar(p.bytes_per_s, biggest)
        kernel = f"  kernel {format_bytes(p.avg_request_bytes)}/req" if p.avg_request_bytes else ""
        lines.append(f"  {format_bytes(p.block_bytes):>10}   {rate:>10}  {bar:<20}{kernel}")
    if thr.data.parallel:
        lines.append(" " * _LABEL + "parallel readers, 1 MiB requests:")
    for p in thr.data.parallel:
        label = f"{p.readers} reader{'s' if p.readers > 1 else ''}"
        rate, bar = format_rate(p.bytes_per_s), _bar(p.bytes_per_s, biggest)
        lines.append(f"  {label:>10}   {rate:>10}  {bar}")
    if (ram := thr.data.into_ram) is not None:
        best = max(p.bytes_per_s for p in thr.data.parallel)
        share = f"  {ram.bytes_per_s / best:.2f}x" if best > 0 else ""
        landed = format_bytes(ram.bytes_read)
        lines.append(" " * _LABEL + f"into fresh RAM, where a loader lands it ({landed}):")
        label = f"{ram.readers} reader{'s' if ram.readers > 1 else ''}"
        rate, bar = format_rate(ram.bytes_per_s), _bar(ram.bytes_per_s, biggest)
        lines.append(f"  {label:>10}   {rate:>10}  {bar:<20}{share}")
    elif thr.data.parallel and thr.data.into_ram_reason:
        lines.append(_wrap("into RAM", thr.data.into_ram_reason))
    return lines


def to_text(report: ProbeReport) -> str:
    """A short summary that fits 80 columns; the JSON has everything."""
    t = report.target
    lines = [
        _wrap("target", f"{t['spec']} ({t['files']} file(s), {format_bytes(t['total_bytes'])})")
    ]
    seen: set[int] = set()
    for f in report.files:
        if id(f.storage) not in seen:
            seen.add(id(f.storage))
            lines += _storage_lines(f)
    lines += _system_lines(report)
    known = [
        fraction
        for f in report.files
        if f.residency.data is not None and (fraction := f.residency.data.fraction) is not None
    ]
    if known:
        mean = sum(known) / len(known)
        lines.append(
            _wrap("page cache", f"{mean:.0%} resident before probing ({len(known)} file(s))")
        )
    elif report.files:
        first = report.files[0].residency
        why = first.reason or (first.data.note if first.data else "")
        lines.append(_wrap("page cache", f"unknown: {why}"))
    lat = report.latency
    if lat.data is not None:
        lines.append(_wrap("latency", latency_text(lat.to_dict())))
    else:
        lines.append(_status_line("latency", lat))
    lines += _throughput_lines(report.throughput)
    lines += _fio_lines(report)
    doc = {key: r.to_dict() for key, r in report.registered.items()}
    for _spec, found in block_lines(doc):
        lines += [_wrap(label, text) for label, text in found]
    for note in report.notes:
        lines.append(_wrap("note", note))
    # In a doctor run the probes have a share of its budget: said as theirs.
    took = f"{report.elapsed_s:.1f} s of the probes' {report.budget_s:g} s budget"
    lines.append(_wrap("took", took))
    return "\n".join(lines)


def _fio_lines(report: ProbeReport) -> list[str]:
    """fio's figures beside the probe's (with --fio), else how to reproduce with fio."""
    if not report.fio_jobs:
        return []
    doc = report.fio_dict()
    lines = []
    if report.fio.status is not Status.OK:
        if report.fio.status is not Status.SKIPPED:
            lines.append(_status_line("fio", report.fio))
        lines.append(
            _wrap(
                "fio",
                "loadscope probe --fio runs the fio jobs that reproduce these numbers"
                " (their command lines: fio.jobs[].command in --json)",
            )
        )
        return lines
    for job in doc["jobs"]:
        if job["fio"] is None:
            continue
        if job["metric"] == "p50_us":
            mine = format_us(job["probe"]) if job["probe"] else "-"
            text = f"{job['label']}: p50 {format_us(job['fio'])} (probe {mine})"
        else:
            mine = format_rate(job["probe"]) if job["probe"] else "-"
            text = f"{job['label']}: {format_rate(job['fio'])} (probe {mine})"
        ratio = job["fio_over_probe"]
        lines.append(_wrap("fio", text + (f", fio/probe {ratio:.2f}x" if ratio else "")))
    lines.append(_wrap("fio", "the jobs (read-only):"))
    for job in doc["jobs"]:
        lines += _shell_lines(job["command"])
    return lines


def _shell_lines(command: str, width: int = 80) -> list[str]:
    """A long shell command as lines continued with a backslash, broken between words."""
    words = shlex.split(command)
    lines, line = [], " "
    for word in (shlex.quote(w) for w in words):
        if len(line) + 1 + len(word) > width - 2 and line.strip():
            lines.append(line + " \\")
            line = "    "
        line += " " + word
    return [*lines, line]
