"""A bench report as content (``loadscope.report.bench_text``): the trial table with each
figure's spread, what a sampled run read and how each whole-model time was made, the
formats' comparison, the figures not measured reliably and the trials kept out of the
medians (:func:`bench_blocks`), read from the report's JSON. ``loadscope bench``'s text
(:func:`to_text`), the doctor's report in every medium and the app's Benchmark tab
(:func:`summary_rows`) lay these out.

May import: ``loadscope.engine.bench_records``, ``loadscope.engine.sampling``,
``loadscope.engine.trials``, ``loadscope.engine.summaries``,
``loadscope.loaders.strategies``, ``loadscope.probes.sources``,
``loadscope.report.content``, ``loadscope.report.text``, ``loadscope.base``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.bench_records import BenchReport, Summary
from loadscope.engine.sampling import error_text
from loadscope.engine.summaries import shaky
from loadscope.loaders.strategies import TORCH_MMAP, default_load, reads_torch
from loadscope.probes.sources import target_words
from loadscope.report.content import Block, Bullets, Para, Table
from loadscope.report.text import blocks_text


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


def to_text(report: BenchReport) -> str:
    """``loadscope bench``'s text: the target, then :func:`bench_blocks` in 80 columns."""
    t = report.target
    head = f"target   {t['spec']} ({target_words(t)})"
    return "\n".join([head, *blocks_text(bench_blocks(report.to_dict()))])


#: The trial table's columns beside :data:`TABLE_HEADER`: each figure's spread.
SPREAD_HEADER = ("trials", "first run", "min-max")


def bench_blocks(
    bench: dict[str, Any],
    *,
    extra_rows: Sequence[tuple[str, ...]] = (),
    under_table: Sequence[Block] = (),
    in_report: bool = False,
) -> tuple[Block, ...]:
    """A bench report's JSON as content, one for every medium (the terminal, the
    doctor's report in text, Markdown and HTML): what a sampled run read, the trial table
    (``summary_rows``, then seed 004's spread of each: steady trials, the first run,
    min-max) with ``extra_rows`` under its rows and ``under_table`` after its legend, the
    extrapolation, the formats' comparison, the figures not measured reliably and the
    trials kept out of the medians; then, unless ``in_report`` (a doctor's report has
    sections of its own for them), what was skipped, what failed and the notes."""
    trials = [t for t in bench.get("trials") or [] if isinstance(t, dict)]
    spread = {
        (s.get("strategy"), s.get("cache")): _trial_spread(trials, s)
        for s in bench.get("summary") or []
        if isinstance(s, dict)
    }
    width = len(TABLE_HEADER) + len(SPREAD_HEADER)
    rows: list[tuple[str, ...]] = []
    for row in summary_rows(bench):
        name = f"`{row[0]}`"
        if len(row) < len(TABLE_HEADER):  # no time: why, in the third cell
            rows.append((name, *row[1:], *("",) * (width - len(row))))
            continue
        n, first, low, high = spread[(row[0], row[1])]
        spans = f"{seconds_cell(low)}-{seconds_cell(high)}"
        rows.append((name, *row[1:], str(n), seconds_cell(first), spans))
    sample = sample_text(bench)
    blocks: list[Block] = [Para(f"sample: {sample}")] if sample else []
    blocks += [
        Table((*TABLE_HEADER, *SPREAD_HEADER), (*rows, *extra_rows)),
        Para(
            "x mmap: speed-up over mmap load_file in the same cache state; faults"
            " (major/minor), reads (read syscalls), avg req (block-layer request size) and RSS"
            " (peak) from one steady trial; trials, first run and min-max (seconds): the"
            " steady trials' spread."
            + (
                " ~: extrapolated to the whole model from a sample; first run and min-max are"
                " then the sample's own times."
                if sample
                else ""
            )
        ),
        *under_table,
    ]
    if sample:
        total = int((bench.get("target") or {}).get("total_bytes") or 0)
        blocks += [
            Para(extrapolation_note(total)),
            Table(EXTRAPOLATION_HEADER, tuple(extrapolation_rows(bench))),
        ]
    if not in_report and (formats := format_lines(bench)):
        blocks.append(Bullets(tuple(formats)))
    if shaky := shaky_items(bench):
        blocks += [Para(SHAKY_TITLE + ":"), Bullets(tuple(shaky))]
    if kept_out := unverified_items(bench):
        blocks += [Para(kept_out[0] + ":"), Bullets(tuple(kept_out[1:]))]
    if in_report:
        return tuple(blocks)
    if skipped := bench.get("skipped") or {}:
        blocks += [Para("skipped:"), Bullets(tuple(f"{k}: {v}" for k, v in skipped.items()))]
    failed = [t for t in trials if t.get("status") == "failed"]
    if failed:
        items = (
            f"#{t.get('id')} {t.get('strategy')} {t.get('cache')}: {t.get('reason')}"
            for t in failed
        )
        blocks += [Para("failed trials:"), Bullets(tuple(items))]
    blocks += [Para(f"note: {note}") for note in bench.get("notes") or []]
    return tuple(blocks)


def seconds_cell(value: float | None) -> str:
    """Seconds in three figures, "-" for none (the spread's columns)."""
    return f"{value:.3g}" if value is not None else "-"


def _trial_spread(
    trials: list[dict[str, Any]], summary: Mapping[str, Any]
) -> tuple[int, float | None, float | None, float | None]:
    """Seed 004's columns for one strategy and cache state, from its trials in the order
    they ran: how many steady trials, the first run's time (the warm-up when there was
    one), the steady min and max."""
    mine = [
        t
        for t in trials
        if t.get("strategy") == summary.get("strategy")
        and t.get("cache") == summary.get("cache")
        and t.get("status") == "ok"
        and not t.get("fit")
        and t.get("seconds") is not None
    ]
    steady = [t for t in mine if not t.get("warmup") and t.get("cache_verified")]
    first = mine[0]["seconds"] if mine else None
    secs = [float(t["seconds"]) for t in steady]
    return len(steady), first, min(secs) if secs else None, max(secs) if secs else None


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


def charted_trials(bench: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The trial each strategy's chart draws, for the HTML's bytes-over-time chart and the
    app's rate charts alike: its first timed (not warm-up) cold trial that completed, else
    its last timed trial (one that failed shows how far it got)."""
    out: dict[str, dict[str, Any]] = {}
    for t in bench.get("trials") or []:
        if not isinstance(t, dict) or t.get("warmup"):
            continue
        name = str(t.get("strategy"))
        mine = out.get(name)
        settled = mine is not None and mine.get("cache") == "cold" and mine.get("status") == "ok"
        if not settled:
            out[name] = t
    return out


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


def _id_ranges(ids: list[int]) -> str:
    """Trial ids as runs: ``#1-13, #17-29, #33``."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"#{a}" if a == b else f"#{a}-{b}" for a, b in runs)
