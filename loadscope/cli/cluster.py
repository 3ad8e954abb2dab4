"""``loadscope cluster``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.common import (
    HEARTBEAT_TIMEOUT_S,
    JOIN_TIMEOUT_S,
    PORT,
    PROGRESS,
    SECONDS,
    Command,
    UsageError,
    opt,
)
from loadscope.cli.progress import Progress, mode_for


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from pathlib import Path

    from loadscope.diagnosis.cluster import (
        ClusterEnv,
        exit_code,
        fleet_text,
        run_cluster,
        torchrun_lines,
        valid_host,
    )

    if args.hosts is not None:
        hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
        if not hosts:
            raise UsageError("--hosts is empty: name the nodes, e.g. --hosts node0,node1")
        for host in hosts:
            if not valid_host(host):
                raise UsageError(f"--hosts: {host!r} is not a host name or an IP address")
        forwarded: list[str] = []
        if args.join_timeout != JOIN_TIMEOUT_S:
            forwarded += ["--join-timeout", f"{args.join_timeout:g}"]
        if args.heartbeat_timeout != HEARTBEAT_TIMEOUT_S:
            forwarded += ["--heartbeat-timeout", f"{args.heartbeat_timeout:g}"]
        if args.synth_dir:
            forwarded += ["--synth-dir", args.synth_dir]
        out.write("Run on each node (the first host writes the fleet report):\n")
        lines = torchrun_lines(
            hosts,
            args.target,
            out=args.out,
            port=args.port,
            budget_s=args.budget,
            options=forwarded,
        )
        for host, line in zip(hosts, lines, strict=True):
            out.write(f"  [{host}] {line}\n")
        return ExitCode.OK
    env = ClusterEnv.from_environ()
    with Progress(mode_for(args, sys.stderr), budget_s=args.budget) as progress:
        fleet = run_cluster(
            args.target,
            out_dir=Path(args.out),
            budget_s=args.budget,
            env=env,
            synth_dir=args.synth_dir,
            join_timeout_s=args.join_timeout,
            heartbeat_timeout_s=args.heartbeat_timeout,
            listener=progress.listener,
            progress=lambda step: progress.step(f"node-{env.rank}: {step}"),
        )
    if fleet is None:
        out.write(f"node-{env.rank}: report sent to rank 0\n")
        return ExitCode.OK
    out.write(fleet_text(fleet) + "\n\n")
    for path in fleet.written:
        out.write(f"wrote {path}\n")
    return exit_code(fleet)


COMMAND = Command(
    name="cluster",
    help="onboard a cluster: every node diagnoses itself, rank 0 writes the fleet report",
    description="Run under torchrun, one process per node: torchrun --nnodes=N"
    " --nproc-per-node=1 --node-rank=I --master-addr=HOST0 --master-port=29500"
    " -m loadscope cluster TARGET --out DIR. Each node runs the doctor within --budget;"
    " rank 0 writes DIR/node-I.json for every node plus fleet.md, fleet.html and"
    " fleet.json (outliers marked; a node that failed or stopped answering is named with"
    " its reason). With --hosts, print the line to run on each node instead.",
    arguments=(
        opt("target", metavar="TARGET", help="a path every node sees, or synthetic:SIZE"),
        opt("--out", default="loadscope-fleet", metavar="DIR", help="(rank 0) reports"),
        *PROGRESS,
        opt(
            "--budget", type=SECONDS, default=60.0, metavar="SECONDS", help="per node (default 60)"
        ),
        opt("--hosts", metavar="H0,H1,...", help="print the torchrun line for each host and exit"),
        opt("--port", type=PORT, default=29500, help="master port for --hosts (1-65535)"),
        opt(
            "--join-timeout",
            type=SECONDS,
            default=JOIN_TIMEOUT_S,
            metavar="SECONDS",
            help="how long rank 0 waits for a node that never joined (default 120)",
        ),
        opt(
            "--heartbeat-timeout",
            type=SECONDS,
            default=HEARTBEAT_TIMEOUT_S,
            metavar="SECONDS",
            help="a node silent this long is reported failed (default 10)",
        ),
        opt("--synth-dir", help="where synthetic checkpoints are built"),
    ),
    run=run,
)
