"""The app's reports (``loadscope.tui.report_actions``): a report shown in the three tabs,
and the saved ones: opened, exported, compared; the screenshots.

:class:`ReportActions` is the app's base class (``loadscope.tui.app.LoadscopeApp``
extends it): these actions read and set the state the app keeps (the report shown, the
model it is about, the request ``r`` re-runs) and nothing else of it.

Owns: what the app does with a report as a whole, live or saved.
May import: ``loadscope.diagnosis.doctor`` (loading a saved report),
``loadscope.diagnosis.session`` (the request a report's model re-runs as),
``loadscope.report.compare``, ``loadscope.report.store``, ``loadscope.base.errors``, the
app's views, screens, files and actions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App

from loadscope.base.errors import LoadscopeError
from loadscope.diagnosis.doctor import load_report
from loadscope.diagnosis.session import SessionRequest
from loadscope.report.compare import compare, row_of
from loadscope.report.store import last, reports_dir
from loadscope.tui.actions import switch_tab
from loadscope.tui.probes_view import ProbesView
from loadscope.tui.report_files import export_report, save_screenshot
from loadscope.tui.screens import CompareScreen, PromptScreen
from loadscope.tui.views import AdviceView, BenchView


class ReportActions(App[int]):
    """The report shown, and the saved reports' actions (the app's base class)."""

    #: The report shown (a finished run's, or one opened), None before either.
    report: dict[str, Any] | None
    running: bool
    last_request: SessionRequest | None
    budget_s: float
    synth_dir: str | None
    stacks: tuple[str, ...]
    #: The model the shown report is about, as the user named it (for the fixes).
    _source_spec: str

    def action_export(self) -> None:
        if self.report is None:
            return

        def chosen(path: str | None) -> None:
            if path:
                self.export(path)

        self.push_screen(
            PromptScreen(
                "Export the report",
                "A path ending in .json, .md or .html:",
                "loadscope-report.html",
            ),
            chosen,
        )

    def export(self, path: str) -> Path | None:
        assert self.report is not None
        return export_report(self, self.report, path)

    def action_open_report(self) -> None:
        def chosen(path: str | None) -> None:
            if path:
                self.open_report(path)

        newest = last()  # the newest kept report, ready to open with Enter
        self.push_screen(
            PromptScreen(
                "Open a saved report",
                f"Path of a doctor JSON report (kept ones are in {reports_dir()}):",
                str(newest) if newest else "",
            ),
            chosen,
        )

    def open_report(self, path: str) -> None:
        try:
            doc = load_report(str(Path(path).expanduser()))
        except LoadscopeError as exc:
            self.notify(str(exc), severity="error")
            return
        self.show_report(doc)
        self._source_spec = str((doc.get("target") or {}).get("spec", ""))
        self.sub_title = f"report {Path(path).name}"
        if self._source_spec and not self.running:
            # ``r`` re-runs what is on screen: this report's model, not the session's.
            self.last_request = SessionRequest(
                self._source_spec, self.budget_s, None, self.synth_dir, stacks=self.stacks
            )

    def deliver_screenshot(
        self, filename: str | None = None, path: str | None = None, time_format: str | None = None
    ) -> str | None:
        """The palette's Screenshot, saved where the user can find it: the given folder,
        else ~/Downloads when it exists, else the working directory; the path or the
        reason it could not be written is said (Textual's default folder is ~/Downloads,
        absent on most servers, and its failure gives no reason)."""
        return save_screenshot(self, filename, path)

    def action_compare(self) -> None:
        def chosen(text: str | None) -> None:
            if text:
                self.compare(text.split())

        self.push_screen(
            PromptScreen("Compare reports", "Two or more JSON report paths, separated by spaces:"),
            chosen,
        )

    def compare(self, paths: list[str]) -> None:
        try:
            rows = compare([row_of(p, load_report(str(Path(p).expanduser()))) for p in paths])
        except LoadscopeError as exc:
            self.notify(str(exc), severity="error")
            return
        self.push_screen(CompareScreen(rows))

    def show_report(self, doc: dict[str, Any], *, live: bool = False) -> None:
        self.report = doc
        self.query_one(ProbesView).show(doc.get("probe"))
        if doc.get("bench"):
            self.query_one(BenchView).show(doc["bench"])
        self.query_one(BenchView).show_ranks(doc.get("ranks"))
        self.query_one(BenchView).show_user_command(doc)
        self.query_one(AdviceView).show(doc)
        if not live:
            switch_tab(self, "advice")
        self.sub_title = doc["verdict"]["status"]
        self.refresh_bindings()
