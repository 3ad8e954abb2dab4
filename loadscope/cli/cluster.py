"""``loadscope cluster``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from loadscope.base.errors import ExitCode
from loadscope.base.stack_names import STACKS
from loadscope.cli.common import (
    HEARTBEAT_TIMEOUT_S,
    JOIN_TIMEOUT_S,
    PORT,
    PROGRESS,
    RANKS,
    SECONDS,
    Command,
    UsageError,
    budget,
    comma_list,
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

    if args.k8s is not None:
        return _k8s(args, out)
    if args.hosts is not None:
        hosts = comma_list(args.hosts)
        if not hosts:
            raise UsageError("--hosts is empty: name the nodes, e.g. --hosts node0,node1")
        for host in hosts:
            if not valid_host(host):
                raise UsageError(f"--hosts: {host!r} is not a host name or an IP address")
        forwarded = _forwarded(args)
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
            stacks=tuple(dict.fromkeys(args.stack or ())),
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


def _forwarded(args: argparse.Namespace) -> list[str]:
    """The options each node's command is given as they were given here (not the defaults)."""
    forwarded: list[str] = []
    if args.join_timeout != JOIN_TIMEOUT_S:
        forwarded += ["--join-timeout", f"{args.join_timeout:g}"]
    if args.heartbeat_timeout != HEARTBEAT_TIMEOUT_S:
        forwarded += ["--heartbeat-timeout", f"{args.heartbeat_timeout:g}"]
    if args.synth_dir:
        forwarded += ["--synth-dir", args.synth_dir]
    for stack in dict.fromkeys(args.stack or ()):
        forwarded += ["--stack", stack]
    return forwarded


def _k8s(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.diagnosis.k8s import K8sPlan, check_name, manifest, to_yaml

    if not args.image:
        raise UsageError(
            "--k8s needs --image: an image with loadscope installed (e.g. one built from"
            " your training image with `pip install loadscope`)"
        )
    if why := check_name(args.name):
        raise UsageError(f"--name: {why}")
    if args.model_pvc and args.model_host_path:
        raise UsageError("--model-pvc and --model-host-path are two places: pick one")
    forwarded = _forwarded(args)
    plan = K8sPlan(
        nodes=args.k8s,
        target=args.target,
        image=args.image,
        name=args.name,
        namespace=args.namespace,
        port=args.port,
        out=args.out if args.out.startswith("/") else f"/{args.out}",
        model_pvc=args.model_pvc,
        model_host_path=args.model_host_path,
        out_pvc=args.out_pvc,
        budget_s=args.budget,
        options=forwarded,
    )
    fleet = (
        f"rank 0 writes the fleet report to {plan.out} on the volume {args.out_pvc}"
        if args.out_pvc
        else "rank 0 prints the fleet table in its log (kubectl logs"
        f" {args.name}-0-<suffix>); --out-pvc keeps the report files"
    )
    header = [
        f"loadscope cluster: {args.k8s} nodes, one pod each; kubectl apply -f this file.",
        fleet + ".",
    ]
    out.write(to_yaml(manifest(plan), header))
    return ExitCode.OK


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
        budget("per node (default 60)", 60.0),
        opt("--hosts", metavar="H0,H1,...", help="print the torchrun line for each host and exit"),
        opt("--port", type=PORT, default=29500, help="master port for --hosts and --k8s (1-65535)"),
        opt(
            "--k8s",
            type=RANKS,
            metavar="N",
            help="print a Kubernetes manifest (an Indexed Job of N pods, one per node, and a"
            " headless Service for the rendezvous) that runs this on N nodes, and exit",
        ),
        opt("--image", metavar="IMAGE", help="with --k8s: an image with loadscope installed"),
        opt(
            "--name",
            default="loadscope-onboard",
            help="with --k8s: the Job's and Service's name (default loadscope-onboard)",
        ),
        opt("--namespace", help="with --k8s: the namespace (default: kubectl's)"),
        opt(
            "--model-pvc",
            metavar="CLAIM",
            help="with --k8s: the PersistentVolumeClaim holding the model (ReadOnlyMany or"
            " ReadWriteMany: every node mounts it), read-only at the target's folder",
        ),
        opt(
            "--model-host-path",
            metavar="DIR",
            help="with --k8s: the node's directory holding the model (a hostPath), read-only",
        ),
        opt(
            "--out-pvc",
            metavar="CLAIM",
            help="with --k8s: a PersistentVolumeClaim (ReadWriteMany) for --out, where rank 0"
            " writes the fleet report",
        ),
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
        opt(
            "--stack",
            action="append",
            choices=STACKS,
            metavar="NAME",
            help="the stack the fleet runs (repeatable): each node times only its routes,"
            f" as doctor --stack does (default: every stack's): {', '.join(STACKS)}",
        ),
    ),
    run=run,
)
