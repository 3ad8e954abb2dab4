"""A doctor report as one self-contained HTML file: inline CSS and SVG charts, no network fetches.

The same sections as the Markdown (:mod:`loadscope.report.sections`), each collapsible,
with the charts drawn above the trials and the storage evidence.

Charts carry their numbers: axes with units, values printed beside bars, so a
flat 5 MB/s never looks like a flat 5 GB/s.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.sampling import whole_rate
from loadscope.probes.iobench import latency_chart
from loadscope.probes.spec import block_of
from loadscope.report.bench_text import charted_trials
from loadscope.report.content import Bars, Block, Bullets, Code, Fields, Para, Quote, Section, Table
from loadscope.report.probe_text import probe_parts, target_words
from loadscope.report.sections import probe_best_read, sections
from loadscope.report.text import blocks_text, preformatted_runs

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;max-width:980px;margin:2em auto;color:#1b1f24;padding:0 1em}
h1{font-size:1.3em} h2{font-size:1.1em;margin-top:1.6em;border-bottom:1px solid #ddd}
.verdict{padding:.7em 1em;border-radius:6px;font-weight:600}
.problem{background:#fff1e6;border:1px solid #f0a060} .healthy{background:#eaf7ea;border:1px solid #7c7}
.unmeasured{background:#f3f3f3;border:1px solid #999}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
code,pre{background:#f4f4f4;padding:.1em .3em;border-radius:3px} pre{padding:.6em;overflow-x:auto}
svg text{font:11px system-ui,sans-serif;fill:#333}
"""
_COLORS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)
#: Solid, then dashed, then dotted: with the colours, 30 series told apart (a doctor has
#: up to 20 strategies), also in grey print and for a reader who cannot tell two colours.
_DASHES = ("", "7 4", "2 3")


def _style(i: int) -> tuple[str, str]:
    """Series ``i``'s colour and its SVG dash attribute ("" for a solid line)."""
    color = _COLORS[i % len(_COLORS)]
    dash = _DASHES[(i // len(_COLORS)) % len(_DASHES)]
    return color, f' stroke-dasharray="{dash}"' if dash else ""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def bar_chart(
    title: str,
    rows: list[tuple[str, float]],
    fmt: Any,
    width: int = 640,
    marker: tuple[str, float] | None = None,
    texts: list[str] | None = None,
) -> str:
    """Horizontal bars, each labelled with its value (``fmt`` formats a value with units,
    or ``texts`` gives each bar's figure as the content has it); ``marker`` (label, value)
    draws a dashed reference line across them (a ceiling)."""
    if not rows:
        return ""
    biggest = max([v for _, v in rows] + ([marker[1]] if marker else [])) or 1.0
    bar_h, left, right = 20, 150, 110
    height = 30 + bar_h * len(rows) + (16 if marker else 0)
    parts = [
        f'<svg role="img" aria-label="{_e(title)}" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="0" y="14" font-weight="600">{_e(title)}</text>',
    ]
    span = width - left - right
    for i, (label, value) in enumerate(rows):
        y = 24 + i * bar_h
        w = max(1.0, span * value / biggest)
        color = _COLORS[i % len(_COLORS)]
        parts.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{_e(label)}</text>')
        parts.append(
            f'<rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{bar_h - 6}" fill="{color}"/>'
        )
        shown = texts[i] if texts else fmt(value)
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 13}">{_e(shown)}</text>')
    if marker:
        x = left + span * marker[1] / biggest
        bottom = 24 + bar_h * len(rows)
        parts.append(
            f'<line class="marker" x1="{x:.1f}" y1="20" x2="{x:.1f}" y2="{bottom}"'
            ' stroke="#555" stroke-dasharray="4 3"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{bottom + 12}" text-anchor="middle">'
            f"{_e(marker[0])} {_e(fmt(marker[1]))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def nice_ticks(maximum: float, count: int = 4) -> list[float]:
    """0 and round steps (1, 2 or 5 times a power of ten) up to at least ``maximum``."""
    if maximum <= 0:
        return [0.0]
    raw = maximum / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    ticks, value = [], 0.0
    while value < maximum * (1 - 1e-9):
        ticks.append(value)
        value += step
    return [*ticks, value]


def line_chart(
    title: str, series: dict[str, list[tuple[float, float]]], width: int = 640, height: int = 260
) -> str:
    """Bytes loaded over time per strategy: every run drawn from its own start (t = 0,
    0 bytes), axes with round ticks and units, and a legend with each run's colour."""
    runs = {}
    for name, raw in series.items():
        pts = sorted(raw)
        if pts and pts[0] != (0.0, 0.0):
            pts = [(0.0, 0.0), *pts]  # aligned at the start: before the first byte, none
        if len(pts) >= 2:
            runs[name] = pts
    if not runs:
        return ""
    x_ticks = nice_ticks(max(p[0] for pts in runs.values() for p in pts) or 1.0)
    top_b = max(p[1] for pts in runs.values() for p in pts) or 1.0
    unit = next((u for u in (1 << 30, 1 << 20, 1 << 10) if top_b >= u), 1)
    y_ticks = [t * unit for t in nice_ticks(top_b / unit)]  # round in MiB, not in bytes
    max_t, max_b = x_ticks[-1], y_ticks[-1]
    left, bottom, top, right = 70, 34, 24, 150
    height = max(height, top + 16 * len(runs) + 14)  # room for every key
    pw, ph = width - left - right, height - top - bottom
    parts = [
        f'<svg role="img" aria-label="{_e(title)}" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="0" y="14" font-weight="600">{_e(title)}</text>',
    ]
    for t in x_ticks:
        x = left + pw * t / max_t
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + ph}" stroke="#eee"/>')
        parts.append(
            f'<text class="tick" x="{x:.1f}" y="{top + ph + 14}" text-anchor="middle">{t:g} s</text>'
        )
    for b in y_ticks:
        y = top + ph - ph * b / max_b
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#eee"/>'
        )
        label = format_bytes(b) if b else "0"
        parts.append(
            f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_e(label)}</text>'
        )
    parts += [
        f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#555"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="#555"/>',
        f'<text x="{left + pw / 2}" y="{height - 4}" text-anchor="middle">seconds since the'
        " trial started</text>",
    ]
    for i, (name, pts) in enumerate(runs.items()):
        color, dash = _style(i)
        coords = " ".join(
            f"{left + pw * t / max_t:.1f},{top + ph - ph * b / max_b:.1f}" for t, b in pts
        )
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{coords}"/>'
        )
        y = top + 10 + 16 * i
        x = left + pw + 12
        # The key is a piece of the line itself: its colour and its dash.
        parts.append(
            f'<line class="key" x1="{x}" y1="{y - 3}" x2="{x + 16}" y2="{y - 3}"'
            f' stroke="{color}" stroke-width="2"{dash}/>'
            f'<text x="{x + 22}" y="{y + 1}">{_e(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def to_html(doc: dict[str, Any]) -> str:
    """The report's sections (the Markdown's, :mod:`loadscope.report.sections`) as one
    page, with charts beside the trials and the storage evidence."""
    v, t = doc["verdict"], doc["target"]
    out = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>loadscope doctor: {_e(t['spec'])}</title><style>{_CSS}</style></head><body>",
        "<h1>loadscope doctor</h1>",
        f'<p class="verdict {_e(v["status"])}">{_e(v["headline"])}</p>',
        f"<p>target <code>{_e(t['spec'])}</code>: {_e(target_words(t))};"
        f" loadscope {_e(doc['tool']['version'])}, {_e(doc['created'])}</p>",
    ]
    # The fixes first, the top one open with its code per stack: what the reader came for.
    found = sections(doc)
    for section in found:
        if section.id.startswith("fix-"):
            out += render_section(section)
    charts = {
        "trials": _trial_charts(doc),
        "storage": _storage_charts(doc),
        "user-command": _user_command_charts(doc),
    }
    drawn: set[str] = set()
    for section in found:
        if section.id.startswith("fix-"):
            continue  # drawn first, above
        if section.id in charts and not section.collapsed:
            out += render_section(section) + charts[section.id]  # under its own heading
            drawn.add(section.id)
        elif section.id in charts:
            out.append(f"<h2>{_e(section.id.capitalize())}</h2>")
            out += charts[section.id]
            drawn.add(section.id)
            out += render_section(section, opened=True)
        else:
            out += render_section(section)
    for name, drawing in charts.items():
        if name not in drawn and drawing:
            out += [f"<h2>{_e(name.capitalize())}</h2>", *drawing]
    out.append("</body></html>")
    return "\n".join(out)


def render_section(section: Section, opened: bool = False) -> list[str]:
    """A section's blocks and children; a section shown open (the top fix) shows its
    children open too: the reader sees the fix's code without a click."""
    body = [part for run in preformatted_runs(section.blocks) for part in _run(run)]
    shown = not section.collapsed or opened
    body += [part for child in section.children for part in render_section(child, shown)]
    if section.collapsed:
        head = "<details open>" if opened else "<details>"
        return [f"{head}<summary>{_inline(section.title)}</summary>", *body, "</details>"]
    return ([f"<h2>{_inline(section.title)}</h2>"] if section.title else []) + body


def _run(run: tuple[Block, ...]) -> list[str]:
    """Labelled figures and bars as the terminal sets them (one ``<pre>``), else a block."""
    if isinstance(run[0], Fields | Bars):
        return [f"<pre>{_e(chr(10).join(blocks_text(run)))}</pre>"]
    return _block(run[0])


def _block(block: Block) -> list[str]:
    if isinstance(block, Fields | Bars):
        return _run((block,))
    if isinstance(block, Para):
        return [f"<p>{_inline(block.text)}</p>"]
    if isinstance(block, Quote):
        return [f"<p><i>{_inline(block.text)}</i></p>"]
    if isinstance(block, Bullets):
        items = "".join(f"<li>{_inline(item)}</li>" for item in block.items)
        return [f"<ul>{items}</ul>"]
    if isinstance(block, Code):
        return [f"<pre>{_e(block.text)}</pre>"]
    if isinstance(block, Table):
        head = "".join(f"<th>{_inline(h)}</th>" for h in block.header)
        rows = [
            "<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in block.rows
        ]
        return [f"<table><tr>{head}</tr>", *rows, "</table>"]
    raise TypeError(block)


def _inline(text: str) -> str:
    """The sections' inline markup (`code`, **bold**, a line break) as HTML, escaped."""
    out = _e(text)
    out = re.sub(r"`([^`]*)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)
    return out.replace("\n", "<br>")


def _trial_charts(doc: dict[str, Any]) -> list[str]:
    bench = doc.get("bench") or {}
    summary = [s for s in bench.get("summary", []) if s.get("median_bytes_per_s")]
    total = int((bench.get("target") or {}).get("total_bytes") or 0)
    if not summary:
        return []
    ceiling = probe_best_read(doc.get("probe") or {}) or 0.0
    # Each strategy's charted trial, the app's too (``report/bench_text.py``): cold ones.
    series = {
        name: [(float(p[0]), float(p[1])) for p in trial.get("series", [])]
        for name, trial in charted_trials(bench).items()
        if trial.get("cache") == "cold" and trial.get("status") == "ok"
    }
    return [
        bar_chart(
            "median throughput per strategy (cold)",
            [(s["strategy"], whole_rate(s, total) or 0.0) for s in summary if s["cache"] == "cold"],
            format_rate,
            marker=("probe's best read", ceiling) if ceiling else None,
        ),
        line_chart("bytes loaded over time, cold (one timed trial each, no warm-up)", series),
    ]


def _user_command_charts(doc: dict[str, Any]) -> list[str]:
    """``doctor --cmd``: the model's bytes in the page cache over each run of the user's
    command (its first run of each kind), from the samples taken while it ran."""
    user = doc.get("user_command")
    if not isinstance(user, dict):
        return []
    total = float(user.get("total_bytes") or 0)
    series: dict[str, list[tuple[float, float]]] = {}
    for variant in user.get("variants") or []:
        runs = [r for r in (variant.get("runs") or []) if isinstance(r, dict)]
        if not runs or not total:
            continue
        points = [
            (float(p["t"]), float(p["resident"]) * total)
            for p in runs[0].get("samples") or []
            if isinstance(p, dict) and isinstance(p.get("resident"), int | float)
        ]
        if points:
            series[str(variant.get("name"))] = points
    if not series:
        return []
    chart = line_chart("the model's bytes in the page cache while your command ran", series)
    return [chart] if chart else []


def _storage_charts(doc: dict[str, Any]) -> list[str]:
    probe = doc.get("probe") or {}
    out: list[str] = []
    latency = latency_chart(block_of(probe.get("latency")))
    if latency is not None:
        caption, bars = latency
        out.append(
            bar_chart(
                caption,
                [(label, value) for label, _figure, value, _remark in bars.rows],
                lambda us: f"{us:.0f} us" if us < 1000 else f"{us / 1000:.3g} ms",
            )
        )
    # The throughput's bars as the probes' content has them (``report/probe_text.py``):
    # the terminal's, the Markdown's and the app's figures, each chart under its caption.
    caption = ""
    for block in probe_parts(probe)[1]:
        if isinstance(block, Fields) and block.rows:
            label, text = block.rows[-1]
            caption = f"{label} {text}".strip().rstrip(":")
        elif isinstance(block, Bars):
            rows = [(label, value) for label, _figure, value, _remark in block.rows]
            texts = [figure for _label, figure, _value, _remark in block.rows]
            out.append(bar_chart(caption, rows, format_rate, texts=texts))
    return out
