"""The app's live benchmark and advice views, each drawn from report dicts.

A live run and a saved report feed the same views: the probe and doctor JSON
(``to_dict``) is the one model, so what the app shows is what the report says.
The live benchmark view also takes the trial events as they arrive. The third view,
the probes', is :mod:`loadscope.tui.probes_view`.

Owns: :class:`BenchView`, :class:`AdviceView` and :data:`APPLICABLE`.
May import: the core's units and fix ids (``loadscope.base``), the trial type
(``loadscope.engine.bench``), the strategies' names (``loadscope.loaders.strategies``),
the report's content model and its layouts (a fix as every output shows it:
``loadscope.report.content``, ``loadscope.report.text``, ``loadscope.report.bench_text``,
``loadscope.report.rank_text``, ``loadscope.report.sections``), the charts; nothing else
of the app.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, OptionList, ProgressBar, Static
from textual.widgets.option_list import Option

from loadscope.base import fix_ids
from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.bench import Trial
from loadscope.loaders.strategies import DEFAULT
from loadscope.report.bench_text import TABLE_HEADER, charted_trials, summary_rows
from loadscope.report.content import (
    Bars,
    Block,
    Bullets,
    Code,
    Fields,
    Para,
    Quote,
    Section,
    Table,
    fix_blocks,
    fixes,
    route_sections,
)
from loadscope.report.rank_text import ranks_section
from loadscope.report.sections import user_command_section
from loadscope.report.text import block_lines, plain, section_lines
from loadscope.tui.charts import (
    RateChart,
    Series,
    cache_scales,
    plot_width,
    rates_from_progress,
    theme_color,
)

# -- benchmark ------------------------------------------------------------------------------------


@dataclass(slots=True)
class LiveTrial:
    """What the view keeps of a running trial: plain data, owned by the UI thread."""

    trial_id: int
    label: str
    total_bytes: int = 0
    points: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=4000))
    pid: int | None = None
    major_faults: int | None = None
    read_syscalls: int | None = None
    read_bytes: int | None = None
    done: bool = False
    note: str = ""


def _marked(text: str) -> Text:
    """The content model's inline markup as Rich: **bold** bold, `code` as its text."""
    out = Text()
    for i, part in enumerate(re.split(r"\*\*([^*]+)\*\*", text)):
        out.append(part.replace("`", ""), style="bold" if i % 2 else "")
    return out


def block_text(block: Block, code_style: str) -> Text:
    """One block of the content model (``report/content.py``) as Rich text, a line each."""
    if isinstance(block, Code):
        return Text(block.text + "\n", style=code_style)
    if isinstance(block, Bullets):
        out = Text()
        for item in block.items:
            out.append_text(Text("  • ") + _marked(item) + Text("\n"))
        return out
    if isinstance(block, Table):
        rows = [" | ".join(block.header), *(" | ".join(r) for r in block.rows)]
        return Text("\n".join(rows) + "\n")
    if isinstance(block, Fields | Bars):
        return Text("\n".join(block_lines(block)) + "\n")
    text = block.text if isinstance(block, Para | Quote) else str(block)
    return _marked(text) + Text("\n")


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


_COLUMNS = ("#", "strategy", "cache", "time", "rate", "x mmap", "maj faults", "reads", "RSS")


def _trial_dict(t: Trial | dict[str, Any]) -> dict[str, Any]:
    """A trial as its report dict: live trials and saved reports share one row format."""
    return t if isinstance(t, dict) else {k: getattr(t, k) for k in Trial.__dataclass_fields__}


def _trial_row(d: dict[str, Any], x_mmap: str) -> tuple[str, ...]:
    secs = d.get("extrapolated_seconds") or d.get("seconds")
    if d.get("status") != "ok":
        return (
            str(d["id"]),
            d["strategy"],
            d["cache"],
            d.get("status", "?"),
            (d.get("reason") or "")[:40],
            "",
            "",
            "",
            "",
        )
    rate = d.get("bytes_per_s")
    if d.get("fit") and d.get("seconds"):
        # The extrapolation's second, smaller size: its own time, not a whole-model one.
        when = f"{d['seconds']:.3g} s fit"
    else:
        when = f"{secs:.3g} s" + ("*" if d.get("sampled") else "") if secs else "-"
    return (
        str(d["id"]),
        d["strategy"],
        d["cache"],
        when,
        format_rate(rate) if rate else "-",
        x_mmap,
        _or_dash(d.get("major_faults")),
        _or_dash(d.get("read_syscalls")),
        format_bytes(d["peak_rss_bytes"]) if d.get("peak_rss_bytes") else "-",
    )


class BenchView(Vertical):
    """Progress of the running trial, a live chart per strategy, and the results table."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.live: dict[int, LiveTrial] = {}
        self._generation = 0
        self.chart_of: dict[str, int] = {}  # strategy -> trial id on its chart
        self.current: int | None = None
        self._mmap_s: dict[str, float] = {}
        self._drawn: tuple[Any, int] | None = None
        #: Rows and the status line waiting for the next tick: a trial's end and the next
        #: one's start arrive together, and drawing each at once cost a frame apiece.
        self._pending_rows: list[Trial | dict[str, Any]] = []
        self._pending_status: str | None = None

    def compose(self) -> ComposeResult:
        yield Static("No trials yet: they start after the probes.", id="bench-status")
        yield ProgressBar(total=100, show_eta=False, id="trial-progress")
        yield VerticalScroll(id="charts")
        table: DataTable[str] = DataTable(id="results", cursor_type="row", zebra_stripes=True)
        yield table
        # The ranks' round and the user's own command (doctor --cmd), each as long as
        # the reports lay it out: scrolled within, at most half the view.
        with VerticalScroll(id="bench-extra"):
            yield Static("", id="ranks-summary")
            yield Static("", id="user-command")

    def on_mount(self) -> None:
        self.query_one("#results", DataTable).add_columns(*_COLUMNS)

    def reset(self) -> None:
        self._generation += 1
        self.live.clear()
        self.chart_of.clear()
        self.current = None
        self._mmap_s.clear()
        self._drawn = None
        self._pending_rows.clear()
        self._pending_status = None
        self.query_one("#charts", VerticalScroll).remove_children()
        table = self.query_one("#results", DataTable)
        table.clear(columns=True)
        table.add_columns(*_COLUMNS)  # trial by trial while a run goes
        self.query_one("#bench-status", Static).update("Waiting for the first trial.")
        self.query_one("#trial-progress", ProgressBar).update(total=100, progress=0)

    def _chart(self, strategy: str) -> RateChart:
        # Ids carry the reset's generation: the charts a reset removes go away only after
        # the next refresh (removal is asynchronous), and a finished run's charts drawn
        # into those were lost with them (the chart area went blank when a run ended).
        charts = self.query_one("#charts", VerticalScroll)
        name = f"chart-{self._generation}-{strategy}"
        found = charts.query(f"#{name}")
        if found:
            return found.first(RateChart)
        chart = RateChart(id=name)
        charts.mount(chart)
        return chart

    def trial_began(self, trial: Trial, index: int, total: int) -> None:
        label = f"{trial.strategy} {trial.cache}"
        self.live[trial.id] = LiveTrial(trial.id, label)
        self.chart_of[trial.strategy] = trial.id
        self.current = trial.id
        self._chart(trial.strategy)
        self._pending_status = f"trial {index + 1}/{total}: [b]{label}[/b] — starting a worker"

    def sample(
        self,
        trial_id: int,
        seconds: float,
        bytes_done: int,
        total_bytes: int,
        *,
        pid: int | None = None,
        major_faults: int | None = None,
        read_syscalls: int | None = None,
        read_bytes: int | None = None,
    ) -> None:
        lt = self.live.get(trial_id)
        if lt is None:
            return
        lt.points.append((seconds, bytes_done))
        lt.total_bytes = total_bytes
        lt.pid, lt.major_faults = pid, major_faults
        lt.read_syscalls, lt.read_bytes = read_syscalls, read_bytes

    def trial_ended(self, trial: Trial) -> None:
        lt = self.live.get(trial.id)
        if lt is not None:
            lt.done = True
            if trial.status == "ok" and trial.seconds:
                lt.note = f"{trial.seconds:.3g} s"
                if trial.series:
                    lt.points = deque((float(t), int(b)) for t, b in trial.series)
            else:
                lt.note = f"{trial.status}: {(trial.reason or '')[:50]}"
        self._pending_rows.append(trial)
        if self.current == trial.id:
            self.current = None

    def _add_row(self, trial: Trial | dict[str, Any]) -> None:
        d = _trial_dict(trial)
        secs = d.get("extrapolated_seconds") or d.get("seconds")
        x_mmap = ""
        if d.get("status") == "ok" and secs:
            if d["strategy"] == DEFAULT:
                self._mmap_s[d["cache"]] = secs
            base = self._mmap_s.get(d["cache"])
            x_mmap = f"{base / secs:.2f}x" if base else "-"
        self.query_one("#results", DataTable).add_row(*_trial_row(d, x_mmap))

    def show_ranks(self, ranks: dict[str, Any] | None) -> None:
        """The multi-rank trials of a report (independent vs broadcast vs sharded), or none."""
        self._show_section("#ranks-summary", ranks_section(ranks) if ranks else None)

    def show_user_command(self, doc: dict[str, Any]) -> None:
        """``doctor --cmd``: the user's own command timed, and with ``--profile`` its
        start-up by phase; or none."""
        self._show_section("#user-command", user_command_section(doc))

    def _show_section(self, box_id: str, section: Section | None) -> None:
        box = self.query_one(box_id, Static)
        box.display = section is not None
        extra = self.query_one("#bench-extra")
        extra.display = any(b.display for b in extra.query(Static))
        if section is None:
            box.update("")
            return
        # The same section the terminal, the Markdown and the HTML lay out, in the view's
        # own width (a scrollbar and padding inside the terminal's): a table laid out
        # for 80 columns wrapped its last column onto a line of its own.
        width = max(60, (box.content_size.width or self.app.size.width - 6))
        lines = [plain(section.title) + ":", *section_lines(section, indent=2, width=width)]
        box.update(Text("\n".join(lines)))

    def running_pid(self) -> int | None:
        lt = self.live.get(self.current) if self.current is not None else None
        return lt.pid if lt is not None and not lt.done else None

    def tick(self) -> None:
        """Push the model to the widgets (called at 5 Hz by the app, and at the end)."""
        for row in self._pending_rows:
            self._add_row(row)
        self._pending_rows.clear()
        if self._pending_status is not None:
            self.query_one("#bench-status", Static).update(self._pending_status)
            # A trial is starting (its worker forks, the cache is set up): no bytes yet,
            # so an indeterminate bar that moves, not a bar stuck at 0%.
            self.query_one("#trial-progress", ProgressBar).update(total=None, progress=0)
            self._pending_status = None
        # Redraw only what changed since the last tick: finished charts cost nothing.
        state = tuple(
            (tid, self.live[tid].points[-1] if self.live[tid].points else None, self.live[tid].done)
            for tid in self.chart_of.values()
        )
        width = self.query_one("#charts", VerticalScroll).size.width
        if (state, width) != self._drawn:
            self._drawn = (state, width)
            series: dict[str, Series] = {}
            for strategy, tid in self.chart_of.items():
                shown = self.live[tid]
                series[strategy] = Series(shown.label, list(shown.points), shown.done, shown.note)
            columns = plot_width(width - 2)
            scales = cache_scales(series.values(), columns)
            for strategy, s in series.items():
                chart = self._chart(strategy)
                chart.y_max = scales[s.label.rsplit(" ", 1)[-1]]
                chart.series = s
                chart.refresh()
        lt = self.live.get(self.current) if self.current is not None else None
        if lt is not None and lt.points:
            secs, done = lt.points[-1]
            rates = rates_from_progress(list(lt.points))
            now = rates[-1][1] if rates else 0.0  # over the last 1/60 of the trial so far
            total = max(lt.total_bytes, 1)
            avg_read = (
                format_bytes(lt.read_bytes / lt.read_syscalls)
                if lt.read_bytes and lt.read_syscalls
                else "-"
            )
            self.query_one("#bench-status", Static).update(
                f"[b]{lt.label}[/b] {format_bytes(done)} of {format_bytes(total)} in {secs:.2f} s,"
                f" {format_rate(now)} now · major faults {_or_dash(lt.major_faults)}"
                f" · read syscalls {_or_dash(lt.read_syscalls)}"
                f" · avg read {avg_read}"
            )
            self.query_one("#trial-progress", ProgressBar).update(
                total=total, progress=min(done, total)
            )

    def show(self, bench: dict[str, Any]) -> None:
        """A finished run (live or from a saved report): table and the charts from the series."""
        self.reset()
        for t in bench.get("trials") or []:
            if t.get("warmup"):
                continue
            lt = LiveTrial(t["id"], f"{t['strategy']} {t['cache']}", done=True)
            lt.points = deque((float(a), int(b)) for a, b in t.get("series") or [])
            lt.note = f"{t['seconds']:.3g} s" if t.get("seconds") else str(t.get("status"))
            self.live[t["id"]] = lt
        # The trial each strategy's chart draws: the HTML's too (report/bench_text.py).
        self.chart_of.update({name: t["id"] for name, t in charted_trials(bench).items()})
        # A finished run's table: the medians per strategy and cache state, the rows the
        # terminal's table and the Advice's figures come from (report/bench_text.py).
        table = self.query_one("#results", DataTable)
        table.clear(columns=True)
        table.add_columns(*TABLE_HEADER)
        for row in summary_rows(bench):
            table.add_row(*row, *([""] * (len(TABLE_HEADER) - len(row))))
        sample = bench.get("sample")
        note = ""
        if sample:
            note = (
                f" · sampled {format_bytes(sample['bytes'])}"
                f" of {format_bytes(sample['total_bytes'])},"
                " times (~) extrapolated to the whole model"
            )
        self.query_one("#bench-status", Static).update(
            Text(
                f"{len(self.live)} trials; the table: each strategy's median{note}"
                + "".join(f"\n{n}" for n in bench.get("notes") or [])
            )
        )
        self.tick()
        # A finished run: its bar full, not at the 0% of a trial about to start.
        self.query_one("#trial-progress", ProgressBar).update(total=100, progress=100)


# -- advice -------------------------------------------------------------------------------------


#: Recommendations the app can apply itself, and what the key does.
APPLICABLE = {
    fix_ids.PREWARM: "warm the page cache now (loadscope warm)",
    fix_ids.COPY_TO_LOCAL_DISK: "copy the model now (loadscope copy)",
}


class AdviceView(Vertical):
    """The verdict, the ranked recommendations, and the highlighted one in full."""

    def compose(self) -> ComposeResult:
        yield Static("The advice appears when the trials are done.", id="verdict")
        yield OptionList(id="recs")
        yield Static("", id="apply-status")
        yield ProgressBar(total=100, show_eta=True, id="apply-progress")
        yield VerticalScroll(Static("", id="rec-detail"), id="rec-scroll")

    def on_mount(self) -> None:
        self.recommendations: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def show(self, doc: dict[str, Any]) -> None:
        verdict = doc.get("verdict") or {}
        status = verdict.get("status", "?")
        style, fallback = {
            "healthy": ("success", "green"),
            "unmeasured": ("error", "red"),
        }.get(status, ("warning", "yellow"))
        color = theme_color(self, style, fallback)
        text = Text()
        text.append(f" {status.upper()} ", style=f"bold reverse {color}")
        text.append(f" {verdict.get('headline', '')}")
        self.query_one("#verdict", Static).update(text)
        self.recommendations = list(doc.get("recommendations") or [])
        self.notes = list(doc.get("notes") or [])
        recs = self.query_one("#recs", OptionList)
        recs.clear_options()
        for fix in fixes({"recommendations": self.recommendations}):
            recs.add_option(Option(fix.heading, id=fix.id))
        if self.recommendations:
            recs.highlighted = 0
            self._detail(0)
        else:
            self.query_one("#rec-detail", Static).update(
                Text(
                    "No recommendation: " + ("; ".join(self.notes) or "nothing measured to act on")
                )
            )

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option_list.id == "recs" and event.option_index is not None:
            self._detail(event.option_index)

    def applying(self, what: str | None, done: int = 0, total: int = 0) -> None:
        """Show (or hide, with None) a fix being applied and its progress."""
        status = self.query_one("#apply-status", Static)
        bar = self.query_one("#apply-progress", ProgressBar)
        status.display = bar.display = what is not None
        if what is None:
            return
        status.update(Text(what))
        bar.update(total=max(total, 1), progress=min(done, max(total, 1)))

    def applied(self, text: str) -> None:
        """The outcome of the last fix, in place of its progress."""
        status = self.query_one("#apply-status", Static)
        status.display = True
        self.query_one("#apply-progress", ProgressBar).display = False
        status.update(Text(text))

    def highlighted(self) -> dict[str, Any] | None:
        idx = self.query_one("#recs", OptionList).highlighted
        return self.recommendations[idx] if idx is not None and self.recommendations else None

    def _detail(self, index: int) -> None:
        fix = fixes({"recommendations": self.recommendations})[index]
        out = Text()
        out.append(fix.heading + "\n", style="bold")
        code_style = theme_color(self, "text-success", "green")
        for block in fix_blocks(fix):
            out.append_text(block_text(block, code_style))
        for route in route_sections(fix):
            out.append(plain(route.title) + ":\n", style="bold")
            for block in route.blocks:
                out.append_text(block_text(block, code_style))
        if self.notes:
            out.append("notes:\n", style="bold")
            for n in self.notes:
                out.append(f"  • {n}\n")
        out.append("press c to copy the snippets (OSC 52: works over SSH)", style="dim")
        if fix.id in APPLICABLE:
            out.append(f"; a to {APPLICABLE[fix.id]} (asks first)", style="dim")
        self.query_one("#rec-detail", Static).update(out)
