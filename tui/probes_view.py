"""The app's probes view (``loadscope.tui.probes_view``), drawn from a probe report dict.

The storage class and its evidence, the devices, cold read latency, throughput by
request size and by readers, memory, page-cache residency and the local disks: each
a small function from the probe JSON (``to_dict``) to text or bars, so a live run
and a saved report draw the same.

Owns: :class:`ProbesView` and its :class:`BarChart`.
May import: the core's units (``loadscope.base.units``), the probes' registry (each
registered probe's lines: ``loadscope.probes.registry``), their text
(``loadscope.report.probe_text``), the charts; nothing else of the app.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from loadscope.base.units import format_bytes, format_rate, format_us
from loadscope.probes.registry import block_lines
from loadscope.report.probe_text import latency_text
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


def _result_line(name: str, result: dict[str, Any]) -> str:
    return f"{name}: {result.get('status')}: {result.get('reason') or ''}"


def _labelled(label: str, text: str) -> Text:
    return Text.assemble((label, "bold"), " ", text)


def _storage_lines(file: dict[str, Any]) -> list[Text]:
    """The first file's storage: its class and mount, read-ahead, FUSE and disks."""
    lines: list[Text] = []
    m = file.get("mount", {})
    if m.get("status") == "ok":
        lines.append(
            Text.assemble(
                ("storage", "bold"),
                " ",
                (f" {m.get('storage_class')} ", "reverse"),
                f" {m.get('reason')}",
            )
        )
        lines.append(Text(f"  mount {m.get('mount_point')} ({m.get('fstype')}, {m.get('source')})"))
        if m.get("resolved_class"):
            lines.append(Text(f"  under the overlay: {m['resolved_class']}"))
    else:
        lines.append(Text(_result_line("storage", m)))
    bdi = file.get("bdi", {})
    if bdi.get("read_ahead_kb") is not None:
        lines.append(Text(f"  read_ahead_kb {bdi['read_ahead_kb']} ({bdi.get('path')})"))
    fuse = file.get("fuse_connection", {})
    if fuse.get("status") == "ok":
        lines.append(
            Text(
                f"  FUSE max_background {fuse.get('max_background')},"
                f" congestion {fuse.get('congestion_threshold')}"
            )
        )
    for disk in file.get("device", {}).get("disks") or []:
        lines.append(
            Text(
                f"  disk {disk.get('name')}: {disk.get('transport')},"
                f" {disk.get('model') or 'no model string'}"
            )
        )
    return lines


def summary_lines(probe: dict[str, Any]) -> list[Text]:
    """The summary: the target, its storage, the cold read latency."""
    t = probe.get("target", {})
    lines = [
        _labelled(
            "target",
            f"{t.get('spec')} — {t.get('files')} file(s),"
            f" {format_bytes(t.get('total_bytes') or 0)}",
        )
    ]
    files = probe.get("files") or []
    if files:
        lines.extend(_storage_lines(files[0]))
    lat = probe.get("latency", {})
    if lat.get("status") == "ok":
        lines.append(_labelled("latency", latency_text(lat)))
    else:
        lines.append(Text(_result_line("latency", lat)))
    return lines


def latency_bars(probe: dict[str, Any]) -> tuple[Bar, ...]:
    """The cold 4 KiB read latency percentiles, when the latency probe ran."""
    lat = probe.get("latency", {})
    if lat.get("status") != "ok":
        return ()
    return tuple(
        Bar(q, lat[f"{q}_us"], format_us(lat[f"{q}_us"]))
        for q in ("p50", "p90", "p99")
        if lat.get(f"{q}_us") is not None
    )


def throughput_bars(probe: dict[str, Any]) -> tuple[tuple[Bar, ...], tuple[Bar, ...]]:
    """Cold throughput by request size (one reader), and by parallel readers."""
    thr = probe.get("throughput", {})
    by_block = tuple(
        Bar(format_bytes(p["block_bytes"]), p["bytes_per_s"], format_rate(p["bytes_per_s"]))
        for p in thr.get("sequential") or []
    )
    by_readers = tuple(
        Bar(f"{p['readers']} readers", p["bytes_per_s"], format_rate(p["bytes_per_s"]))
        for p in thr.get("parallel") or []
    )
    return by_block, by_readers


def memory_bars(probe: dict[str, Any]) -> tuple[Bar, ...]:
    """The model's size beside the available RAM and the cgroup's limit."""
    sysr = probe.get("system", {})
    model = probe.get("target", {}).get("total_bytes") or 0
    mem: list[Bar] = [Bar("model", model, format_bytes(model))]
    if sysr.get("status") == "ok":
        avail = sysr.get("ram_available_bytes") or 0
        mem.append(Bar("available", avail, format_bytes(avail)))
        limit = (sysr.get("cgroup") or {}).get("limit_bytes")
        if limit:
            mem.append(Bar("cgroup limit", limit, format_bytes(limit)))
    return tuple(mem)


def cache_lines(probe: dict[str, Any]) -> list[Text]:
    """Page-cache residency per file, then the probe's notes."""
    files = probe.get("files") or []
    lines = [_labelled("page cache", "residency per file, before probing")]
    for f in files[:SHOWN_FILES]:
        r = f.get("residency", {})
        frac = r.get("fraction")
        shown = (
            f"{frac:.0%}" if frac is not None else f"unknown ({r.get('reason') or r.get('note')})"
        )
        lines.append(Text(f"  {shown:>5}  {f.get('path')}"))
    if len(files) > SHOWN_FILES:
        lines.append(Text(f"  ... and {len(files) - SHOWN_FILES} more"))
    for note in probe.get("notes") or []:
        lines.append(_labelled("note", str(note)))
    return lines


def registered_lines(probe: dict[str, Any]) -> list[Text]:
    """Each registered probe (``probes/registry.py``: the local disks, the HF cache, the
    GPUs, a plugin's own) under its title: its lines, or why it did not run."""
    lines: list[Text] = []
    for spec, found in block_lines(probe):
        lines.append(Text(spec.title, style="bold"))
        lines += [_labelled(label, text) for label, text in found]
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
        # Text objects, not markup: paths and reasons may hold brackets.
        self.query_one("#probe-summary", Static).update(Text("\n").join(summary_lines(probe)))
        self.query_one("#latency", BarChart).bars = latency_bars(probe)
        by_block, by_readers = throughput_bars(probe)
        self.query_one("#by-block", BarChart).bars = by_block
        self.query_one("#by-readers", BarChart).bars = by_readers
        self.query_one("#memory", BarChart).bars = memory_bars(probe)
        self.query_one("#probe-cache", Static).update(Text("\n").join(cache_lines(probe)))
        registered = Text("\n").join(registered_lines(probe))
        self.query_one("#probe-registered", Static).update(registered)
