"""``loadscope compare``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.common import Command, UsageError, opt


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.diagnosis.doctor import load_report
    from loadscope.report.compare import compare, row_of, to_text

    seen: dict[tuple[int, int], str] = {}
    for path in args.files:
        try:
            st = os.stat(path)
        except OSError:
            continue  # load_report says what is wrong with it
        if (st.st_dev, st.st_ino) in seen:
            raise UsageError(
                f"{path} is {seen[(st.st_dev, st.st_ino)]} again: name each report once"
            )
        seen[(st.st_dev, st.st_ino)] = path
    rows = compare([row_of(path, load_report(path)) for path in args.files])
    out.write(to_text(rows) + "\n")
    return ExitCode.OK


COMMAND = Command(
    name="compare",
    help="one row per doctor report (one per node), outliers marked",
    description="Compare doctor reports from several nodes: storage class, cold latency,"
    " best strategy and its throughput, verdict; nodes far from the median are marked.",
    arguments=(opt("files", metavar="REPORT.json", nargs="+"),),
    run=run,
)
