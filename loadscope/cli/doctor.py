"""``loadscope doctor``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.answer import ANSWER_OPTIONS, answer, keep
from loadscope.cli.common import (
    DEVICE_CHOICES,
    MEASURING,
    RANKS,
    Command,
    UsageError,
    budget,
    check_device_usable,
    device_or_auto_arg,
    emit,
    opt,
    write_file,
)
from loadscope.cli.progress import Progress, mode_for

if TYPE_CHECKING:
    from loadscope.diagnosis.timing import UserCommand


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    import json

    from loadscope.diagnosis.doctor import DoctorOptions, redact, run_doctor, to_text
    from loadscope.model.inspection import open_checked
    from loadscope.report.markdown import to_markdown

    to_stdout = [f"--{o}" for o in ("json", "md", "html") if getattr(args, o) == "-"]
    if len(to_stdout) > 1:
        raise UsageError(f"only one report can go to stdout ('-'), not {' and '.join(to_stdout)}")
    check_device_usable(args.device)
    command = _user_command(args)
    spec = args.target or "synthetic:512MiB"
    mode = mode_for(args, sys.stderr)
    if mode == "live":
        sys.stderr.write(f"diagnosing {spec} (budget {args.budget:g} s) ...\n")
    with (
        open_checked(spec, synth_dir=args.synth_dir, loads=True) as target,
        Progress(mode, budget_s=args.budget) as progress,
    ):
        if args.budget < MIN_BUDGET_S:
            # Said before the run (once the model is known good), not found after it: the
            # probes, the fork server and one round of trials take about this much.
            progress.note(
                f"note: --budget {args.budget:g} is under the ~{MIN_BUDGET_S:g} s a diagnosis"
                " takes at least (the probes, one round of trials); it will take about that,"
                " most likely with that one round (its figures' spread not measured), and"
                " what does not fit is reported as not measured reliably"
            )
        progress.note(f"diagnosing {spec} (budget {args.budget:g} s)")
        options = DoctorOptions(
            budget_s=args.budget,
            device=args.device,
            ranks=args.ranks,
            try_readahead=args.try_readahead,
            fio=args.fio,
            command=command,
            stacks=tuple(dict.fromkeys(args.stack or ())),
            bucket=args.bucket,
        )
        report = run_doctor(target, options, listener=progress.listener, progress=progress.step)
    from loadscope.report.html import to_html

    doc = redact(report.to_dict()) if args.redact_hosts else report.to_dict()
    _flame(args, report.user_command)
    # '-' is stdout for every report format, as for --json: that report alone goes there.
    for path, render in ((args.md, to_markdown), (args.html, to_html)):
        if path == "-":
            out.write(render(doc) + "\n")
        elif path:
            write_file(path, render(doc) + "\n")
    if "-" in (args.md, args.html, args.json):
        keep(doc)  # kept as every run's report is, also when it went to stdout
    if "-" in (args.md, args.html):
        if args.json:
            write_file(args.json, json.dumps(doc, indent=2, default=str) + "\n")
        return doctor_exit_code(report.advice.verdict.status)
    if args.json == "-":
        emit(out, "-", json.dumps(doc, indent=2, default=str), "")
        return doctor_exit_code(report.advice.verdict.status)
    if args.json:
        write_file(args.json, json.dumps(doc, indent=2, default=str) + "\n")
    answer(out, doc, args, lambda: to_text(report), "--json FILE writes it")
    for label, path in (("full result", args.json), ("markdown", args.md), ("html", args.html)):
        if path:
            out.write(f"{label}: {path}\n")
    return doctor_exit_code(report.advice.verdict.status)


def _flame(args: argparse.Namespace, timed: Any) -> None:
    """``--flamegraph FILE``: the profiled run's SVG written, or why there is none."""
    if not args.flamegraph:
        return
    if timed is not None and timed.flame_svg:
        write_file(args.flamegraph, timed.flame_svg)
        print(f"flame graph: {args.flamegraph}", file=sys.stderr)
    else:
        print("flame graph: not written: your command was not profiled", file=sys.stderr)


def _user_command(args: argparse.Namespace) -> UserCommand | None:
    """``--cmd "CMD"`` split as a shell would (run without one), checked before any work."""
    import shlex

    from loadscope.cli.timecmd import check_ready
    from loadscope.diagnosis.timing import UserCommand

    if args.cmd is None:
        if args.cmd_until or args.cmd_ready or args.profile or args.flamegraph:
            raise UsageError("--cmd-until, --cmd-ready, --profile and --flamegraph go with --cmd")
        return None
    if args.flamegraph == "-":
        raise UsageError("--flamegraph -: the flame graph is an SVG file; name one")
    try:
        argv = tuple(shlex.split(args.cmd))
    except ValueError as exc:
        raise UsageError(f"--cmd {args.cmd!r}: {exc}") from None
    if not argv:
        raise UsageError("--cmd is empty: give the command that loads the model")
    check_ready(args.cmd_until, args.cmd_ready, ("--cmd-until", "--cmd-ready"))
    profile = args.profile or bool(args.flamegraph)
    return UserCommand(argv, args.cmd_until, args.cmd_ready, profile)


#: The least a diagnosis takes: probes (~15% of the budget, at least a few seconds), the
#: fork server's start (~3 s) and one round of trials (the plan keeps at least 10 s).
MIN_BUDGET_S = 15.0


def doctor_exit_code(status: str) -> ExitCode:
    """0 healthy, 10 a problem worth fixing, 1 when nothing could be measured."""
    if status == "healthy":
        return ExitCode.OK
    if status == "unmeasured":
        return ExitCode.FAILURE
    return ExitCode.PROBLEM_FOUND


def bucket_arg(value: str) -> str:
    """``--bucket``: a bucket's address, refused at once otherwise (exit 2, one line)."""
    scheme, _, rest = value.partition("://")
    if scheme not in ("s3", "gs", "az") or not rest.strip("/"):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a bucket's address (s3://BUCKET/PREFIX, gs://..., az://...)"
        )
    return value


COMMAND = Command(
    name="doctor",
    help="the diagnosis: probes, the trials they call for, and evidenced advice",
    description="Probe the storage, run the loader trials the probes call for (cold and"
    " warm, sampled for big models to fit the budget), and recommend what the"
    " measurements support, with the expected gain, its cost and copy-paste code. Exit"
    " code 0 when healthy, 10 when a problem worth fixing was found. Without TARGET, a"
    " 512 MiB synthetic checkpoint.",
    arguments=(
        *MEASURING,
        *ANSWER_OPTIONS,
        opt(
            "--fio",
            action="store_true",
            help="also run the fio jobs that reproduce the probe's numbers"
            " (read-only, up to ~30 s)",
        ),
        opt(
            "--md",
            metavar="FILE|-",
            help="also write the report as Markdown (for an issue); - stdout",
        ),
        opt("--html", metavar="FILE|-", help="also write a self-contained HTML report; - stdout"),
        opt(
            "--try-readahead",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="when raising readahead is advised, measure it: set 8 MiB for this mount,"
            " re-run the mmap trial, restore the old value (default: where this user may"
            " write the setting, i.e. root; --no-try-readahead never touches it)",
        ),
        opt(
            "--redact-hosts",
            action="store_true",
            help="hide the hostname and the model's paths in the written reports",
        ),
        budget("time budget for the whole diagnosis (default 120)", 120.0),
        opt(
            "--device",
            default="auto",
            type=device_or_auto_arg,
            metavar="|".join(value for value, _ in DEVICE_CHOICES) + "[:N]",
            help="where tensors land (default auto: the GPU when torch can use one)",
        ),
        opt(
            "--cmd",
            metavar="CMD",
            help='your own load, e.g. "python load.py {model}" (split as a shell would,'
            " run without one; {model} is the model's path): timed cold as it is and after"
            " each no-code fix once the advice is made, outside the budget (loadscope time"
            " repeats it)",
        ),
        opt("--cmd-until", metavar="REGEX", help="with --cmd: ready at a line matching REGEX"),
        opt("--cmd-ready", metavar="URL", help="with --cmd: ready when URL answers 2xx"),
        opt(
            "--profile",
            action="store_true",
            help="with --cmd: one more cold run sampled by py-spy, its start-up by phase"
            " (as loadscope time --profile)",
        ),
        opt(
            "--flamegraph",
            metavar="FILE",
            help="with --cmd: write the profiled run's flame graph to FILE (SVG, coloured by"
            " phase; implies --profile)",
        ),
        opt(
            "--ranks",
            type=RANKS,
            metavar="N",
            help="add N-rank trials: independent reads vs rank-0 read + broadcast vs sharded"
            " (default: one rank per GPU when there are several)",
        ),
        opt(
            "--bucket",
            type=bucket_arg,
            metavar="s3://BUCKET/PREFIX",
            help="the bucket behind the model's FUSE mount (also gs://, az://): after the"
            " trials, time reading it directly (loadscope.load_model, Run:ai's streamer)"
            " against the mount, with the credentials of this environment",
        ),
    ),
    run=run,
    target="optional",
)
