"""``loadscope demo``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import io
import sys
from typing import TextIO

from loadscope.base.errors import ExitCode
from loadscope.base.units import parse_size
from loadscope.cli.answer import ANSWER_OPTIONS, answer
from loadscope.cli.common import (
    KIB,
    MAX_BACKGROUND_OPTION,
    PROGRESS,
    Command,
    budget,
    duration_arg,
    opt,
    size_arg,
)
from loadscope.cli.progress import Progress, mode_for


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.diagnosis.demo import DemoOptions, run_demo
    from loadscope.diagnosis.doctor import to_text
    from loadscope.tools.emulator import EmulatorSettings

    settings = EmulatorSettings(
        latency_s=args.latency, readahead_kb=args.readahead_kb, max_background=args.max_background
    )
    options = DemoOptions(
        size_bytes=args.size,
        settings=settings,
        budget_s=args.budget,
        work_dir=args.work_dir,
        block=args.block,
        stacks=tuple(dict.fromkeys(args.stack or ())),
    )
    mode = mode_for(args, sys.stderr)
    with Progress(mode, budget_s=args.budget) as progress:
        # Read inside: the live line puts its own stderr in place, and writes through it
        # keep the line below them. What it builds and serves goes with the progress (none
        # with --quiet); why it is not on the slow disk always (that changes the answer).
        say = sys.stderr if mode != "off" else io.StringIO()
        report = run_demo(
            options, say, listener=progress.listener, progress=progress.step, warn=sys.stderr
        )
    answer(out, report.to_dict(), args, lambda: to_text(report))
    return ExitCode.OK


COMMAND = Command(
    name="demo",
    help="see the slow-disk pathology on a synthetic model through an emulated network disk",
    description="Build a synthetic checkpoint, serve it through the emulated slow disk"
    " (FUSE, root; else the local disk, with the reason) and diagnose it. Removes"
    " everything it made.",
    arguments=(
        opt(
            "--size",
            type=size_arg,
            default=parse_size("512MiB"),
            help="model size (default 512MiB)",
        ),
        opt("--latency", type=duration_arg, default=0.005, help="per-request delay (default 5ms)"),
        opt("--readahead-kb", type=KIB, default=128, help="the mount's readahead (default 128)"),
        MAX_BACKGROUND_OPTION,
        budget("diagnosis budget (default 40)", 40.0),
        opt("--work-dir", metavar="DIR", help="where to build it (default /var/tmp)"),
        opt(
            "--block",
            action="store_true",
            help="serve it as a network block volume (ext4 on a loop device over the slow disk)",
        ),
        *PROGRESS,
        *ANSWER_OPTIONS,
    ),
    run=run,
)
