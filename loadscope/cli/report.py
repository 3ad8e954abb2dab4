"""``loadscope report``: its arguments and what runs it."""

from __future__ import annotations

import argparse
from typing import TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.common import Command, UsageError, opt
from loadscope.diagnosis.doctor import load_report


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.report.html import to_html
    from loadscope.report.markdown import to_markdown

    if args.md and args.html:
        raise UsageError("--md and --html: pick one (Markdown is the default)")
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
    out.write((to_html(doc) if args.html else to_markdown(doc)) + "\n")
    return ExitCode.OK


COMMAND = Command(
    name="report",
    help="render a saved doctor report (JSON) again, as Markdown",
    description="Render FILE.json written by 'doctor --json' (or, with --last, the newest"
    " report doctor, demo and the app kept in the reports folder) as Markdown for an issue.",
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
    ),
    run=run,
)
