"""The trials' charts are one model (issue 50, item 2): the app's rate chart of each
strategy and the HTML's bytes-over-time chart draw the same trial of it
(``report/bench_text.charted_trials``), from a saved report."""

from __future__ import annotations

import json
import re
from typing import Any

from loadscope.report.bench_text import charted_trials
from loadscope.report.html import to_html
from loadscope.tui.app import LoadscopeApp
from loadscope.tui.views import BenchView
from tests.tui.harness import GOLDEN, drive


def test_the_app_and_the_html_chart_the_same_trial_of_each_strategy() -> None:
    doc = json.loads(GOLDEN.read_text())
    charted = charted_trials(doc["bench"])
    cold = {n: t for n, t in charted.items() if t["cache"] == "cold" and t["status"] == "ok"}
    assert cold, "the golden report has cold trials"
    for name, trial in cold.items():
        # The first timed cold trial that completed, of its strategy.
        first = next(
            t
            for t in doc["bench"]["trials"]
            if t["strategy"] == name and t["cache"] == "cold" and t["status"] == "ok"
            if not t.get("warmup")
        )
        assert trial["id"] == first["id"]
    page = to_html(doc)
    chart = page[page.index("bytes loaded over time") :]
    chart = chart[: chart.index("</svg>")]
    assert set(re.findall(r"<text[^>]*>([\w.-]+)</text>", chart)) >= set(cold)
    seen: dict[str, int] = {}

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        await pilot.pause()
        seen.update(app.query_one(BenchView).chart_of)

    drive(steps, report=str(GOLDEN))
    assert seen == {name: t["id"] for name, t in charted.items()}
