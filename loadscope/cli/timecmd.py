"""``loadscope time -- CMD``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from typing import IO, TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.common import (
    COUNT,
    SECONDS,
    Command,
    UsageError,
    comma_list,
    emit,
    opt,
    write_file,
)


def _argv(args: argparse.Namespace) -> tuple[str, ...]:
    cmd = list(args.cmd or [])
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("no command to time: loadscope time [options] -- CMD [ARGS...]")
    return tuple(cmd)


def check_ready(until: str | None, ready: str | None, flags: tuple[str, str]) -> None:
    """How a command says it is ready, checked before any work (``flags``: the two options'
    names, ``--until``/``--ready`` here, ``--cmd-until``/``--cmd-ready`` for the doctor)."""
    if until and ready:
        raise UsageError(f"{flags[0]} and {flags[1]} are two ways to say 'ready': pick one")
    if until:
        try:
            re.compile(until)
        except re.error as exc:
            raise UsageError(f"{flags[0]} {until!r}: not a regular expression ({exc})") from None
    if ready and not ready.startswith(("http://", "https://")):
        raise UsageError(f"{flags[1]} {ready!r}: an http:// or https:// URL")


def _check(args: argparse.Namespace) -> tuple[str, ...]:
    from loadscope.diagnosis.timing import FIXES

    check_ready(args.until, args.ready, ("--until", "--ready"))
    if args.flamegraph == "-":
        raise UsageError("--flamegraph -: the flame graph is an SVG file; name one")
    fixes = tuple(args.fixes)
    if fixes == ("none",):
        return ()
    unknown = [f for f in fixes if f not in FIXES]
    if unknown:
        raise UsageError(f"--fixes: unknown {', '.join(unknown)} (known: {', '.join(FIXES)}, none)")
    if args.copy_to and "copy" not in fixes:
        raise UsageError("--copy-to goes with the copy fix (--fixes ...,copy)")
    return fixes


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.diagnosis.timing import TimeOptions, time_command
    from loadscope.diagnosis.timing_text import to_text

    argv = _argv(args)
    fixes = _check(args)
    output: IO[bytes] | None = None
    with contextlib.ExitStack() as stack:
        if args.output:
            # Unbuffered: a write that fails (a full disk) fails where it is said, not
            # again as the file closes.
            output = stack.enter_context(open(args.output, "ab", buffering=0))
        elif args.json == "-":
            output = sys.stderr.buffer  # stdout carries the JSON

        def progress(line: str) -> None:
            if not args.quiet:
                print(f"loadscope time: {line}", file=sys.stderr, flush=True)

        options = TimeOptions(
            argv=argv,
            model=args.model,
            until=args.until,
            ready_url=args.ready,
            timeout_s=args.timeout,
            rounds=args.rounds,
            fixes=fixes,
            copy_to=args.copy_to,
            allow_drop_caches=args.allow_drop_caches,
            output=output,
            profile=args.profile or bool(args.flamegraph),
        )
        report = time_command(options, progress)
    emit(out, args.json, json.dumps(report.to_dict(), indent=1), to_text(report))
    if args.flamegraph:
        if report.flame_svg:
            write_file(args.flamegraph, report.flame_svg)
            print(f"flame graph: {args.flamegraph}", file=sys.stderr if args.json == "-" else out)
        else:
            print("flame graph: not written: the run was not profiled", file=sys.stderr)
    return report.exit_code()


COMMAND = Command(
    name="time",
    help="time your own command loading the model: cold, and after each no-code fix",
    description="Run CMD exactly as given (no shell unless you write one), with the model's"
    " files evicted and verified cold first, and time it: to its exit, to the first output"
    " line matching --until, or to --ready URL answering. While it runs, the whole process"
    " tree is watched (bytes read, the model's residency, major faults, peak RSS, the block"
    " device's request sizes). Then the same command runs cold after each fix that needs no"
    " code change: the mount's readahead raised (root; put back after every run and on every"
    " exit), `loadscope warm` first, and a local copy (only with {model} in the command and"
    " --copy-to DIR: the copy is made once, verified, and removed after), interleaved over"
    " --rounds, with medians and ratios. Nothing of yours is modified; Ctrl-C, SIGTERM,"
    " SIGHUP and --timeout stop the command's whole process group.",
    arguments=(
        opt(
            "--model",
            metavar="PATH",
            help="the model the command loads (its files are evicted before each run; {model}"
            " in CMD stands for it); without it, a first run finds the weight files CMD opens",
        ),
        opt("--until", metavar="REGEX", help="ready at the first output line matching REGEX"),
        opt("--ready", metavar="URL", help="ready when URL answers 2xx (a server's /health)"),
        opt(
            "--timeout",
            type=SECONDS,
            default=3600.0,
            metavar="SECONDS",
            help="stop a run after SECONDS (default 3600)",
        ),
        opt("--rounds", type=COUNT, default=3, help="interleaved rounds (default 3)"),
        opt(
            "--fixes",
            type=comma_list,
            default=["readahead", "warm", "copy"],
            metavar="LIST",
            help="fixes to try: readahead,warm,copy (default all that apply), or none",
        ),
        opt("--copy-to", metavar="DIR", help="a directory on a local disk for the copy fix"),
        opt("--output", metavar="FILE", help="the command's output to FILE (appended)"),
        opt(
            "--json",
            metavar="FILE",
            help="also write the result as JSON to FILE ('-' for stdout; the command's output"
            " then goes to stderr)",
        ),
        opt(
            "--allow-drop-caches",
            action="store_true",
            help="write /proc/sys/vm/drop_caches when per-file eviction fails (host-wide; root)",
        ),
        opt(
            "--profile",
            action="store_true",
            help="one more cold run sampled by py-spy: the start-up's seconds by phase"
            " (imports, reading weights, compilation, ...) and what a load fix can save",
        ),
        opt(
            "--flamegraph",
            metavar="FILE",
            help="write the profiled run's flame graph to FILE (SVG, coloured by phase;"
            " implies --profile)",
        ),
        opt("--quiet", action="store_true", help="no progress lines on stderr"),
        opt("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the command, after --"),
    ),
    run=run,
)
