"""The text of a ``bench`` report: the results table, the extrapolation, the formats line.

Owns how a :class:`~loadscope.engine.bench_records.BenchReport` reads on a terminal
(:func:`to_text`), what each strategy read in a sampled run and how its whole-model
time was made (:func:`extrapolation_lines`), and safetensors against torch.load from a
report's JSON (:func:`format_lines`, which the text, the Markdown and the HTML share).

May import: ``loadscope.engine.bench_records``, ``loadscope.engine.sampling``,
``loadscope.engine.trials``, ``loadscope.engine.summaries``,
``loadscope.loaders.strategies``, ``loadscope.base``.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence
from typing import Any

from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.bench_records import BenchReport, Summary
from loadscope.engine.sampling import error_text
from loadscope.engine.summaries import shaky
from loadscope.loaders.strategies import TORCH_MMAP, default_load, reads_torch


def _secs(value: float) -> str:
    return f"{value:.3g}s" if value < 100 else f"{value:.0f}s"


def _short(value: float | None) -> str:
    """Seconds in at most 7 characters: ``24.3s``, ``152ms``, ``0.7ms``, ``0s``."""
    if value is None:
        return "-"
    if value == 0:
        return "0s"
    if value < 1:
        return f"{value * 1e3:.3g}ms" if value >= 0.001 else f"{value * 1e3:.1f}ms"
    return _secs(value)


def _count(value: int | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000_000:
        return f"{value / 1e6:.0f}M"
    return f"{value / 1000:.0f}k" if value >= 10_000 else str(value)


def _size(value: float | None) -> str:
    if not value:
        return "-"
    return format_bytes(value).replace(" ", "")


#: The extrapolation table's columns (a sampled run's whole-model times).
EXTRAPOLATION_HEADER = ("strategy", "cache", "read", "time", "error", "fixed", "rate", "1st")
_EXTRAPOLATION_WIDTHS = (-16, -6, -14, 8, 7, 8, 10, 8)


def extrapolation_note(total_bytes: int) -> str:
    """What the extrapolation table's columns mean."""
    return (
        f"whole-model times ({format_bytes(total_bytes)}): fixed cost + bytes / rate,"
        " fitted to each strategy's trials at up to three sizes: what 'read' says, a"
        " quarter and a half of it (± one standard error of the line, which grows when"
        " the times are off a line; ±? where the trials cannot measure it); 'whole':"
        " loaded whole, measured, not extrapolated."
    )


def extrapolation_rows(bench: dict[str, Any]) -> list[tuple[str, ...]]:
    """What each strategy read in a sampled run and how its whole-model time was made,
    one row per strategy and cache state of a bench report's JSON."""
    rows: list[tuple[str, ...]] = []
    for s in (_summary(d) for d in bench.get("summary") or [] if isinstance(d, dict)):
        if s.median_seconds is None:
            continue
        read = (
            "whole"
            if s.scope in (None, "whole")
            else f"{'shards' if s.scope == 'shards' else 'sample'} {_size(s.measured_bytes)}"
        )
        head = _short(s.median_first_tensor_s)
        if s.extrapolated_median_seconds is None:
            rate = format_rate(s.median_bytes_per_s) if s.median_bytes_per_s else "-"
            rows.append((s.strategy, s.cache, read, _short(s.median_seconds), "-", "-", rate, head))
            continue
        rate = format_rate(s.fit_bytes_per_s) if s.fit_bytes_per_s else "-"
        rows.append(
            (
                s.strategy,
                s.cache,
                read,
                "~" + _short(s.extrapolated_median_seconds),
                error_text(s.error_estimate),
                _short(s.fixed_seconds),
                rate,
                head,
            )
        )
    return rows


def extrapolation_lines(report: BenchReport) -> list[str]:
    """What each strategy read in a sampled run and how its whole-model time was made."""
    smp = report.sample
    assert smp is not None

    def line(row: tuple[str, ...]) -> str:
        return "".join(
            f"{c:<{-w}}" if w < 0 else f"{c:>{w}}"
            for c, w in zip(row, _EXTRAPOLATION_WIDTHS, strict=True)
        )

    rows = extrapolation_rows(report.to_dict())
    note = textwrap.wrap(extrapolation_note(smp.total_bytes), 80)
    return [*note, line(EXTRAPOLATION_HEADER), *(line(r) for r in rows)]


def format_lines(bench: dict[str, Any]) -> list[str]:
    """Safetensors against torch.load on the same tensors, as seed 000 put it: "safetensors
    is 76.6x faster than torch.load on CPU here" (or the other way, as measured), from a
    bench report's JSON (the text, the Markdown and the HTML say the same)."""
    medians = {
        (s.get("strategy"), s.get("cache")): s.get("median_seconds")
        for s in bench.get("summary") or []
        if isinstance(s, dict)
    }
    options = bench.get("options") or {}
    gpu = str(options.get("device", "cpu")).startswith("cuda")
    device = "the GPU" if gpu else "CPU"
    # On the GPU: load_file(device="cuda") against torch.load(map_location="cuda").
    safetensors, torch_load = default_load(gpu), default_load(gpu, "torch")
    out = []
    for cache in ("cold", "warm"):
        st, pk = medians.get((safetensors, cache)), medians.get((torch_load, cache))
        if not isinstance(st, (int, float)) or not isinstance(pk, (int, float)) or not st or not pk:
            continue
        if pk >= st:
            text = f"safetensors is {pk / st:.1f}x faster than torch.load on {device} here"
        else:
            text = f"torch.load is {st / pk:.1f}x faster than safetensors on {device} here"
        mm = medians.get((TORCH_MMAP, cache))
        extra = f"; torch.load(mmap=True) {mm:.3g} s" if isinstance(mm, (int, float)) else ""
        # Both formats' trials: each checked against the reference tensors (the trial
        # that was the reference has no verdict of its own and is not counted).
        checked = [
            t.get("verified")
            for t in bench.get("trials") or []
            if isinstance(t, dict)
            and t.get("cache") == cache
            and (t.get("strategy") == safetensors or reads_torch(str(t.get("strategy"))))
            and t.get("status") == "ok"
            and t.get("verified") is not None
        ]
        same = (
            "the same tensors, digests checked"
            if checked and all(checked)
            else "NOT verified to be the same tensors"
        )
        out.append(
            f"formats, {cache}: {text} (load_file {st:.3g} s, torch.load(weights_only=True)"
            f" {pk:.3g} s{extra}; {same})"
        )
    return out


def command_cells(
    name: str, seconds: float, total_bytes: int, major_faults: int | None, request: float | None,
    rss: int | None,
) -> tuple[str, ...]:  # fmt: skip
    """The trial table's cells (:data:`TABLE_HEADER`) for a run that is not a trial (the
    user's own command, timed from its start to its end: no speed-up over mmap, no read
    count)."""
    rate = format_rate(total_bytes / seconds) if seconds else "-"
    faults = f"{_count(major_faults)}/-" if major_faults is not None else "-"
    return (name, "cold", _secs(seconds), rate, "-", faults, "-", _size(request), _size(rss))


def command_row(
    name: str, seconds: float, total_bytes: int, major_faults: int | None, request: float | None,
    rss: int | None,
) -> str:  # fmt: skip
    """:func:`command_cells` as a row of the terminal's table."""
    return _text_row(command_cells(name, seconds, total_bytes, major_faults, request, rss))


def to_text(report: BenchReport, extra_rows: Sequence[str] = ()) -> str:
    """The trial table; ``extra_rows`` (:func:`command_row`) go under the trials' rows."""
    t = report.target
    lines = [f"target   {t['spec']} ({t['files']} file(s), {format_bytes(t['total_bytes'])})"]
    if report.sample:
        lines.append(_sample_line(report))
    header = _text_row(TABLE_HEADER)
    lines += ["", header, "-" * len(header)]
    lines += [_text_row(row) for row in summary_rows(report.to_dict())]
    lines += extra_rows
    lines.append(
        textwrap.fill(
            "x mmap: speed-up over mmap load_file in the same cache state. From one steady"
            " trial: faults (major/minor), reads (read syscalls), avg req (block-layer request"
            " size; '-' where storage has no block device) and peak RSS.",
            80,
        )
    )
    if report.sample:
        lines += ["", *extrapolation_lines(report)]
    if formats := format_lines(report.to_dict()):
        lines += ["", *formats]
    lines += _shaky_lines(report)
    lines += _trailer(report)
    return "\n".join(lines)


def _sample_line(report: BenchReport) -> str:
    return f"sample   {sample_text(report.to_dict())}"


def sample_text(bench: dict[str, Any]) -> str:
    """What a sampled run read, and why it sampled ("" for whole loads)."""
    smp = bench.get("sample")
    if not isinstance(smp, dict):
        return ""
    files = (bench.get("target") or {}).get("files")
    what = (
        f"{smp.get('files')} of {files} whole files"
        if smp.get("kind") == "shards"
        else f"{smp.get('tensors')} tensors in {smp.get('files')} file(s)"
    )
    read, total = format_bytes(int(smp.get("bytes") or 0)), int(smp.get("total_bytes") or 0)
    return (
        f"{read} of {format_bytes(total)} ({what}); times extrapolated to the whole model:"
        f" {smp.get('reason')}"
    )


#: The trial table's columns, as the terminal and the app's Benchmark tab show them.
TABLE_HEADER: tuple[str, ...] = (
    "strategy",
    "cache",
    "median",
    "rate",
    "x mmap",
    "faults",
    "reads",
    "avg req",
    "RSS",
)


def _summary(d: dict[str, Any]) -> Summary:
    """A summary read back from a report's JSON (the fields it was written with)."""
    values: dict[str, Any] = {f.name: d.get(f.name) for f in dataclasses.fields(Summary)}
    return Summary(**values)


def summary_rows(bench: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per strategy and cache state of a bench report's JSON: its median time
    (``~`` extrapolated), rate, speed-up ("?" for a figure that cannot be trusted) and one
    steady trial's counters; or, in the third cell, why it has none. The terminal's table
    and the app's Benchmark tab draw these rows, so both show the Advice's medians."""
    summaries = [_summary(d) for d in bench.get("summary") or [] if isinstance(d, dict)]
    warm = {w.strategy: w for w in summaries if w.cache == "warm"}
    trials = [t for t in bench.get("trials") or [] if isinstance(t, dict)]
    steady = {
        (t.get("strategy"), t.get("cache")): t
        for t in trials
        if t.get("status") == "ok" and not t.get("warmup")
    }
    total = int((bench.get("target") or {}).get("total_bytes") or 0) or None
    rows: list[tuple[str, ...]] = []
    for s in summaries:
        example = steady.get((s.strategy, s.cache))
        if s.median_seconds is None or example is None:
            bad = next(
                (
                    t
                    for t in trials
                    if (t.get("strategy"), t.get("cache")) == (s.strategy, s.cache)
                    and t.get("status") != "ok"
                ),
                None,
            )
            why = (
                bad.get("reason") if bad and bad.get("reason") else "no trial with a verified cache"
            )
            verb = "not run" if bad is not None and bad.get("status") == "skipped" else "failed"
            rows.append((s.strategy, s.cache, f"{verb}: {why}"))
            continue
        secs = s.extrapolated_median_seconds or s.median_seconds
        shown = "~" + _short(secs) if s.extrapolated_median_seconds else _secs(secs)
        # The rate of the time shown: the whole model's over its extrapolated time.
        per_s = total / secs if s.extrapolated_median_seconds and total else s.median_bytes_per_s
        # A figure that cannot be trusted is never shown as a speed-up (see the trailer).
        x = "?" if shaky(s, warm, total) else f"{s.x_vs_mmap:.2f}x" if s.x_vs_mmap else "-"
        rows.append(
            (
                s.strategy,
                s.cache,
                shown,
                format_rate(per_s) if per_s else "-",
                x,
                f"{_count(example.get('major_faults'))}/{_count(example.get('minor_faults'))}",
                _count(example.get("read_syscalls")),
                _size(example.get("avg_request_bytes")),
                _size(example.get("peak_rss_bytes")),
            )
        )
    return rows


#: Each column's width in the terminal's table (the first two left-aligned).
_WIDTHS = (16, 5, 8, 10, 7, 11, 6, 8, 8)


def _text_row(row: tuple[str, ...]) -> str:
    if len(row) == 3:  # no time: why
        return f"{row[0]:<16}{row[1]:<5}{row[2]}"[:160]
    return "".join(
        f"{cell:<{w}}" if i < 2 else f"{cell:>{w}}"
        for i, (cell, w) in enumerate(zip(row, _WIDTHS, strict=True))
    )


#: Said above the figures shown "?" in the table.
SHAKY_TITLE = "not measured reliably (no speed-up shown; a larger --budget measures them whole)"


def shaky_items(bench: dict[str, Any]) -> list[str]:
    """The figures shown "?" in the table of a bench report's JSON, each with why it
    cannot be trusted."""
    summaries = [_summary(d) for d in bench.get("summary") or [] if isinstance(d, dict)]
    warm = {w.strategy: w for w in summaries if w.cache == "warm"}
    total = int((bench.get("target") or {}).get("total_bytes") or 0) or None
    return [f"{s.strategy} {s.cache}: {w}" for s in summaries if (w := shaky(s, warm, total))]


def unverified_items(bench: dict[str, Any]) -> list[str]:
    """The trials kept out of the medians (their cache state not verified): how many, then
    one line per reason (on tmpfs every cold trial has the same one: issue 41)."""
    trials = [t for t in bench.get("trials") or [] if isinstance(t, dict)]
    unverified = [t for t in trials if t.get("status") == "ok" and not t.get("cache_verified")]
    if not unverified:
        return []
    by_note: dict[str, list[dict[str, Any]]] = {}
    for t in unverified:
        by_note.setdefault(str((t.get("detail") or {}).get("cache_note", "")), []).append(t)
    lines = [f"{len(unverified)} trial(s) kept out of the medians: cache state not verified"]
    for note, mine in by_note.items():
        first = mine[0]
        lines.append(
            f"#{first.get('id')} {first.get('strategy')} {first.get('cache')}: {note}"
            if len(mine) == 1
            else f"{len(mine)} trials ({_id_ranges([int(t.get('id') or 0) for t in mine])}): {note}"
        )
    return lines


def _shaky_lines(report: BenchReport) -> list[str]:
    """The figures shown "?" in the table, each with why it cannot be trusted."""
    items = shaky_items(report.to_dict())
    return ["", SHAKY_TITLE + ":", *(f"  {item}" for item in items)] if items else []


def _trailer(report: BenchReport) -> list[str]:
    """What was skipped, what failed, what was kept out of the medians, and the notes."""
    lines: list[str] = []
    if report.skipped:
        lines += ["", "skipped:"] + [f"  {k}: {v}" for k, v in report.skipped.items()]
    failed = [tr for tr in report.trials if tr.status == "failed"]
    if failed:
        lines += ["", "failed trials:"] + [
            f"  #{tr.id} {tr.strategy} {tr.cache}: {tr.reason}" for tr in failed
        ]
    if kept_out := unverified_items(report.to_dict()):
        lines += ["", kept_out[0], *(f"  {item}" for item in kept_out[1:])]
    lines += [f"note: {note}" for note in report.notes]
    return lines


def _id_ranges(ids: list[int]) -> str:
    """Trial ids as runs: ``#1-13, #17-29, #33``."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"#{a}" if a == b else f"#{a}-{b}" for a, b in runs)
