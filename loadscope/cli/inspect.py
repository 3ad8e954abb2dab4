"""``loadscope inspect``: its arguments and what runs it."""

from __future__ import annotations

import argparse
from typing import TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.common import SYNTH_DIR, Command, opt


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.model.inspection import inspect_target, to_json, to_text
    from loadscope.model.targets import files_only, open_target

    with open_target(args.target, synth_dir=args.synth_dir) as target:
        report = inspect_target(files_only(target, "loadscope inspect"))
        out.write((to_json(report) if args.json else to_text(report)) + "\n")
    return ExitCode.OK


COMMAND = Command(
    name="inspect",
    help="what a checkpoint holds: files, bytes, tensors, dtypes, sizes (headers only)",
    description="Read checkpoint headers (never the data, never a pickle) and report files,"
    " bytes, tensor count, dtype mix, a tensor-size histogram and unaligned offsets.",
    arguments=(
        SYNTH_DIR,
        opt("--json", action="store_true", help="print the report as JSON (schema_version 1)"),
    ),
    run=run,
    target="required",
)
