"""One content model, four renderers (issue 39 item 3): a report's fixes rendered for the
terminal, as Markdown, as HTML and in the app's Advice view show the same numbers in the
same order, because each only lays out the blocks ``report/content.py`` builds once."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from loadscope.diagnosis.doctor_report import advice_lines
from loadscope.report import html as html_report
from loadscope.report import markdown
from loadscope.report.content import Code, Table, fix_sections, fixes
from tests.tui.harness import in_a_view

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "doctor_emulated.json"
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _numbers(text: str) -> list[str]:
    return NUMBER.findall(text)


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(GOLDEN.read_text())
    return doc


def _text(doc: dict[str, Any]) -> str:
    """The terminal's fixes: between the verdict and the notes."""
    lines = advice_lines(doc)
    lines = lines[lines.index("") + 1 :]  # after the verdict
    notes = next((i for i, line in enumerate(lines) if line.startswith("note: ")), len(lines))
    return "\n".join(lines[:notes])


def _markdown(doc: dict[str, Any]) -> str:
    return "\n".join(line for s in fix_sections(doc) for line in markdown.render_section(s))


def _html(doc: dict[str, Any]) -> str:
    page = "\n".join(part for s in fix_sections(doc) for part in html_report.render_section(s))
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def _app(doc: dict[str, Any]) -> str:
    from textual.widgets import OptionList, Static

    from loadscope.tui.views import AdviceView

    async def steps(app: Any, pilot: Any) -> list[str]:
        view = app.query_one(AdviceView)
        view.show(doc)
        shown = []
        for i in range(len(view.recommendations)):
            app.query_one("#recs", OptionList).highlighted = i
            await pilot.pause()
            detail = str(app.query_one("#rec-detail", Static).render())
            # The fix itself; the report's notes and the keys follow it in the view.
            shown.append(re.split(r"\nnotes:\n|press c to copy", detail)[0])
        return shown

    return "\n".join(in_a_view(AdviceView(), steps))


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


def _evidence_doc() -> dict[str, Any]:
    """A report with the sections the terminal lays out from the content model: the user's
    command, a conversion trial, a multi-rank round and a failed step."""
    doc = _doc()
    doc["user_command"] = {
        "argv": ["python", "load.py", "{model}"],
        "total_bytes": 1 << 30,
        "variants": [
            {"name": "as-is", "median_seconds": 4.25, "changes": "nothing", "runs": []},
            {"name": "warm", "median_seconds": 0.75, "changes": "the page cache", "runs": []},
            {"name": "copy", "skipped": "no local disk with room", "runs": []},
        ],
    }
    doc["conversion"] = {
        "source": "/m/pytorch_model.bin",
        "sample_bytes": 64 << 20,
        "pickle_cold_s": 2.5,
        "safetensors_cold_s": 0.625,
        "verified": True,
    }
    summary = {
        "trials": 2, "min_seconds": 1.0, "max_seconds": 2.0, "first_run_seconds": None,
        "storage_amplification": 1.0, "peak_rss_bytes_total": 3 << 30,
        "rss_delta_bytes_total": 2 << 30,
    }  # fmt: skip
    doc["ranks"] = {
        "target": {"spec": "/m", "files": 1},
        "options": {"ranks": 4, "backend": "gloo", "device": "cpu", "repeats": 2},
        "model_bytes": 1 << 30,
        "tensors": 10,
        "summary": [
            {
                **summary,
                "mode": "independent",
                "cache": "cold",
                "median_seconds": 3.5,
                "median_bytes_per_s": 3.07e8,
                "speedup_vs_independent": 1.0,
                "read_amplification": 4.0,
            },
            {
                **summary,
                "mode": "broadcast-async",
                "cache": "cold",
                "median_seconds": 1.75,
                "median_bytes_per_s": 6.14e8,
                "speedup_vs_independent": 2.0,
                "read_amplification": 1.0,
            },
        ],
        "trials": [],
        "skipped": {"sharded": "not enough memory for 4 copies"},
        "failures": [],
        "notes": [],
    }
    doc["failures"] = ["fio: skipped: not installed"]
    return doc


def test_the_evidence_sections_show_the_same_numbers_in_the_terminal_markdown_and_html() -> None:
    """The user's command, the conversion, the ranks and the failed steps: one content
    each, laid out by the terminal's full report (doctor --details) as by the Markdown and
    the HTML (the terminal's ranks table had other columns, and no conversion at all)."""
    from loadscope.diagnosis.doctor_report import section_text
    from loadscope.report.sections import sections

    doc = _evidence_doc()
    ids = ("user-command", "conversion", "ranks", "failures")
    shared = [s for s in sections(doc) if s.id in ids]
    assert [s.id for s in shared] == list(ids)
    text = "\n".join(line for s in shared for line in section_text(s))
    md = "\n".join(line for s in shared for line in markdown.render_section(s))
    page = "\n".join(part for s in shared for part in html_report.render_section(s))
    page = html.unescape(re.sub(r"<[^>]+>", " ", page))
    numbers = _numbers(text)
    for figure in ("4.25", "0.75", "5.67", "2.5", "0.625", "4.0", "3.5", "1.75", "2.00"):
        assert figure in numbers, (figure, text)
    assert _numbers(md) == numbers, (md, text)
    assert _numbers(page) == numbers
    assert "not enough memory for 4 copies" in text and "not installed" in text
    assert max(map(len, text.splitlines())) <= 80, text


def test_the_app_shows_the_ranks_with_the_numbers_the_reports_show() -> None:
    """The app's Benchmark view had a ranks table of its own (fewer columns, other
    rounding); it lays out the same section now."""
    from textual.widgets import Static

    from loadscope.report.rank_text import ranks_section
    from loadscope.report.text import section_lines
    from loadscope.tui.views import BenchView

    ranks = _evidence_doc()["ranks"]
    md = "\n".join(markdown.render_section(ranks_section(ranks)))

    async def steps(app: Any, pilot: Any) -> str:
        app.query_one(BenchView).show_ranks(ranks)
        await pilot.pause()
        return str(app.query_one("#ranks-summary", Static).render())

    shown = in_a_view(BenchView(), steps)
    section = ranks_section(ranks)
    text = "\n".join([section.title, *section_lines(section)])
    assert _numbers(shown) == _numbers(md) == _numbers(text)
    assert "broadcast-async" in shown and "2.00x" in shown


def test_the_trial_table_shows_the_same_numbers_in_the_terminal_markdown_html_and_app() -> None:
    """The Markdown and HTML trial table had seed 004's columns alone (trials, first run,
    min-max and the median peak RSS) where the terminal and the app showed one steady
    trial's counters and its RSS: two RSS figures for one row. Now every one lays out
    the same rows; the reports add the spread in three columns after them."""
    from textual.widgets import DataTable

    from loadscope.report.bench_text import TABLE_HEADER, summary_rows
    from loadscope.report.sections import sections
    from loadscope.tui.views import BenchView

    doc = _doc()
    (trials,) = [s for s in sections(doc) if s.id == "trials"]
    shared = len(TABLE_HEADER)
    table = next(b for b in trials.blocks if isinstance(b, Table))
    assert table.header[:shared] == TABLE_HEADER
    terminal = [_numbers(" ".join(r)) for r in summary_rows(doc["bench"])]
    md_rows = [
        line.split("|")[1 : shared + 1]
        for line in markdown.render_section(trials)
        if line.startswith("| `")
    ]
    page = "\n".join(html_report.render_section(trials))
    html_rows = [re.findall(r"<td>(.*?)</td>", row)[:shared] for row in page.split("<tr>")[2:]]

    async def steps(app: Any, pilot: Any) -> list[list[str]]:
        app.query_one(BenchView).show(doc["bench"])
        await pilot.pause()
        grid = app.query_one("#results", DataTable)
        return [[str(c) for c in grid.get_row_at(i)] for i in range(grid.row_count)]

    app_rows = in_a_view(BenchView(), steps, size=(120, 40))
    assert terminal and len(terminal) == len(md_rows) == len(html_rows) == len(app_rows)
    for text, md, page_row, shown in zip(terminal, md_rows, html_rows, app_rows, strict=True):
        assert _numbers(" ".join(md)) == text, (md, text)
        assert _numbers(html.unescape(" ".join(page_row))) == text
        assert _numbers(" ".join(shown)) == text


def test_a_saved_report_as_text_lays_out_every_section_the_markdown_has() -> None:
    """``loadscope report --text``: the whole report for a terminal from the same content
    (it rendered Markdown or HTML only); every number kept, within 80 columns but for
    code to paste (a table too wide is split in two: its rows' later cells come after)."""
    from loadscope.diagnosis.doctor_report import report_text
    from loadscope.report.sections import sections

    stacks = json.loads((GOLDEN.parent / "doctor_stacks.json").read_text())
    for doc in (_evidence_doc(), stacks):  # the second: routes per stack, long titles
        _laid_out_whole(doc, report_text(doc), sections(doc))


def _laid_out_whole(doc: dict[str, Any], text: str, found: list[Any]) -> None:
    md = "\n".join(line for s in found for line in markdown.render_section(s))
    want = _numbers(doc["verdict"]["headline"]) + _numbers(md)
    assert sorted(_numbers(text)) == sorted(want)
    code = {
        line.strip()
        for s in found
        for b in s.blocks
        if isinstance(b, Code)
        for line in b.text.splitlines()
    }
    code |= {line.strip() for f in fixes(doc) for r in f.routes for line in r.code.splitlines()}
    long = [line for line in text.splitlines() if len(line) > 80 and line.strip() not in code]
    assert not long, long
    assert text.count("strategy  ") >= 2  # the trial table, split in two


def test_a_report_missing_any_part_still_renders_as_text_as_markdown_does() -> None:
    """A report read back may lack a part (an older loadscope's, a run stopped early): the
    text says what there is, as the Markdown does, never a traceback."""
    from loadscope.diagnosis.doctor_report import report_text
    from loadscope.report.schema import SchemaError, check

    for name in ("doctor_emulated", "doctor_report", "doctor_stacks"):
        whole = json.loads((GOLDEN.parent / f"{name}.json").read_text())
        for key in whole:
            doc = {k: v for k, v in whole.items() if k != key}
            try:
                check(doc, "doctor")
            except SchemaError:
                continue  # refused on reading, before any renderer
            assert markdown.to_markdown(doc) and report_text(doc), (name, key)
            for part in ("probe", "bench"):
                if isinstance(doc.get(part), dict):
                    for inner in list(doc[part]):
                        trimmed = {**doc, part: {k: v for k, v in doc[part].items() if k != inner}}
                        assert report_text(trimmed), (name, key, part, inner)
