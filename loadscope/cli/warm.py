"""``loadscope warm``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from typing import TYPE_CHECKING, TextIO

from loadscope.base.errors import ExitCode
from loadscope.base.units import format_bytes, parse_size
from loadscope.cli.common import (
    BLOCK,
    SECONDS,
    THREADS,
    Command,
    UsageError,
    acting,
    emit,
    opt,
    stall_timeout,
)
from loadscope.cli.progress import ByteMeter, mode_for, rate_suffix

if TYPE_CHECKING:
    from loadscope.actions.warm import WarmReport


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    import json

    from loadscope.actions.warm import Locked, evict, still_resident, warm
    from loadscope.model.inspection import open_checked

    if args.evict and args.lock:
        raise UsageError("--evict and --lock are opposites: pick one")
    # An option that would be ignored is refused, not dropped in silence.
    if args.hold is not None and not args.lock:
        raise UsageError("--for goes with --lock (how long to hold the pages)")
    if args.allow_drop_caches and not args.evict:
        raise UsageError("--allow-drop-caches goes with --evict")
    with open_checked(args.target, synth_dir=args.synth_dir, only_files="loadscope warm") as target:
        if args.evict:
            report = evict(target, allow_drop_caches=args.allow_drop_caches)
        else:
            with contextlib.closing(ByteMeter("warming", mode_for(args, sys.stderr))) as meter:
                report = warm(
                    target,
                    threads=args.threads,
                    block_bytes=args.block,
                    progress=meter,
                    stall_timeout_s=args.stall_timeout,
                )
        lines = []
        for f in report.files:
            b, a = _resident(f.before), _resident(f.after)
            lines.append(f"{b:>8} -> {a:<8} {format_bytes(f.size_bytes):>10}  {f.path}")
        head = warm_head(report) if report.mode == "warm" else evict_head(report)
        summary = "\n".join([head, "resident before -> after", *lines, *report.notes])
        locked = None
        if args.lock:
            locked = Locked([(f.path, f.size_bytes) for f in report.files])
            report.locked_bytes, report.lock_note = locked.bytes, locked.note
            summary += f"\nlocked {format_bytes(locked.bytes)} in RAM" + (
                f" ({locked.note})" if locked.note else ""
            )
        code = emit(out, args.json, json.dumps(report.to_dict(), indent=2), summary)
        if report.mode == "evict" and still_resident(report):
            # The files are not cold: a script that evicts before a cold test must know.
            code = ExitCode.FAILURE
        if locked is not None and locked.bytes:
            # Not part of the report: with --json - stdout holds the JSON only.
            say = sys.stderr if args.json == "-" else out
            say.write(
                "holding the lock: Ctrl-C to release\n"
                if args.hold is None
                else f"holding the lock for {args.hold:g} s\n"
            )
            say.flush()
            try:
                if args.hold is None:
                    signal.pause()
                else:
                    time.sleep(args.hold)
            finally:
                locked.release()
        return code


def warm_head(report: WarmReport) -> str:
    """The first line of a warm: the model's bytes warmed, and the bytes read apart from
    them when files had to be read again (pages evicted while the rest was read)."""
    head = f"warmed {format_bytes(report.model_bytes)} in {report.seconds:.2f} s"
    if not report.top_up_bytes:
        return head + rate_suffix(report.bytes_per_s)
    return (
        f"{head}; read {format_bytes(report.bytes_read)}{rate_suffix(report.bytes_per_s)}"
        f" ({format_bytes(report.top_up_bytes)} of it re-read: pages evicted again while"
        " the rest was read)"
    )


def evict_head(report: WarmReport) -> str:
    """The first line of an eviction: what it evicted, and what it could not."""
    from loadscope.actions.warm import still_resident

    left = still_resident(report)
    took = f"in {report.seconds:.2f} s"
    if not left:
        return f"evicted {len(report.files)} file(s) {took}"
    if len(left) == len(report.files):
        return f"evicted nothing {took}: every file is still resident (see below)"
    return (
        f"evicted {len(report.files) - len(left)} of {len(report.files)} file(s) {took};"
        f" {len(left)} still resident (see below)"
    )


def _resident(fraction: float | None) -> str:
    """A file's page-cache residency as the summary shows it (``unknown`` when not known)."""
    return "unknown" if fraction is None else f"{fraction:.0%}"


COMMAND = Command(
    name="warm",
    help="put the model in the page cache (vmtouch -t for models), or --evict it",
    description="Read every weight file of TARGET in parallel large blocks so the next load"
    " is served from RAM, with each file's residency before and after. Refuses, saying how"
    " much is missing, when the uncached part does not fit in available memory or the"
    " cgroup limit. --lock keeps the files resident (mlock; root or ulimit -l) until"
    " interrupted; --evict drops them from this machine's page cache, verified (for cold"
    " tests), and exits 1 when a file stays resident (tmpfs and other memory-backed storage"
    " have no cold state). Reads only: never writes, moves or deletes the model.",
    arguments=acting(
        opt("--threads", type=THREADS, default=8, help="parallel readers (default 8)"),
        opt("--block", type=BLOCK, default=parse_size("16MiB"), help="read size (default 16MiB)"),
        opt("--lock", action="store_true", help="mlock the files until interrupted"),
        opt(
            "--for",
            dest="hold",
            type=SECONDS,
            metavar="SECONDS",
            help="with --lock: release after SECONDS instead of waiting for Ctrl-C",
        ),
        opt("--evict", action="store_true", help="drop the files from the page cache"),
        stall_timeout("read"),
        opt(
            "--allow-drop-caches",
            action="store_true",
            help="with --evict: write /proc/sys/vm/drop_caches when a file will not evict",
        ),
    ),
    run=run,
    target="required",
)
