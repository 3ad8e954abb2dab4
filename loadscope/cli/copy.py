"""``loadscope copy``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from loadscope.base.errors import ExitCode
from loadscope.base.units import format_bytes
from loadscope.cli.common import THREADS, Command, UsageError, acting, emit, opt, stall_timeout
from loadscope.cli.progress import ByteMeter, mode_for, rate_suffix
from loadscope.probes.localdisk import fastest_disk
from loadscope.probes.objclient import source_of

if TYPE_CHECKING:
    from loadscope.actions.localcopy import CopyReport


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    import json

    from loadscope.actions.localcopy import break_even, copy_model, pointer_lines
    from loadscope.loaders.strategies import DEFAULT
    from loadscope.model.inspection import open_checked
    from loadscope.model.targets import SAFETENSORS_SUFFIXES, TORCH_SUFFIXES

    if source_of(args.target) is not None:
        return _from_store(args, out)
    with open_checked(args.target, synth_dir=args.synth_dir, only_files="loadscope copy") as target:
        if args.dest is None:
            return _suggest_destinations(target, out)
        if args.dest == "-":
            raise UsageError("DEST '-': a copy is a directory, it cannot go to stdout")
        # Before any byte: a report of another model would give a break-even of nothing.
        doc = _report_of(args.report, target) if args.report else None
        with contextlib.closing(ByteMeter("copying", mode_for(args, sys.stderr))) as meter:
            report = copy_model(
                target,
                args.dest,
                **({"threads": args.threads} if args.threads else {}),
                force=args.force,
                progress=meter,
                stall_timeout_s=args.stall_timeout,
            )
    copied = [f for f in report.files if f.status == "copied"]
    kept = [f for f in report.files if f.status == "already-there"]
    lines = [
        f"copied {len(copied)} file(s), {format_bytes(report.bytes_copied)} in"
        f" {report.seconds:.2f} s{rate_suffix(report.bytes_per_s)}; {len(kept)} already"
        " there (verified)",
        *rate_lines(report),
        "every file was fsynced, read back and matched the source; the source was not touched",
    ]
    if doc is not None:
        cold = next(
            (
                s
                for s in (doc.get("bench") or {}).get("summary", [])
                if s.get("strategy") == DEFAULT
                and s.get("cache") == "cold"
                and s.get("median_seconds")
            ),
            None,
        )
        fastest = fastest_disk((doc.get("probe") or {}).get("local_disks"))
        speeds = [fastest[1]] if fastest else []
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
    weights = [
        f.relative
        for f in report.files
        if f.relative.lower().endswith(SAFETENSORS_SUFFIXES + TORCH_SUFFIXES)
    ]
    pointers = pointer_lines(args.dest, weights)
    lines += ["point your stack at the copy:", *(f"  {x}" for x in pointers)]
    return emit(out, args.json, json.dumps(report.to_dict(), indent=2), "\n".join(lines))


def _from_store(args: argparse.Namespace, out: TextIO) -> ExitCode:
    """A bucket's model (``s3://``, ``gs://``, ``az://``) to DEST with many ranged GETs in
    flight, each object verified (``actions/storecopy.py``)."""
    import json

    from loadscope.actions.localcopy import pointer_lines
    from loadscope.actions.storecopy import copy_from_store

    if args.dest is None:
        raise UsageError("copy s3://...: name DEST, a folder on a local disk")
    if args.dest == "-":
        raise UsageError("DEST '-': a copy is a directory, it cannot go to stdout")
    with contextlib.closing(ByteMeter("copying", mode_for(args, sys.stderr))) as meter:
        report = copy_from_store(
            args.target,
            args.dest,
            **({"concurrency": args.threads} if args.threads else {}),
            force=args.force,
            progress=meter,
        )
    copied = [f for f in report.files if f.status == "copied"]
    kept = [f for f in report.files if f.status == "already-there"]
    weights = [f.relative for f in report.files if f.relative.endswith(".safetensors")]
    lines = [
        f"copied {len(copied)} object(s), {format_bytes(report.bytes_copied)} in"
        f" {report.seconds:.2f} s{rate_suffix(report.bytes_per_s)}; {len(kept)} already"
        " there (same size and ETag as the store's)",
        *report.notes,
        "every file was fsynced, read back and matched what the store sent; the bucket was"
        " not touched",
        "point your stack at the copy:",
        *(f"  {x}" for x in pointer_lines(args.dest, weights)),
    ]
    return emit(out, args.json, json.dumps(report.to_dict(), indent=2), "\n".join(lines))


def rate_lines(report: CopyReport) -> list[str]:
    """The source's read rate and DEST's write rate, each over the time it was at work
    (the copy overlaps them: neither is the whole copy's rate)."""
    lines = []
    if report.source_bytes_read:
        how = ", ".join(f"{m}: {format_bytes(n)}" for m, n in report.read_methods().items())
        lines.append(
            f"  source read: {format_bytes(report.source_bytes_read)} in"
            f" {report.read_seconds:.2f} s with reads in flight"
            f"{rate_suffix(report.read_bytes_per_s)}, {report.threads} x"
            f" {format_bytes(report.block_bytes)} requests in flight ({how})"
        )
    if report.bytes_copied:
        lines.append(
            f"  DEST write: {format_bytes(report.bytes_copied)} in {report.write_seconds:.2f} s"
            f" with writes or fsync in flight{rate_suffix(report.write_bytes_per_s)};"
            f" read back to verify in {report.verify_seconds:.2f} s"
        )
    return lines


def _report_of(path: str, target: Any) -> dict[str, Any]:
    """The doctor report at ``path``, refused unless it is of this model.

    Its size (total bytes, file count) must be this model's, and so must what names the
    model: the folder it measured (``target.source``, the model's own folder when the
    report measured an emulator's mount of it; else ``target.root``; else a path spec).
    A folder of this machine must be this model's (another one of the same size is
    another model, a fine-tune of the same base as like as not); one this machine does
    not have (measured on another host, or since moved) must have listed this model's
    file names and sizes (``probe.files``). Checked before any byte is copied.
    """
    from loadscope.diagnosis.doctor import load_report

    doc = load_report(path)
    found = doc.get("target")
    theirs: dict[str, Any] = found if isinstance(found, dict) else {}
    files = theirs.get("files")
    ours = str(target.served_from or target.report_spec)
    same_size = theirs.get("total_bytes") == target.total_bytes and (
        not isinstance(files, int) or files == len(target.files)
    )
    why = None if same_size else "another size"
    if why is None:
        why = _other_model(doc, theirs, target)
    if why is not None:
        name = next(
            (str(theirs[k]) for k in ("source", "root", "spec") if isinstance(theirs.get(k), str)),
            "?",
        )
        raise UsageError(
            f"--report {path}: a report of another model ({name},"
            f" {format_bytes(int(theirs.get('total_bytes') or 0))}: {why}), not of this one"
            f" ({ours}, {format_bytes(target.total_bytes)} in {len(target.files)} file(s))"
        )
    return doc


def _other_model(doc: dict[str, Any], theirs: dict[str, Any], target: Any) -> str | None:
    """Why the report ``doc`` (its ``target`` section: ``theirs``) is of another model than
    ``target``, or None when it is of this one."""
    spec = theirs.get("spec")
    # Only an absolute path names a folder of this machine (an older report of a
    # relative target holds "llama", which is some other folder from here).
    folder = next(
        (
            theirs[k]
            for k in ("source", "root", "spec")
            if isinstance(theirs.get(k), str) and os.path.isabs(theirs[k])
        ),
        None,
    )
    if folder is not None and os.path.exists(folder):
        # A folder of this machine: this model's, or another one (the weights of two
        # fine-tunes of one base have the same names and sizes: they cannot tell).
        folders = (p for p in (target.root, target.served_from) if p is not None)
        if any(_same_file(folder, p) for p in folders):
            return None
        return "another folder"
    # Measured where this machine has no such folder (another host, a mount point since
    # moved): the same file names and sizes, or nothing else naming the model.
    listed = _listed_files(doc, theirs)
    if listed is not None:
        mine = sorted(
            (_relative(str(f.path), str(target.root)), f.size_bytes) for f in target.files
        )
        same = listed == mine
        return None if same else "other file names or sizes"
    if folder is not None:
        return "a folder not on this machine, and the report lists no files to compare"
    if isinstance(spec, str) and spec != target.report_spec:
        return "another spec"
    return None  # nothing names the model beyond its size: taken as it is


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _listed_files(doc: dict[str, Any], theirs: dict[str, Any]) -> list[tuple[str, int]] | None:
    """The report's weight files as (path relative to its model folder, size), sorted; None
    when it does not list them."""
    probe = doc.get("probe")
    entries = probe.get("files") if isinstance(probe, dict) else None
    if not entries:
        return None
    root = theirs.get("root")
    out = []
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("path"), str)):
            return None
        if not isinstance(e.get("size_bytes"), int):
            return None
        out.append((_relative(e["path"], root if isinstance(root, str) else ""), e["size_bytes"]))
    return sorted(out)


def _relative(path: str, root: str) -> str:
    """``path`` as its model folder names it: relative to ``root`` when under it, else (a
    single-file target, or no root) its file name."""
    base = root.rstrip("/")
    if base and path.startswith(base + "/"):
        return path[len(base) + 1 :]
    return os.path.basename(path)


def _suggest_destinations(target: Any, out: TextIO) -> ExitCode:
    import functools

    from loadscope.engine.probing import mount_and_class
    from loadscope.probes import mounts
    from loadscope.probes.localdisk import local_candidates

    table = mounts.read_mountinfo()
    mount_of = functools.partial(mount_and_class, table, False)
    disks = local_candidates(mount_of, target.total_bytes, os.stat(target.files[0].path).st_dev)
    klass, here = _already_local(target, table)
    if here is not None and (klass == "memory" or not any(d.speed is not None for d in disks)):
        # Not a missing DEST: no copy is called for (issue 41). No disk reads faster than
        # RAM; another local disk is named only where one was measured.
        out.write(here + "\n")
        return ExitCode.OK
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
    elif here is not None:
        out.write(
            "note: the model is already on a local disk: a copy to one of these makes cold"
            " loads faster only where that disk reads faster than the model's own\n"
        )
    return ExitCode.USAGE


def _already_local(target: Any, table: list[Any]) -> tuple[str | None, str | None]:
    """The model's storage class, and what a person is told when it already lives on a
    local disk (or in RAM): what a copy would and would not change; None when it does not
    (or that cannot be told)."""
    from loadscope.probes.filestorage import storage_of

    path = Path(target.files[0].path)
    m = storage_of(path, table, False).mount.data
    klass = (m.resolved_class or m.storage_class) if m else None
    if m is None or klass not in ("local-block", "memory"):
        return klass, None
    free = shutil.disk_usage(path.parent).free
    size = format_bytes(target.total_bytes)
    spec = shlex.quote(str(target.report_spec))
    if klass == "memory":
        return klass, (
            f"no copy needed: {target.report_spec} is in memory-backed storage ({m.fstype} at"
            f" {m.mount_point}), so every load already reads it from RAM. A copy to a disk"
            " would make cold loads slower, not faster; it would only add another"
            f" {size} to keep up to date. If loads are slow here, the loader is the cause:"
            f" `loadscope doctor {spec}` measures it."
        )
    return klass, (
        f"no copy needed: {target.report_spec} is already on a local disk ({m.fstype} at"
        f" {m.mount_point}, {format_bytes(free)} free). A copy would change where a second"
        f" {size} lives (a copy that goes stale when the model is updated), not where loads"
        " read from: the bytes would still come from a local disk, so cold loads would not get"
        " faster (only another, faster disk could make them so: name it as DEST to copy"
        f" there). If loads are slow here, the loader is the cause: `loadscope doctor {spec}`"
        " measures it."
    )


COMMAND = Command(
    name="copy",
    help="copy the model to a local disk: verified, resumable, never touching the source",
    description="Copy TARGET's weight files and the config/tokenizer files beside them to"
    " DEST (a Hugging Face snapshot's layout preserved). Free space is checked first; the"
    " source is read as the auto strategy reads a cold file (many large requests in flight,"
    " O_DIRECT where the filesystem allows it); each file is written under a temporary"
    " name, fsynced, read back and compared with the source, then renamed; an existing"
    " different file is never overwritten without --force; rerun to resume an interrupted"
    " copy. Without DEST, suggests local directories measured by the probes. --report"
    " DOCTOR.json adds the break-even.",
    arguments=acting(
        opt("dest", metavar="DEST", nargs="?", help="destination directory"),
        opt(
            "--threads",
            type=THREADS,
            help="source read requests in flight (default 12 of 1 MiB, as auto reads a cold file)",
        ),
        opt("--force", action="store_true", help="replace files that differ in DEST"),
        stall_timeout("copied"),
        opt(
            "--report",
            metavar="DOCTOR.json",
            help="a doctor report of this model: prints the copy's break-even from its cold load",
        ),
    ),
    run=run,
    target="required",
)
