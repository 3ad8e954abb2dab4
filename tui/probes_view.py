"""The app's probes view (``loadscope.tui.probes_view``), drawn from a probe report dict.

The probes' figures are the content every output lays out (``report/probe_text.py``'s
blocks: what the terminal, the Markdown and the HTML show): its labelled lines as text,
its bars as charts redrawn to the view's width. Beside them, what only a screen can
show well: the latency percentiles and the memory as charts, residency per file. A live
run and a saved report draw the same.

Owns: :class:`ProbesView` and its :class:`BarChart`.
May import: the core's units (``loadscope.base.units``), the probes' content
(``loadscope.report.probe_text``, ``loadscope.report.content``) and how their blocks
read (``loadscope.probes``), the charts; nothing else of the app.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from loadscope.base.units import format_bytes
from loadscope.probes.iobench import latency_chart
from loadscope.probes.pagecache import residency_per_file
from loadscope.probes.spec import block_of, ok
from loadscope.probes.system import memory_figures
from loadscope.report.content import Bars, Code, Fields
from loadscope.report.probe_text import probe_parts, source_title
from loadscope.tui.charts import Bar, bar_lines, theme_color

#: Residency lines shown before "... and N more".
SHOWN_FILES = 12


class BarChart(Widget):
    """Labelled horizontal bars with values and units, redrawn to the widget's width."""

    DEFAULT_CSS = "BarChart { height: auto; }"
    bars: reactive[tuple[Bar, ...]] = reactive((), layout=True)

    def __init__(self, title: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return len(self.bars) + 2 if self.bars else 2

    def render(self) -> Text:
        out = Text(self.title, style="bold", no_wrap=True)
        unit_max = (self.bars and max(self.bars, key=lambda b: b.value).text) or ""
        for line in bar_lines(
            self.bars, self.size.width, unit_max=unit_max, color=theme_color(self, "accent")
        ):
            out.append("\n")
            out.append_text(line)
        return out


def _labelled(label: str, text: str) -> Text:
    return Text.assemble((label, "bold"), " ", text) if label else Text(f"  {text}")


@dataclass(frozen=True, slots=True)
class ProbeContent:
    """The probes' blocks as the view lays them out: the labelled lines above the bars
    (``summary``), the bars by request size and by readers (the read into fresh RAM
    among the latter), the labelled lines after them (``rest``)."""

    summary: tuple[tuple[str, str], ...]
    by_block: tuple[Bar, ...]
    by_readers: tuple[Bar, ...]
    rest: tuple[tuple[str, str], ...]


def probe_content(probe: dict[str, Any]) -> ProbeContent:
    """:func:`~loadscope.report.probe_text.probe_parts` for the view's widgets; a caption
    between two charts (each chart has its own title) is left to the chart."""
    head, middle, tail = probe_parts(probe)
    rest: list[tuple[str, str]] = []
    charts: list[tuple[Bar, ...]] = []
    for block in middle:
        if isinstance(block, Bars):
            into_ram = len(charts) == 2  # the third: the best parallel read into fresh RAM
            charts.append(
                tuple(
                    Bar(f"{label} into RAM" if into_ram else label, value, figure)
                    for label, figure, value, _remark in block.rows
                )
            )
        elif isinstance(block, Fields):
            # The throughput's own line is the charts' title where there are charts.
            drawn = any(isinstance(b, Bars) for b in middle)
            rest.extend(r for r in block.rows if r[0] and not (drawn and r[0] == "throughput"))
        elif isinstance(block, Code):
            rest.extend(("", line.strip()) for line in block.text.splitlines())
    by_block = charts[0] if charts else ()
    by_readers = tuple(bar for chart in charts[1:] for bar in chart)
    return ProbeContent(head.rows, by_block, by_readers, (*rest, *tail.rows))


def latency_bars(probe: dict[str, Any]) -> tuple[Bar, ...]:
    """The cold 4 KiB read latency percentiles, when the latency probe ran (the HTML's
    chart's bars: ``probes/iobench.py``'s ``latency_chart``)."""
    chart = latency_chart(block_of(probe.get("latency")))
    return (
        tuple(Bar(label, value, figure) for label, figure, value, _ in chart[1].rows)
        if chart
        else ()
    )


def memory_bars(probe: dict[str, Any]) -> tuple[Bar, ...]:
    """The model's size beside the available RAM and the cgroup's limit."""
    model = int(block_of(probe.get("target")).get("total_bytes") or 0)
    mem: list[Bar] = [Bar("model", model, format_bytes(model))]
    system = block_of(probe.get("system"))
    available, limit = memory_figures(system)
    if ok(system):
        mem.append(Bar("available", available or 0, format_bytes(available or 0)))
    if limit:
        mem.append(Bar("cgroup limit", limit, format_bytes(limit)))
    return tuple(mem)


def cache_lines(probe: dict[str, Any]) -> list[Text]:
    """Page-cache residency per file."""
    files = residency_per_file(probe.get("files"))
    lines = [_labelled("page cache", "residency per file, before probing")]
    for shown, path in files[:SHOWN_FILES]:
        lines.append(Text(f"  {shown:>5}  {path}"))
    if len(files) > SHOWN_FILES:
        lines.append(Text(f"  ... and {len(files) - SHOWN_FILES} more"))
    return lines


class ProbesView(VerticalScroll):
    """Storage class and its evidence, devices, latency, throughput, RAM, page cache."""

    def compose(self) -> ComposeResult:
        yield Static("The probes have not run yet.", id="probe-summary")
        yield BarChart("Cold 4 KiB read latency percentiles", id="latency")
        yield BarChart("Cold throughput, one reader, by request size", id="by-block")
        yield BarChart("Cold throughput by parallel readers (1 MiB requests)", id="by-readers")
        yield BarChart("Memory", id="memory")
        yield Static("", id="probe-cache")
        yield Static("", id="probe-registered")

    #: Whether this run's probes have been shown (else the summary says what is probed).
    shown = False

    def probing(self, step: str) -> None:
        """A probe step began: say so in place of the probes not yet shown (the view read
        "have not run yet" while they ran)."""
        if not self.shown:
            self.query_one("#probe-summary", Static).update(
                Text(f"Probing the storage: {step}... (read-only; the figures follow)")
            )

    def clear(self) -> None:
        """A new run: the last run's figures are not this one's."""
        self.shown = False
        self.query_one("#probe-summary", Static).update("The probes have not run yet.")
        for chart in self.query(BarChart):
            chart.bars = ()
        self.query_one("#probe-cache", Static).update("")
        self.query_one("#probe-registered", Static).update("")

    def show(self, probe: dict[str, Any] | None) -> None:
        if not probe:  # a report without probes: not the last one's figures
            self.clear()
            return
        self.shown = True
        content = probe_content(probe)
        # Text objects, not markup: paths and reasons may hold brackets.
        summary = Text("\n").join(_labelled(*row) for row in content.summary)
        self.query_one("#probe-summary", Static).update(summary)
        self.query_one("#latency", BarChart).bars = latency_bars(probe)
        self.query_one("#by-block", BarChart).bars = content.by_block
        self.query_one("#by-readers", BarChart).bars = content.by_readers
        # A model in another source than files: no file reads to chart ("no data" x3).
        files = not source_title(probe.get("target"))
        for chart in ("#latency", "#by-block", "#by-readers"):
            self.query_one(chart, BarChart).display = files
        self.query_one("#memory", BarChart).bars = memory_bars(probe)
        self.query_one("#probe-cache", Static).update(Text("\n").join(cache_lines(probe)))
        rest = Text("\n").join(_labelled(*row) for row in content.rest)
        self.query_one("#probe-registered", Static).update(rest)
