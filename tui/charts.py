"""Charts that carry their numbers: a throughput-over-time chart and labelled bar charts.

Textual's Sparkline scales each window to its own range, so a flat 5 MB/s and a
flat 5 GB/s look alike. These always print the values and units, draw against
an explicit y maximum (shared between charts that should compare) and label
both axes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual._context import NoActiveAppError
from textual.reactive import reactive
from textual.widget import Widget

from loadscope.base.units import format_rate

_EIGHTHS = " ▁▂▃▄▅▆▇█"


def rates_from_progress(
    points: Sequence[tuple[float, int]], columns: int = 60, min_bin_s: float = 0.02
) -> list[tuple[float, float]]:
    """(end time, bytes/s) per window from cumulative (seconds, bytes) points.

    The window is the trial's span over ``columns`` (at least ``min_bin_s``), and
    the time before the first byte counts as zero throughput (from t=0). A last
    sliver shorter than a quarter window joins the window before it, so one late
    sample cannot make a spike.
    """
    pts = list(points)
    if not pts:
        return []
    if pts[0][0] > 0:
        pts.insert(0, (0.0, 0))
    if len(pts) < 2:
        return []
    bin_s = max(min_bin_s, pts[-1][0] / columns)
    out: list[tuple[float, float]] = []
    starts: list[tuple[float, int]] = []
    t0, b0 = pts[0]
    for t, b in pts[1:]:
        if t - t0 >= bin_s:
            out.append((t, (b - b0) / (t - t0)))
            starts.append((t0, b0))
            t0, b0 = t, b
    last_t, last_b = pts[-1]
    if last_t > t0:
        if out and last_t - t0 < bin_s / 4:
            pt0, pb0 = starts[-1]
            out[-1] = (last_t, (last_b - pb0) / (last_t - pt0))
        else:
            out.append((last_t, (last_b - b0) / (last_t - t0)))
    return out


def column_chart(values: Sequence[float], width: int, height: int, y_max: float) -> list[str]:
    """``height`` rows of eighth-block columns, the newest value on the right."""
    cols = list(values[-width:])
    cols = [0.0] * (width - len(cols)) + cols
    rows = []
    for row in range(height - 1, -1, -1):
        line = []
        for v in cols:
            level = 0.0 if y_max <= 0 else max(0.0, min(1.0, v / y_max)) * height
            fill = level - row
            line.append(
                "█" if fill >= 1 else _EIGHTHS[max(0, round(fill * 8))] if fill > 0 else " "
            )
        rows.append("".join(line))
    return rows


def theme_color(widget: Widget, name: str, fallback: str = "cyan") -> str:
    """A colour from the app's theme (charts follow the theme, not fixed colours)."""
    try:
        return str(widget.app.theme_variables.get(name, fallback))
    except NoActiveAppError:  # rendered outside an app (tests of the widget alone)
        return fallback


@dataclass(slots=True)
class Series:
    label: str
    #: Cumulative (seconds since the trial's start, bytes done) samples.
    points: list[tuple[float, int]]
    done: bool = False
    note: str = ""

    def rates(self, columns: int) -> list[tuple[float, float]]:
        # Windows of at least 50 ms: two samples microseconds apart are not a rate (a
        # "peak 33 GB/s" on a 1 GB/s disk flattened every other curve).
        return rates_from_progress(self.points, columns, MIN_WINDOW_S)


#: The shortest window a rate is computed over.
MIN_WINDOW_S = 0.05


#: A series' windows faster than this many times its own mean rate are a phase or a
#: burst (prewarm's load from the page cache at 11 GB/s after its fill at 0.3 GB/s).
BURST_X = 3.0


def shared_scale(all_rates: Sequence[Sequence[tuple[float, float]]]) -> float:
    """One y maximum for charts that compare: the largest of each series' 90th-percentile
    rate, each at most :data:`BURST_X` times that series' own mean rate (its bytes over its
    time), with headroom. A short burst, or a fast phase of a series mostly slower (a
    page-cache phase), then clips at the top (its peak is still printed in figures) instead
    of squashing every other strategy's curve to nothing; series that differ steadily keep
    their true ratio."""
    tops = []
    for rates in all_rates:
        values = sorted(r for _, r in rates)
        if values:
            p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
            mean = _time_mean(rates)
            tops.append(min(p90, BURST_X * mean) if mean > 0 else p90)
    return max(tops, default=0.0) * 1.15


def _time_mean(rates: Sequence[tuple[float, float]]) -> float:
    """A series' bytes over its time (each window weighted by its length): prewarm's two
    windows, 1.5 s filling the cache (0 B/s of load) and 0.05 s at 14 GB/s, average 0.16
    GB/s, not the 7 GB/s their plain mean gave (it set a cold chart's scale at 15.9 GB/s)."""
    prev, area = 0.0, 0.0
    for t, r in rates:
        area += r * max(0.0, t - prev)
        prev = max(prev, t)
    return area / prev if prev > 0 else sum(r for _, r in rates) / len(rates)


def cache_scales(series: Iterable[Series], columns: int) -> dict[str, float]:
    """One :func:`shared_scale` per cache state (the last word of a series' label): a warm
    load from the page cache ran 23-38x a cold one (``bench_strategies.py``, mmap), and on one
    scale every cold curve,
    the ones the diagnosis compares, lay flat under it (14.6 GB/s over an 80 MB/s mmap)."""
    groups: dict[str, list[list[tuple[float, float]]]] = {}
    for s in series:
        groups.setdefault(s.label.rsplit(" ", 1)[-1], []).append(s.rates(columns))
    return {cache: shared_scale(rates) for cache, rates in groups.items()}


AXIS_W = 10


def plot_width(total_width: int) -> int:
    return max(4, total_width - AXIS_W - 1)


def resample(rates: Sequence[tuple[float, float]], columns: int) -> list[float]:
    """One value per column over [0, span]: the rate of the window covering its middle."""
    if not rates:
        return []
    span = rates[-1][0]
    if span <= 0:
        return [rates[-1][1]]
    out, k = [], 0
    for c in range(columns):
        mid = (c + 0.5) * span / columns
        while k < len(rates) - 1 and rates[k][0] < mid:
            k += 1
        out.append(rates[k][1])
    return out


class RateChart(Widget):
    """One strategy's throughput over time: MB/s columns with a y and an x axis, and
    mean (or now) and peak in figures."""

    DEFAULT_CSS = """
    RateChart { height: 6; }
    """
    series: reactive[Series | None] = reactive(None, layout=False)
    y_max: reactive[float] = reactive(0.0)

    def render(self) -> Text:
        s = self.series
        plot_w = plot_width(self.size.width)
        height = max(1, self.size.height - 2)
        text = Text(no_wrap=True, overflow="crop")
        if s is None:
            text.append("waiting for the first trial", style="dim")
            return text
        rates = s.rates(plot_w)
        values = [r for _, r in rates]
        now = values[-1] if values else 0.0
        peak = max(values, default=0.0)
        span = rates[-1][0] if rates else 0.0
        state = "done" if s.done else "running"
        text.append(f"{s.label}", style="bold")
        if s.done and s.points and s.points[-1][0] > 0:
            first = f"mean {format_rate(s.points[-1][1] / s.points[-1][0])}"
        else:
            first = f"now {format_rate(now)}"
        text.append(
            f"  {first} · peak {format_rate(peak)} · {state}" + (f" · {s.note}" if s.note else ""),
            style="dim" if s.done else "",
        )
        y_max = self.y_max or peak or 1.0
        rows = column_chart(resample(rates, plot_w), plot_w, height, y_max)
        color = theme_color(self, "accent" if not s.done else "primary")
        for i, row in enumerate(rows):
            label = format_rate(y_max) if i == 0 else "0 B/s" if i == len(rows) - 1 else ""
            text.append(f"\n{label:>{AXIS_W}}│", style="dim")
            text.append(row, style=color)
        end = f"{span:.3g} s"
        text.append("\n" + " " * AXIS_W + "└0 s" + end.rjust(max(1, plot_w - 3)), style="dim")
        return text


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    value: float
    text: str


def bar_lines(
    bars: Sequence[Bar], width: int, *, unit_max: str = "", color: str = "cyan"
) -> list[Text]:
    """Horizontal bars against a common scale, each with its value; a scale line last."""
    if not bars:
        return [Text("no data", style="dim")]
    label_w = max(len(b.label) for b in bars)
    text_w = max(len(b.text) for b in bars)
    bar_w = max(4, width - label_w - text_w - 4)
    biggest = max(b.value for b in bars) or 1.0
    out = []
    for b in bars:
        n = b.value / biggest * bar_w
        full = int(n)
        part = _EIGHTHS[round((n - full) * 8)] if n - full > 0 else ""
        line = Text(no_wrap=True)
        line.append(f"{b.label:>{label_w}} ")
        line.append(("█" * full + part).ljust(bar_w), style=color)
        line.append(f" {b.text:>{text_w}}")
        out.append(line)
    scale = Text(no_wrap=True, style="dim")
    scale.append(" " * (label_w + 1) + "0" + " " * max(1, bar_w - 1 - len(unit_max)) + unit_max)
    out.append(scale)
    return out
