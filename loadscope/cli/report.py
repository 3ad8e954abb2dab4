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
    doc = load_report(args.file)
    out.write((to_html(doc) if args.html else to_markdown(doc)) + "\n")
    return ExitCode.OK


COMMAND = Command(
    name="report",
    help="render a saved doctor report (JSON) again, as Markdown",
    description="Render FILE.json written by 'doctor --json' as Markdown for an issue.",
    arguments=(
        opt("file", metavar="FILE.json"),
        opt("--md", action="store_true", help="Markdown (the default)"),
        opt("--html", action="store_true", help="self-contained HTML instead"),
    ),
    run=run,
)
