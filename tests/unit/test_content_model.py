"""One content model, four renderers (issue 39 item 3): a report's fixes rendered for the
terminal, as Markdown, as HTML and in the app's Advice view show the same numbers in the
same order, because each only lays out the blocks ``report/content.py`` builds once."""

from __future__ import annotations

import asyncio
import html
import json
import re
from pathlib import Path
from typing import Any

from loadscope.diagnosis.doctor_report import advice_lines
from loadscope.report import html as html_report
from loadscope.report import markdown
from loadscope.report.content import fix_sections, fixes

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "doctor_emulated.json"
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(GOLDEN.read_text())
    return doc


def _text(doc: dict[str, Any]) -> str:
    """The terminal's fixes: between the verdict and the notes."""
    lines = advice_lines(doc)[2:]
    notes = next((i for i, line in enumerate(lines) if line.startswith("note: ")), len(lines))
    return "\n".join(lines[:notes])


def _markdown(doc: dict[str, Any]) -> str:
    return "\n".join(line for s in fix_sections(doc) for line in markdown.render_section(s))


def _html(doc: dict[str, Any]) -> str:
    page = "\n".join(part for s in fix_sections(doc) for part in html_report.render_section(s))
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _app(doc: dict[str, Any]) -> str:
    from textual.app import App, ComposeResult
    from textual.widgets import OptionList, Static

    from loadscope.tui.views import AdviceView

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield AdviceView()

    async def drive() -> list[str]:
        app = One()
        shown = []
        async with app.run_test(size=(100, 40)) as pilot:
            view = app.query_one(AdviceView)
            view.show(doc)
            for i in range(len(view.recommendations)):
                app.query_one("#recs", OptionList).highlighted = i
                await pilot.pause()
                detail = str(app.query_one("#rec-detail", Static).render())
                # The fix itself; the report's notes and the keys follow it in the view.
                shown.append(re.split(r"\nnotes:\n|press c to copy", detail)[0])
        return shown

    return "\n".join(asyncio.run(drive()))


def test_the_four_renderings_of_the_fixes_show_the_same_numbers_in_the_same_order() -> None:
    doc = _doc()
    assert len(fixes(doc)) >= 2  # a report with several fixes, several routes
    want = [n for f in fixes(doc) for n in _numbers(f.heading)]
    text, md, page, app = _text(doc), _markdown(doc), _html(doc), _app(doc)
    numbers = _numbers(text)
    assert numbers, text
    assert _numbers(md) == numbers, (md, text)
    assert _numbers(page) == numbers
    assert _numbers(app) == numbers
    # Each fix's heading numbers come in its order in every one.
    it = iter(numbers)
    assert all(n in it for n in want)


def test_the_top_fix_is_open_and_the_others_folded() -> None:
    found = fix_sections(_doc())
    assert [s.collapsed for s in found][:2] == [False, True]
    assert found[0].children and "```" in "\n".join(markdown.render_section(found[0]))


def test_a_fixs_gain_says_how_it_was_obtained_where_not_whole_steady_loads() -> None:
    """A sampled fit's number is "estimated ±E%" in every output, as in the verdict (the
    fix line of the one-screen answer said a bare "10.5x" under an "(estimated)" verdict)."""
    doc = _doc()
    doc["recommendations"][0].update(expected_speedup=10.46, how="estimated ±12%")
    doc["recommendations"][1].update(expected_speedup=2.0, measured=False)
    first, second = fixes(doc)[:2]
    assert first.heading.endswith("— 10.5x estimated ±12%")
    assert second.gain == "2.0x estimated"
