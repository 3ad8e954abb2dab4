"""``loadscope report``: its arguments and what runs it."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.common import Command, UsageError, opt


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.report.html import to_html
    from loadscope.report.markdown import to_markdown

    given = [f"--{k}" for k in ("md", "html", "text") if getattr(args, k)]
    if len(given) > 1:
        named = f"{', '.join(given[:-1])} and {given[-1]}"
        raise UsageError(f"{named}: pick one (Markdown is the default)")
    if (args.file is None) == (not args.last):
        raise UsageError(
            "give FILE.json or --last (the newest report doctor, demo and the app kept)"
        )
    path = args.file
    if args.last:
        from loadscope.report.store import last, reports_dir

        found = last()
        if found is None:
            raise UsageError(
                f"--last: no report kept in {reports_dir()} yet (run loadscope doctor)"
            )
        path = str(found)
    from loadscope.diagnosis.doctor import load_report
    from loadscope.diagnosis.doctor_report import report_text

    doc = load_report(path, "any")
    if doc.get("kind") == "time":
        out.write(_time_text(doc, args) + "\n")
        return ExitCode.OK
    render = to_html if args.html else report_text if args.text else to_markdown
    out.write(render(doc) + "\n")
    return ExitCode.OK


def _time_text(doc: dict[str, Any], args: argparse.Namespace) -> str:
    """A ``time --json`` report as ``time`` printed it: the same medians and ratios (in a
    code block for Markdown, a preformatted page for HTML)."""
    import html

    from loadscope.diagnosis.timing import TimeReport
    from loadscope.diagnosis.timing_text import to_text

    text = to_text(TimeReport.from_dict(doc))
    if args.text:
        return text
    if args.html:
        return (
            '<!doctype html><html><head><meta charset="utf-8"><title>loadscope time</title>'
            f"</head><body><pre>{html.escape(text)}</pre></body></html>"
        )
    return f"```text\n{text}\n```"


COMMAND = Command(
    name="report",
    help="render a saved doctor or time report (JSON) again: Markdown, HTML or text",
    description="Render FILE.json written by 'doctor --json' or 'time --json' (or, with"
    " --last, the newest"
    " report doctor, demo and the app kept in the reports folder) as Markdown for an issue,"
    " as HTML, or as text for the terminal.",
    arguments=(
        opt("file", metavar="FILE.json", nargs="?", help="a saved report; - reads standard input"),
        opt(
            "--last",
            action="store_true",
            help="the newest report doctor, demo and the app kept in the reports folder"
            " ($LOADSCOPE_REPORTS, else $XDG_STATE_HOME/loadscope/reports or"
            " ~/.local/state/loadscope/reports)",
        ),
        opt("--md", action="store_true", help="Markdown (the default)"),
        opt("--html", action="store_true", help="self-contained HTML instead"),
        opt(
            "--text",
            action="store_true",
            help="the whole report as text for a terminal, in 80 columns (the same sections)",
        ),
    ),
    run=run,
)
