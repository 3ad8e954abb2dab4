"""``loadscope time``'s report as text (:func:`to_text`).

May import: :mod:`loadscope.diagnosis.timing`, ``loadscope.engine`` (the table's row
format), ``loadscope.report.bench_text``, ``loadscope.base``.
"""

from __future__ import annotations

import shlex
import statistics
import textwrap

from loadscope.base.units import format_bytes
from loadscope.diagnosis.timing import LABELS, TimeReport, Variant
from loadscope.engine.phases import answer


def to_text(report: TimeReport) -> str:
    """The table: each variant's median, its ratio to the command as it is, its runs."""
    base = report.baseline()
    head = shlex.join(report.argv)  # as it would be typed: quoting kept
    lines = _wrapped(f"loadscope time: {head}", "")
    lines += _wrapped(
        f"model: {len(report.files)} file(s), {format_bytes(report.total_bytes)};"
        f" {report.rounds} round(s), interleaved, {_cold_words(report)}",
        "  ",
    )
    if report.discovered:
        lines.append("  files found from the command's first run (evicted before the others):")
        lines += [f"    {f}" for f in report.discovered]
    failed = next((r for r in base.runs if r.status != "ok"), None)
    if failed is not None:
        lines.append(f"  {failed.reason or failed.status}")
        if failed.tail:
            lines.append("  its last lines:")
            lines += [f"    {line}" for line in failed.tail[-5:]]
        return "\n".join(lines)
    base_s = base.median()
    lazy = report.lazy()
    if lazy:
        share = report.read_share() or 0.0
        lines.append("")
        lines += _wrapped(
            f"your command read {format_bytes(int(share * report.total_bytes))} of the"
            f" model's {format_bytes(report.total_bytes)} ({share:.0%}): the rest of the"
            " weights were not read (a lazy load reads them at first use). Time a command"
            " that uses them (a forward pass), or end the timing at a line it prints with"
            " --until. No fix's gain is claimed from these runs.",
            "  ",
        )
    lines.append("")
    lines.append(f"  {'':<22} {'median':>9} {'vs as is':>9}  runs (s)")
    for v in report.variants:
        label = LABELS[v.name]
        bad = next((r for r in v.runs if r.status != "ok"), None)
        m = v.median()
        if v.skipped or bad is not None or m is None:
            why = v.skipped or (bad.reason if bad is not None else "no timed run")
            row = f"  {label:<22} {'-':>9} {'':>9}  {why}"
            lines += [row] if len(row) <= 80 else [row[:46].rstrip(), *_wrapped(why, "      ")]
            continue
        ratio = f"{base_s / m:.2f}x" if base_s and not lazy else "-"
        runs = " ".join(f"{t:.3g}" for t in v.times())
        extra = ""
        if v.before_s:
            extra = f"  (warm {statistics.median(v.before_s):.3g} s of it)"
        if not all(v.cold):
            extra += "  (not all runs verified cold)"
        lines.append(f"  {label:<22} {m:>7.3g} s {ratio:>9}  {runs}{extra}")
    lines += phase_lines(report)
    lines.append("")
    lines.append("  what the command read (as is, its median run):")
    lines += _wrapped(_read_line(report, base), "    ")
    changes = [v for v in report.variants[1:] if not v.skipped and v.changes]
    if changes:
        lines.append("  what each fix changes:")
        for v in changes:
            lines += _wrapped(f"{LABELS[v.name]}: {v.changes}", "    ")
    for n in report.notes:
        lines += _wrapped(f"note: {n}", "  ")
    return "\n".join(lines)


def phase_lines(report: TimeReport) -> list[str]:
    """``--profile``: the profiled cold run's wall time by phase, what a load fix can save
    at most, and the phase that dominates with what would help it (not measured here)."""
    table = report.phases
    if table is None:
        return []
    lines = [""]
    if table.reason:
        return lines + _wrapped(f"where the time goes: not profiled: {table.reason}", "  ")
    base_s = report.baseline().median()
    against = f", {table.wall_s / base_s:.2f}x the as-is median" if base_s else ""
    lines += _wrapped(
        f"where the time goes (one more cold run, sampled by py-spy {table.rate_hz} times a"
        f" second: {table.wall_s:.3g} s{against}):",
        "  ",
    )
    for p in table.phases:
        arrived = "" if p.arrived_bytes is None else f"  {format_bytes(p.arrived_bytes)} arrived"
        lines.append(f"    {p.name:<32} {p.seconds:>7.2f} s {p.share:>5.0%}{arrived}")
        if p.frames:
            lines += _wrapped(f"mostly in {', '.join(p.frames)}", "      ")
    for sentence in answer(table):
        lines += _wrapped(sentence, "  ")
    return lines


def _cold_words(report: TimeReport) -> str:
    """How cold the runs were: every one verified, or how many of them."""
    marks = [c for v in report.variants for c in v.cold]
    if all(marks):
        return "each run cold (evicted, verified)"
    return (
        f"each run evicted first, {sum(marks)} of {len(marks)} verified cold"
        " (the rows say which were not)"
    )


def _wrapped(text: str, indent: str) -> list[str]:
    """``text`` wrapped at 80 columns (paths are not broken)."""

    return textwrap.wrap(
        text,
        width=80,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def _read_line(report: TimeReport, v: Variant) -> str:
    runs = sorted((r for r in v.runs if r.seconds is not None), key=lambda r: r.seconds or 0)
    if not runs:
        return "nothing timed"
    r = runs[len(runs) // 2]
    parts = []
    if r.device.startswith("0:"):
        # The kernel counts a task's storage reads where it submits block I/O: FUSE, NFS
        # and other network filesystems are not counted (their servers read).
        parts.append("bytes from storage not counted by the kernel on this filesystem")
    elif r.storage_read_bytes is not None:
        ratio = r.storage_read_bytes / report.total_bytes if report.total_bytes else 0
        parts.append(f"{format_bytes(r.storage_read_bytes)} from storage ({ratio:.2f}x the model)")
    if r.read_call_bytes is not None:
        parts.append(f"{format_bytes(r.read_call_bytes)} by read calls")
    if r.major_faults is not None:
        parts.append(f"{r.major_faults:,} major faults")
    if r.resident_after is not None:
        parts.append(f"{r.resident_after:.0%} of the model in the page cache as it ended")
    if r.peak_rss_bytes:
        parts.append(f"peak RSS {format_bytes(r.peak_rss_bytes)} (largest process)")
    if r.device_requests:
        size = format_bytes(int(r.device_request_bytes or 0))
        parts.append(
            f"{r.device_requests:,} read requests of {size} on average on device {r.device}"
            " (device-wide)"
        )
    elif r.device and not r.device.startswith("0:"):
        parts.append(f"request sizes not shown by device {r.device}")
    return ", ".join(parts)
