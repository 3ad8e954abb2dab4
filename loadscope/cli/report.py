"""``loadscope report``: its arguments and what runs it."""

from __future__ import annotations

import argparse
from typing import TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.common import Command, UsageError, opt
from loadscope.diagnosis.doctor import load_report
from loadscope.diagnosis.doctor_report import report_text


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
    doc = load_report(path)
    render = to_html if args.html else report_text if args.text else to_markdown
    out.write(render(doc) + "\n")
    return ExitCode.OK


COMMAND = Command(
    name="report",
    help="render a saved doctor report (JSON) again: Markdown, HTML or text",
    description="Render FILE.json written by 'doctor --json' (or, with --last, the newest"
    " report doctor, demo and the app kept in the reports folder) as Markdown for an issue,"
    " as HTML, or as text for the terminal.",
    arguments=(
        opt("file", metavar="FILE.json", nargs="?"),
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
