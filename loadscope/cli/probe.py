"""``loadscope probe``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.common import MEASURING, Command, budget, emit, opt
from loadscope.cli.progress import Progress, mode_for


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.engine.probing import run_probes
    from loadscope.model.inspection import open_checked
    from loadscope.report.probe_text import to_text

    with (
        open_checked(args.target, synth_dir=args.synth_dir) as target,
        Progress(mode_for(args, sys.stderr), budget_s=args.budget) as progress,
    ):
        report = run_probes(
            target,
            budget_s=args.budget,
            allow_drop_caches=args.allow_drop_caches,
            progress=lambda step: progress.step(f"probes: {step}"),
            run_fio=args.fio,
        )
    return emit(out, args.json, report.to_json(), to_text(report))


COMMAND = Command(
    name="probe",
    help="what storage the model sits on and how it behaves cold (read-only, seconds)",
    description="Probe the storage under TARGET's weight files: mount and storage class,"
    " block device chain, readahead, page-cache residency, cold read latency, throughput by"
    " block size and by parallel readers, RAM and cgroup limit, the Hugging Face cache."
    " Reads only; evicts the files from this machine's page cache to measure them cold.",
    arguments=(
        *MEASURING,
        opt(
            "--fio",
            action="store_true",
            help="also run the fio jobs that reproduce the measurements (read-only, up to ~30 s)"
            " and show fio's figures beside the probe's",
        ),
        budget("time budget for the whole probe run (default 15)", 15.0),
    ),
    run=run,
    target="required",
)
