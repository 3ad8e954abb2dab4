"""The probes' figures are one content (issue 50): the terminal (``loadscope probe``,
``doctor --details``, ``report --text``), the Markdown, the HTML and the app lay out
the same blocks (``report/probe_text.py``), so they show the same numbers; the
terminal's lines are the doctor's probe block as it read before the change."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from loadscope.base.units import format_rate
from loadscope.report import html as html_report
from loadscope.report.markdown_blocks import render_section
from loadscope.report.probe_text import probe_blocks
from loadscope.report.sections import probe_best_read, sections
from loadscope.report.text import blocks_text

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GOLDEN / "doctor_current.json").read_text())
    return doc


def _numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def test_the_terminal_lines_are_the_doctors_probe_block_as_it_was() -> None:
    """``doctor --details``' probe block of the same run, saved before the probe lines
    were made content (trailing spaces of the bars aside)."""
    want = (GOLDEN / "doctor_details_probe.txt").read_text().rstrip("\n")
    got = "\n".join(blocks_text(probe_blocks(_doc()["probe"])))
    assert got == want


def test_the_probe_figures_are_the_same_in_the_four_renderers() -> None:
    from loadscope.tui.probes_view import ProbesView, probe_content
    from tests.tui.harness import in_a_view

    doc = _doc()
    (storage,) = [s for s in sections(doc) if s.id == "storage"]
    text = "\n".join(blocks_text(storage.blocks))
    md = "\n".join(render_section(storage))
    page = html.unescape(re.sub(r"<[^>]+>", " ", "\n".join(html_report.render_section(storage))))
    numbers = _numbers(text)
    best = format_rate(probe_best_read(doc["probe"]) or 0)  # the best parallel read
    assert len(numbers) > 40 and _numbers(best)[0] in numbers, (best, text)
    assert _numbers(md) == numbers
    assert _numbers(page) == numbers

    # The app: the same rows and bars (captions between its charts are the charts'
    # titles), drawn in a view of 100 columns.
    content = probe_content(doc["probe"])
    rows = [*content.summary, *content.rest]
    shown_figures = [
        *(n for _, row in rows for n in _numbers(row)),
        *(n for bar in (*content.by_block, *content.by_readers) for n in _numbers(bar.text)),
    ]

    async def steps(app: Any, pilot: Any) -> str:
        app.query_one(ProbesView).show(doc["probe"])
        await pilot.pause()
        return "\n".join(str(w.render()) for w in app.query("ProbesView Static, BarChart"))

    # The HTML's charts draw the same bars, each figure beside its bar.
    charts = html_report.to_html(doc).split("<svg")[1:]
    for bar in (*content.by_block, *content.by_readers):
        assert any(f">{html.escape(bar.text)}</text>" in chart for chart in charts), bar

    shown = _numbers(in_a_view(ProbesView(id="probes"), steps, size=(100, 80)))
    for figure in shown_figures:
        assert figure in shown, figure
    assert set(shown_figures) <= set(numbers)


def test_a_table_row_that_says_why_spans_the_columns_after_its_name() -> None:
    """A strategy with no figures says why in its third cell; on a terminal the reason
    sized the median column (80 characters wide) and pushed the figures off the line."""
    from loadscope.report.content import Table

    reason = "failed: its worker died with SIGKILL (out of memory?) after 3.2 s"
    table = Table(
        ("strategy", "cache", "median", "rate", "x mmap"),
        (("mmap", "cold", "3.2s", "84 MB/s", "1.00x"), ("api", "cold", reason, "", "")),
    )
    lines = blocks_text([table])
    assert lines[0].split() == ["strategy", "cache", "median", "rate", "x", "mmap"]
    assert lines[2] == "mmap      cold     3.2s  84 MB/s   1.00x"  # not pushed right
    assert lines[3].startswith("api       cold   failed: its worker died") and len(lines) == 5
    assert max(map(len, lines)) <= 80
