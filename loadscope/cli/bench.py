"""``loadscope bench``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from loadscope.base.errors import ExitCode
from loadscope.cli.common import (
    COUNT,
    MEASURING,
    RANKS,
    SECONDS,
    Command,
    UsageError,
    budget,
    check_device_usable,
    comma_list,
    device_arg,
    emit,
    opt,
)
from loadscope.cli.progress import Progress, mode_for

if TYPE_CHECKING:
    from loadscope.engine.trials import CacheMode


def _parse_knobs(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--knob STRATEGY.NAME=VALUE`` items, checked against the strategies' declarations."""
    from loadscope.loaders.strategies import check_knobs

    knobs: dict[str, dict[str, str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        strategy, dot, name = key.partition(".")
        if not sep or not dot or not strategy or not name:
            raise UsageError(
                f"--knob {item!r}: expected STRATEGY.NAME=VALUE, e.g. parallel.threads=16"
            )
        knobs.setdefault(strategy.strip(), {})[name.strip()] = value
    try:
        return check_knobs(knobs)
    except ValueError as exc:
        raise UsageError(f"--knob {exc}") from None


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.engine.bench import BenchOptions, describe_strategies, run_bench
    from loadscope.model.inspection import open_checked
    from loadscope.report.bench_text import to_text

    if args.list_strategies:
        for name, info in describe_strategies().items():
            status = (
                f"unavailable: {info['unavailable']}" if info.get("unavailable") else "available"
            )
            out.write(f"{name:<16} {info['summary']}\n{'':<16} [{status}]\n")
            for knob, k in info.get("knobs", {}).items():
                out.write(
                    f"{'':<16} --knob {name}.{knob}={k['default']}  ({k.get('takes', '')};"
                    f" {k['help']})\n"
                )
        return ExitCode.OK
    if args.target is None:
        raise UsageError("bench needs a TARGET")
    cache: tuple[CacheMode, ...] = ("cold", "warm") if args.cache == "both" else (args.cache,)
    strategies = None
    if args.strategies is not None:
        strategies = tuple(comma_list(args.strategies))
        if not strategies:
            raise UsageError("--strategies is empty (see --list-strategies)")
    knobs = _parse_knobs(args.knob)
    unused = [name for name in knobs if strategies is not None and name not in strategies]
    if unused and args.ranks is None:
        raise UsageError(
            f"--knob {unused[0]}.{next(iter(knobs[unused[0]]))}: {unused[0]} is not among"
            f" --strategies {','.join(strategies or ())}"
        )
    options = BenchOptions(
        strategies=strategies,
        cache=cache,
        repeats=args.repeats,
        warmup=not args.no_warmup,
        budget_s=args.budget,
        knobs=knobs,
        trial_timeout_s=args.trial_timeout,
        allow_drop_caches=args.allow_drop_caches,
    )
    check_device_usable(args.device)
    if args.ranks is not None:
        return _bench_ranks(args, out, cache)
    options = dataclasses.replace(options, device=args.device)
    # Every header first: a hostile or broken file fails here, before any worker starts.
    with (
        open_checked(args.target, synth_dir=args.synth_dir, loads=True) as target,
        Progress(mode_for(args, sys.stderr), budget_s=args.budget) as progress,
    ):
        if args.budget is not None:
            # The budget is the run's: rounds it leaves no time for are skipped and
            # counted (its planner sizes samples, but a count like --repeats 1000 of
            # whole loads is the user's, and must not run on for minutes past it).
            options = dataclasses.replace(options, deadline=time.monotonic() + args.budget)
        report = run_bench(target, options, progress.listener)
    return emit(out, args.json, report.to_json(), to_text(report))


#: bench's default --trial-timeout.
TRIAL_TIMEOUT_S = 600.0


def _bench_ranks(args: argparse.Namespace, out: TextIO, cache: tuple[CacheMode, ...]) -> ExitCode:
    from loadscope.engine.broadcast import MODES, BroadcastOptions, check, run_broadcast
    from loadscope.model.inspection import open_checked
    from loadscope.report.rank_text import to_text as ranks_text

    modes = tuple(comma_list(args.modes or "")) or MODES
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise UsageError(f"unknown mode {unknown[0]!r} (known: {', '.join(MODES)})")
    if args.device not in ("cpu", "cuda"):
        raise UsageError("--ranks takes --device cpu or cuda (each rank uses its own GPU)")
    ignored = [
        flag
        for flag, given in (
            ("--strategies", args.strategies is not None),
            ("--knob", bool(args.knob)),
        )
        if given
    ]
    if ignored:
        raise UsageError(
            f"{' and '.join(ignored)} {'do' if len(ignored) > 1 else 'does'} not apply with"
            " --ranks: it runs the multi-rank modes"
            f" (--modes {','.join(MODES)}) on the whole model"
        )
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cpus and args.device == "cpu" and args.ranks > 4 * cpus:
        raise UsageError(
            f"--ranks {args.ranks} on {cpus} usable CPU(s): each rank is a process reading and"
            f" holding the model; more than {4 * cpus} would measure the scheduler, not the"
            " storage"
        )
    options = BroadcastOptions(
        ranks=args.ranks,
        modes=modes,  # type: ignore[arg-type]
        cache=cache,
        repeats=args.repeats,
        warmup=not args.no_warmup,
        device=args.device,
        allow_drop_caches=args.allow_drop_caches,
        # Only when given: the default scales with the model (two reads of it at 10 MB/s).
        trial_timeout_s=args.trial_timeout if args.trial_timeout != TRIAL_TIMEOUT_S else None,
    )
    with (
        open_checked(args.target, synth_dir=args.synth_dir, loads=True) as target,
        Progress(mode_for(args, sys.stderr), budget_s=args.budget) as progress,
    ):
        if not target.on_files:
            options = _on_a_store(target, options, given=bool(args.modes))
            modes = options.modes
        check(target, options)  # a refusal stands alone, before any progress line
        progress.step(f"{args.ranks} ranks: {', '.join(modes)}")
        if args.budget is not None:
            # As for the single-process trials: no trial starts that the budget has no
            # time left for (the ranks' start-up counts); the rest are skipped, counted.
            options = dataclasses.replace(options, deadline=time.monotonic() + args.budget)
        report = run_broadcast(target, options, progress.listener)
    code = emit(out, args.json, report.to_json(), ranks_text(report))
    # A rank that died or hung: the report names it, and the command fails.
    return ExitCode.FAILURE if report.failures else code


def _on_a_store(target: Any, options: Any, *, given: bool) -> Any:
    """``bench --ranks`` on a model in an object store: its modes (every rank fetching it,
    or the node fetching it once) unless ``--modes`` named others, cold only (every read
    is a fetch); another source than files or a store is refused in one line."""
    from loadscope.engine.broadcast import STORE_MODES
    from loadscope.model.targets import files_only
    from loadscope.probes.objclient import OBJECT_STORES

    if target.source not in OBJECT_STORES:
        files_only(target, "bench --ranks")
    return dataclasses.replace(
        options, modes=options.modes if given else STORE_MODES, cache=("cold",)
    )


COMMAND = Command(
    name="bench",
    help="run loader strategies side by side, cold and warm, in isolated workers",
    description="Load TARGET with each strategy in a fresh worker process, interleaved"
    " (A B C A B C ...), from a verified cold and/or warm page cache; report median time,"
    " throughput, x vs mmap load_file, faults, I/O sizes and peak RSS, and check every"
    " strategy returns the same tensors. One warm-up round is reported as first-run cost.",
    arguments=(
        *MEASURING,
        opt(
            "--strategies",
            metavar="A,B,...",
            help="comma-separated (default: every one that applies; see --list-strategies)",
        ),
        opt(
            "--cache",
            choices=("cold", "warm", "both"),
            default="cold",
            help="page-cache state (default cold)",
        ),
        opt("--repeats", type=COUNT, default=3, help="timed rounds after the warm-up (default 3)"),
        opt("--no-warmup", action="store_true", help="skip the warm-up round"),
        budget(
            "fit the run in SECONDS: sample the model and extrapolate when full loads do not fit"
        ),
        opt(
            "--device",
            default="cpu",
            type=device_arg,
            metavar="cpu|cuda[:N]",
            help="where tensors land: cpu runs the CPU strategies, cuda[:N] the GPU ones"
            " (mmap-cuda, read-to-cuda, staged, gds)",
        ),
        opt(
            "--ranks",
            type=RANKS,
            metavar="N",
            help="N local ranks through torch.distributed (gloo on CPU, NCCL on GPU): independent"
            " reads vs rank-0 read + broadcast (sync, async) vs sharded read + broadcast vs"
            " node-shared, beside what the stacks do with N ranks (each maps, each reads with"
            " O_DIRECT, one warm for the node)",
        ),
        opt(
            "--modes",
            metavar="A,B,...",
            help="with --ranks: independent,broadcast,broadcast-async,sharded,node-shared"
            " (loadscope's) and mmap,direct,warm-node (the stacks' own) (default all)",
        ),
        opt(
            "--knob",
            action="append",
            default=[],
            metavar="STRATEGY.NAME=VALUE",
            help="override a strategy knob, e.g. parallel.threads=16 (repeatable)",
        ),
        opt(
            "--trial-timeout",
            type=SECONDS,
            default=TRIAL_TIMEOUT_S,
            metavar="SECONDS",
            help="kill a trial after this",
        ),
        opt("--list-strategies", action="store_true", help="list strategies and exit"),
    ),
    run=run,
    target="optional",
)
