"""``loadscope copy``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any, TextIO

from loadscope.base.errors import ExitCode
from loadscope.base.units import format_bytes
from loadscope.cli.common import (
    JSON_RESULT,
    PROGRESS,
    SYNTH_DIR,
    THREADS,
    Command,
    UsageError,
    emit,
    opt,
    stall_timeout,
)
from loadscope.cli.progress import ByteMeter, mode_for
from loadscope.diagnosis.doctor import load_report


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    import json

    from loadscope.actions.localcopy import break_even, copy_model, pointer_lines
    from loadscope.model.inspection import open_checked

    with open_checked(args.target, synth_dir=args.synth_dir) as target:
        if args.dest is None:
            return _suggest_destinations(target, out)
        if args.dest == "-":
            raise UsageError("DEST '-': a copy is a directory, it cannot go to stdout")
        # Before any byte: a report of another model would give a break-even of nothing.
        doc = _report_of(args.report, target) if args.report else None
        meter = ByteMeter("copying", mode_for(args, sys.stderr))
        try:
            report = copy_model(
                target,
                args.dest,
                threads=args.threads,
                force=args.force,
                progress=meter,
                stall_timeout_s=args.stall_timeout,
            )
        finally:
            meter.close()
    copied = [f for f in report.files if f.status == "copied"]
    kept = [f for f in report.files if f.status == "already-there"]
    rate = f", {format_bytes(report.bytes_per_s)}/s" if report.bytes_per_s else ""
    lines = [
        f"copied {len(copied)} file(s), {format_bytes(report.bytes_copied)} in"
        f" {report.seconds:.2f} s{rate}; {len(kept)} already there (verified)",
        "every file was fsynced, read back and matched the source; the source was not touched",
    ]
    if doc is not None:
        cold = next(
            (
                s
                for s in (doc.get("bench") or {}).get("summary", [])
                if s.get("strategy") == "mmap"
                and s.get("cache") == "cold"
                and s.get("median_seconds")
            ),
            None,
        )
        disks = ((doc.get("probe") or {}).get("local_disks") or {}).get("disks") or []
        speeds = [d["speed"]["cold_read_bytes_per_s"] for d in disks if d.get("speed")]
        if cold and speeds:
            here = cold.get("extrapolated_median_seconds") or cold["median_seconds"]
            there = report.files and sum(f.size_bytes for f in report.files) / max(speeds)
            n = break_even(report.seconds, here, float(there or 0))
            lines.append(
                f"break-even: cold load {here:.3g} s in place vs ~{float(there or 0):.3g} s from"
                f" the local disk (measured rate); the copy is repaid after {n} cold load(s)"
                if n
                else f"break-even: none — loading in place ({here:.3g} s) is not slower than"
                " the local disk's estimate"
            )
        else:
            lines.append("break-even: the report has no cold mmap trial or local-disk rate")
    else:
        lines.append(
            f"break-even: run `loadscope doctor {shlex.quote(args.target)} --json r.json`"
            " and pass --report r.json"
        )
    lines += ["point your stack at the copy:", *(f"  {x}" for x in pointer_lines(args.dest))]
    return emit(out, args.json, json.dumps(report.to_dict(), indent=2), "\n".join(lines))


def _report_of(path: str, target: Any) -> dict[str, Any]:
    """The doctor report at ``path``, refused unless it is of this model (bytes, files)."""
    doc = load_report(path)
    found = doc.get("target")
    theirs: dict[str, Any] = found if isinstance(found, dict) else {}
    files = theirs.get("files")
    same = theirs.get("total_bytes") == target.total_bytes and (
        not isinstance(files, int) or files == len(target.files)
    )
    if not same:
        raise UsageError(
            f"--report {path}: a report of another model ({theirs.get('spec', '?')},"
            f" {format_bytes(int(theirs.get('total_bytes') or 0))}), not of this one"
            f" ({format_bytes(target.total_bytes)} in {len(target.files)} file(s))"
        )
    return doc


def _suggest_destinations(target: Any, out: TextIO) -> ExitCode:
    from loadscope.engine.probing import local_candidates
    from loadscope.probes import mounts

    table = mounts.read_mountinfo()
    disks = local_candidates(table, False, target.total_bytes, os.stat(target.files[0].path).st_dev)
    out.write(
        f"copy needs a DEST; local directories with room for {format_bytes(target.total_bytes)}:\n"
    )
    usable = [d for d in disks if d.speed is not None]
    for d in disks:
        if d.speed is None:
            out.write(f"  {d.directory}: {d.reason}\n")
        else:
            out.write(
                f"  {d.directory}: {format_bytes(d.free_bytes)} free, writes"
                f" {format_bytes(d.speed.write_bytes_per_s)}/s, reads"
                f" {format_bytes(d.speed.cold_read_bytes_per_s)}/s cold\n"
            )
    if not usable:
        out.write("  (none found: name a directory on a local disk)\n")
    return ExitCode.USAGE


COMMAND = Command(
    name="copy",
    help="copy the model to a local disk: verified, resumable, never touching the source",
    description="Copy TARGET's weight files and the config/tokenizer files beside them to"
    " DEST (a Hugging Face snapshot's layout preserved). Free space is checked first; each"
    " file is written under a temporary name, fsynced, read back and compared with the"
    " source, then renamed; an existing different file is never overwritten without"
    " --force; rerun to resume an interrupted copy. Without DEST, suggests local"
    " directories measured by the probes. --report DOCTOR.json adds the break-even.",
    arguments=(
        SYNTH_DIR,
        *PROGRESS,
        opt("dest", metavar="DEST", nargs="?", help="destination directory"),
        opt("--threads", type=THREADS, default=4, help="parallel block copies (default 4)"),
        opt("--force", action="store_true", help="replace files that differ in DEST"),
        stall_timeout("copied"),
        opt(
            "--report",
            metavar="DOCTOR.json",
            help="a doctor report of this model: prints the copy's break-even from its cold load",
        ),
        JSON_RESULT,
    ),
    run=run,
    target="required",
)
