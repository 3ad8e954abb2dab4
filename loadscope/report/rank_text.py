"""The text of a ``bench --ranks`` report: the CLI's table and the Markdown for an issue.

Owns how a :class:`~loadscope.engine.rank_records.BroadcastReport` reads: one screen
for the CLI (:func:`to_text`: the summary, then what failed or was left out) and a
Markdown table with the failures and notes (:func:`to_markdown`).

May import: ``loadscope.engine.rank_records``, ``loadscope.engine.trials``,
``loadscope.base``.
"""

from __future__ import annotations

import textwrap

from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.rank_records import BroadcastReport
from loadscope.engine.trials import first_not_ok


def _secs(value: float | None) -> str:
    """At most six characters: "8.69ms", "1.23s", "123s"."""
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.3g}ms"
    return f"{value:.3g}s" if value < 100 else f"{value:.0f}s"


def _x(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}x"


def _rate(value: float | None) -> str:
    return "-" if not value else format_rate(value)


def _size(value: float | None) -> str:
    return "-" if value is None else format_bytes(value).replace(" ", "")


def _header_lines(report: BroadcastReport) -> tuple[str, str]:
    t, o = report.target, report.options
    return (
        f"{t['spec']} ({t['files']} file(s), {format_bytes(report.model_bytes)},"
        f" {report.tensors} tensors)",
        f"{o['ranks']} ({o['backend'] or '?'}, {o['device']}),"
        f" {o['repeats']} repeat(s){' after a warm-up round' if o['warmup'] else ''}",
    )


def _failed_lines(report: BroadcastReport) -> list[str]:
    """Why each mode and cache state has no result (the launch's own failures are listed apart)."""
    stopped = "; ".join(report.failures)
    lines = []
    for s in report.summary:
        if s.median_seconds is None:
            bad = first_not_ok(report.trials, lambda t: (t.mode, t.cache), (s.mode, s.cache))
            why = bad.reason if bad and bad.reason else "no trial with a verified cache state"
            if bad is not None and (why == stopped or why.startswith("not run:")):
                why = "the launch stopped early (see why)"
            lines.append(f"{s.mode} {s.cache}: {why}")
    return lines


def to_text(report: BroadcastReport) -> str:
    """One screen for the CLI: the summary table, then what failed or was left out."""
    target, ranks = _header_lines(report)
    lines = [f"target   {target}", f"ranks    {ranks}", ""]
    # 79 columns, each wider than its widest value: fits an 80-column terminal.
    header = (
        f"{'mode':<16}{'cache':<5}{'median':>7}{'rate':>10}{'x ind':>6}"
        f"{'amp':>6}{'stor':>6}{'held':>8}{'RSS':>8}{'first':>7}"
    )
    lines += [header, "-" * len(header)]
    for s in report.summary:
        if s.median_seconds is None:
            lines.append(f"{s.mode:<16}{s.cache:<5}failed (below)")
            continue
        lines.append(
            f"{s.mode:<16}{s.cache:<5}{_secs(s.median_seconds):>7}"
            f"{_rate(s.median_bytes_per_s):>10}{_x(s.speedup_vs_independent):>6}"
            f"{_x(s.read_amplification, 1):>6}{_x(s.storage_amplification, 1):>6}"
            f"{_size(s.rss_delta_bytes_total):>8}{_size(s.peak_rss_bytes_total):>8}"
            f"{_secs(s.first_run_seconds):>7}"
        )
    lines.append(
        textwrap.fill(
            "median: the slowest rank's time (the load ends when the last rank has every"
            " tensor); rate: model bytes / that time; x ind: speed-up over independent reads"
            " in the same cache state; amp: bytes the ranks read / model bytes; stor:"
            " bytes that reached storage (/proc/<pid>/io) / model bytes; held: RSS the ranks"
            " gained (the copies of the model in RAM); RSS: peak RSS summed over ranks;"
            " first: the warm-up round.",
            80,
        )
    )
    failed = _failed_lines(report)
    if failed:
        lines += ["", "failed:"] + [f"  {line}"[:240] for line in failed]
    if report.failures:
        early = any(t.status != "ok" and not t.ranks for t in report.trials)
        title = "the launch stopped early:" if early else "the ranks reported problems:"
        lines += ["", title] + [f"  {f}"[:240] for f in report.failures]
    if report.skipped:
        lines += ["", "skipped:"] + [f"  {k}: {v}" for k, v in report.skipped.items()]
    unverified = [t for t in report.trials if t.status == "ok" and not t.cache_verified]
    if unverified:
        lines.append(
            f"{len(unverified)} trial(s) kept out of the medians: cache state not verified"
            f" (first: #{unverified[0].id} {unverified[0].cache_note})"
        )
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def to_markdown(report: BroadcastReport) -> str:
    """The summary as a Markdown table (for an issue), with failures and notes."""
    lines = [
        "## Multi-rank loading",
        "",
        "target: {}; ranks: {}".format(*_header_lines(report)),
        "",
        "| mode | cache | trials | median (slowest rank) | GB/s | vs independent"
        " | read amplification | storage amplification | RSS gained (sum) | peak RSS (sum)"
        " | first run |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in report.summary:
        gbps = "-" if not s.median_bytes_per_s else f"{s.median_bytes_per_s / 1e9:.3g}"
        lines.append(
            f"| {s.mode} | {s.cache} | {s.trials} | {_secs(s.median_seconds)} | {gbps}"
            f" | {_x(s.speedup_vs_independent)} | {_x(s.read_amplification)}"
            f" | {_x(s.storage_amplification)} | {_size(s.rss_delta_bytes_total)}"
            f" | {_size(s.peak_rss_bytes_total)}"
            f" | {_secs(s.first_run_seconds)} |"
        )
    failed = _failed_lines(report) + report.failures
    if failed:
        lines += ["", "**Failed:**", ""] + [f"- {f}" for f in failed]
    if report.skipped:
        lines += ["", "**Skipped:**", ""] + [f"- {k}: {v}" for k, v in report.skipped.items()]
    if report.notes:
        lines += [""] + [f"_{n}_" for n in report.notes]
    return "\n".join(lines) + "\n"
