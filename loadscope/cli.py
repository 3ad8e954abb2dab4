"""The ``loadscope`` command line: one error funnel, one line per problem, documented exit codes.

Subcommands parse their arguments here and call the engine; they print either a
human report or ``--json``. Every :class:`~loadscope.base.errors.LoadscopeError` becomes
``loadscope: <message>`` on stderr and its exit code; anything else is a bug,
reported in one line too (``LOADSCOPE_DEBUG=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from loadscope.base._version import __version__
from loadscope.base.errors import ExitCode, LoadscopeError, PathNotFound, PermissionDenied
from loadscope.base.safeio import STALL_TIMEOUT_S, stuck_reads
from loadscope.base.units import format_bytes, parse_duration, parse_rate, parse_size
from loadscope.diagnosis.doctor import load_report as _load_report

if TYPE_CHECKING:
    from pathlib import Path

    from loadscope.engine.bench import CacheMode

PROG = "loadscope"

_DESCRIPTION = """\
Why does this model load slowly here, and what should change?
loadscope inspects checkpoints, probes the storage under them, benchmarks the
ways to load them and recommends the fix the numbers support.

TARGET is any of:
  path/to/model.safetensors        one safetensors file
  path/to/pytorch_model.bin        a torch checkpoint (.bin, .pt, .pth; never unpickled)
  path/to/model-dir                all shards (follows model.safetensors.index.json)
  org/name[@revision]              a Hugging Face repo from the LOCAL cache only
  synthetic:SIZE[,shards=N][,format=safetensors|torch|both][,seed=S]
                                   a synthetic checkpoint, removed afterwards
"""

_EXIT_CODES = "\n".join(
    f"  {code.value:>3}  {code.name.lower().replace('_', '-')}" for code in ExitCode
)
_EPILOG = f"""\
examples:
  loadscope doctor ~/models/llama --md report.md
  loadscope inspect synthetic:1GiB
  loadscope probe ~/models/llama --json probe.json
  loadscope inspect ~/models/llama --json
  loadscope synth /tmp/model --size 2GiB --shards 4 --format both

exit codes:
{_EXIT_CODES}
"""


class UsageError(LoadscopeError):
    """An argument that parses but makes no sense."""

    exit_code = ExitCode.USAGE


class OutputError(LoadscopeError):
    """A report file that cannot be written."""

    exit_code = ExitCode.IO_ERROR


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so ``finally`` blocks clean up (temp checkpoints)."""


def _on_sigterm(_signum: int, _frame: FrameType | None) -> NoReturn:
    raise _Terminated


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rate(text: str) -> float:
    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _Number:
    """An argparse ``type``: a finite number within a declared range, checked as it is parsed.

    One declaration per option gives the conversion and the range; an error names what the
    option takes (``argument --threads: must be at least 1, not '0'``) and exits 2 before
    any work starts.
    """

    def __init__(
        self,
        kind: Callable[[str], float],
        lo: float | None = None,
        hi: float | None = None,
        *,
        above: float | None = None,
        what: str = "",
        why: str = "",
    ) -> None:
        self.kind, self.lo, self.hi, self.above = kind, lo, hi, above
        self.what, self.why = what, why

    def rule(self) -> str:
        def num(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"

        if self.above is not None:
            text = f"must be a {self.what or 'number'} above {num(self.above)}"
        elif self.lo is not None and self.hi is not None:
            text = f"must be between {num(self.lo)} and {num(self.hi)}"
        elif self.lo == 0:
            text = "cannot be negative"
        elif self.lo is not None:
            text = f"must be at least {num(self.lo)}"
        else:
            text = f"must be a {self.what or 'number'}"
        return text + (f" ({self.why})" if self.why else "")

    def __call__(self, text: str) -> float:
        try:
            value = self.kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{self.rule()}, not {text!r}") from None
        bad = (
            not math.isfinite(value)
            or (self.above is not None and value <= self.above)
            or (self.lo is not None and value < self.lo)
            or (self.hi is not None and value > self.hi)
        )
        if bad:
            raise argparse.ArgumentTypeError(f"{self.rule()}, not {text!r}")
        return value

    def __repr__(self) -> str:  # argparse names the type in some messages
        return self.what or "number"


def _int(text: str) -> int:
    return int(text.strip())


def _seconds_value(text: str) -> float:
    return parse_duration(text)


#: Positive seconds (budgets, timeouts): 30, 30s, 500ms.
_SECONDS = _Number(_seconds_value, above=0, what="number of seconds")
_COUNT = _Number(_int, 1, what="integer")
_THREADS = _Number(_int, 1, 1024, what="integer")
_RANKS = _Number(_int, 1, 1024, what="integer")
_PORT = _Number(_int, 1, 65535, what="port")
_SEED = _Number(_int, 0, 2**32 - 1, what="integer")
_KIB = _Number(_int, 0, 1 << 20, what="integer")
_SERVER_THREADS = _Number(_int, 1, 1024, what="integer", why="no thread would answer a read")
_MAX_BACKGROUND = _Number(_int, 1, 65535, what="integer")
_MAX_READ = _Number(_int, 4, 1024, what="integer", why="FUSE requests are 4 KiB to 1 MiB")
_PROBABILITY = _Number(float, 0, 1, what="probability")
_SHARDS = _Number(_int, 1, 100_000, what="integer")
_BANDWIDTH = _Number(parse_rate, above=0, what="rate")
_BLOCK = _Number(parse_size, 4096, 1 << 30, what="size", why="4KiB to 1GiB")

_JOIN_TIMEOUT_S = 120.0
_HEARTBEAT_TIMEOUT_S = 10.0

_DEVICE_FORMS = "cpu, cuda or cuda:N"


def _device(text: str) -> str:
    """``--device`` of bench: cpu, cuda, cuda:N."""
    value = text.strip().lower()
    if value in ("cpu", "cuda"):
        return value
    head, sep, index = value.partition(":")
    if head == "cuda" and sep and index.isdigit():
        return f"cuda:{int(index)}"
    raise argparse.ArgumentTypeError(f"unknown device {text!r} (expected {_DEVICE_FORMS})")


def _device_or_auto(text: str) -> str:
    """``--device`` of doctor: auto, or what bench takes."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return _device(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"unknown device {text!r} (expected auto, {_DEVICE_FORMS})"
        ) from None


def _check_device_usable(device: str) -> None:
    """A GPU device asked for explicitly must be one torch can use here, before any work.

    A worker answers (the parent never imports torch): the same check the GPU strategies
    make, so no run starts whose every trial would fail on it.
    """
    if not device.startswith("cuda"):
        return
    from loadscope.engine.bench import BenchError, describe_strategies

    try:
        info = describe_strategies().get("mmap-cuda") or {}
    except BenchError as exc:
        raise UsageError(f"--device {device}: cannot check the GPU: {exc}") from None
    if info.get("unavailable"):
        raise UsageError(f"--device {device}: not usable here: {info['unavailable']}")


def _target_command(
    sub: Any, name: str, *, help: str, description: str, optional: bool = False
) -> argparse.ArgumentParser:
    """A subcommand taking TARGET (and --synth-dir for synthetic: targets)."""
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_DESCRIPTION.split("\n\n", 1)[1],
    )
    p.add_argument(
        "target",
        metavar="TARGET",
        nargs="?" if optional else None,
        help="file, directory, org/name or synthetic:SIZE",
    )
    p.add_argument(
        "--synth-dir",
        metavar="DIR",
        help="where a synthetic: target is built (default: the system temp dir)",
    )
    return p


def _report_args(p: argparse.ArgumentParser) -> None:
    """--json FILE|- and --allow-drop-caches, shared by the measuring commands."""
    p.add_argument(
        "--json",
        metavar="FILE",
        help="also write the full result as JSON to FILE ('-' for stdout, instead of the summary)",
    )
    p.add_argument(
        "--allow-drop-caches",
        action="store_true",
        help="write /proc/sys/vm/drop_caches when per-file eviction fails (host-wide; root)",
    )


def _stall_timeout_arg(p: argparse.ArgumentParser, verb: str) -> None:
    p.add_argument(
        "--stall-timeout",
        type=_SECONDS,
        default=STALL_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up when no byte was {verb} for SECONDS (default {STALL_TIMEOUT_S:g})",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = _target_command(
        sub,
        "inspect",
        help="what a checkpoint holds: files, bytes, tensors, dtypes, sizes (headers only)",
        description="Read checkpoint headers (never the data, never a pickle) and report files,"
        " bytes, tensor count, dtype mix, a tensor-size histogram and unaligned offsets.",
    )
    p.add_argument(
        "--json", action="store_true", help="print the report as JSON (schema_version 1)"
    )
    p.set_defaults(run=_cmd_inspect)

    p = _target_command(
        sub,
        "probe",
        help="what storage the model sits on and how it behaves cold (read-only, seconds)",
        description="Probe the storage under TARGET's weight files: mount and storage class,"
        " block device chain, readahead, page-cache residency, cold read latency, throughput by"
        " block size and by parallel readers, RAM and cgroup limit, the Hugging Face cache."
        " Reads only; evicts the files from this machine's page cache to measure them cold.",
    )
    _report_args(p)
    p.add_argument(
        "--budget",
        type=_SECONDS,
        default=15.0,
        metavar="SECONDS",
        help="time budget for the whole probe run (default 15)",
    )
    p.set_defaults(run=_cmd_probe)

    p = _target_command(
        sub,
        "bench",
        help="run loader strategies side by side, cold and warm, in isolated workers",
        description="Load TARGET with each strategy in a fresh worker process, interleaved"
        " (A B C A B C ...), from a verified cold and/or warm page cache; report median time,"
        " throughput, x vs mmap load_file, faults, I/O sizes and peak RSS, and check every"
        " strategy returns the same tensors. One warm-up round is reported as first-run cost.",
        optional=True,
    )
    _report_args(p)
    p.add_argument(
        "--strategies",
        metavar="A,B,...",
        help="comma-separated (default: every one that applies; see --list-strategies)",
    )
    p.add_argument(
        "--cache",
        choices=("cold", "warm", "both"),
        default="cold",
        help="page-cache state (default cold)",
    )
    p.add_argument(
        "--repeats", type=_COUNT, default=3, help="timed rounds after the warm-up (default 3)"
    )
    p.add_argument("--no-warmup", action="store_true", help="skip the warm-up round")
    p.add_argument(
        "--budget",
        type=_SECONDS,
        metavar="SECONDS",
        help="fit the run in SECONDS: sample the model and extrapolate when full loads do not fit",
    )
    p.add_argument(
        "--device",
        default="cpu",
        type=_device,
        metavar="cpu|cuda[:N]",
        help="where tensors land: cpu runs the CPU strategies, cuda[:N] the GPU ones"
        " (mmap-cuda, read-to-cuda, staged, gds)",
    )
    p.add_argument(
        "--ranks",
        type=_RANKS,
        metavar="N",
        help="N local ranks through torch.distributed (gloo on CPU, NCCL on GPU): independent"
        " reads vs rank-0 read + broadcast (sync, async) vs sharded read + broadcast",
    )
    p.add_argument(
        "--modes",
        metavar="A,B,...",
        help="with --ranks: independent,broadcast,broadcast-async,sharded (default all)",
    )
    p.add_argument(
        "--knob",
        action="append",
        default=[],
        metavar="STRATEGY.NAME=VALUE",
        help="override a strategy knob, e.g. parallel.threads=16 (repeatable)",
    )
    p.add_argument(
        "--trial-timeout",
        type=_SECONDS,
        default=600.0,
        metavar="SECONDS",
        help="kill a trial after this",
    )
    p.add_argument("--list-strategies", action="store_true", help="list strategies and exit")
    p.set_defaults(run=_cmd_bench)

    p = _target_command(
        sub,
        "doctor",
        help="the diagnosis: probes, the trials they call for, and evidenced advice",
        description="Probe the storage, run the loader trials the probes call for (cold and"
        " warm, sampled for big models to fit the budget), and recommend what the"
        " measurements support, with the expected gain, its cost and copy-paste code. Exit"
        " code 0 when healthy, 10 when a problem worth fixing was found. Without TARGET, a"
        " 512 MiB synthetic checkpoint.",
        optional=True,
    )
    _report_args(p)
    p.add_argument(
        "--md", metavar="FILE|-", help="also write the report as Markdown (for an issue); - stdout"
    )
    p.add_argument(
        "--html", metavar="FILE|-", help="also write a self-contained HTML report; - stdout"
    )
    p.add_argument(
        "--try-readahead",
        action="store_true",
        help="when raising readahead is advised, measure it: set 8 MiB for this mount (root),"
        " re-run the mmap trial, restore the old value",
    )
    p.add_argument(
        "--redact-hosts",
        action="store_true",
        help="hide the hostname and the model's paths in the written reports",
    )
    p.add_argument(
        "--budget",
        type=_SECONDS,
        default=120.0,
        metavar="SECONDS",
        help="time budget for the whole diagnosis (default 120)",
    )
    p.add_argument(
        "--device",
        default="auto",
        type=_device_or_auto,
        metavar="auto|cpu|cuda[:N]",
        help="where tensors land (default auto: the GPU when torch can use one)",
    )
    p.add_argument(
        "--ranks",
        type=_RANKS,
        metavar="N",
        help="add N-rank trials: independent reads vs rank-0 read + broadcast vs sharded"
        " (default: one rank per GPU when there are several)",
    )
    p.set_defaults(run=_cmd_doctor)

    p = sub.add_parser(
        "report",
        help="render a saved doctor report (JSON) again, as Markdown",
        description="Render FILE.json written by 'doctor --json' as Markdown for an issue.",
    )
    p.add_argument("file", metavar="FILE.json")
    p.add_argument("--md", action="store_true", help="Markdown (the default)")
    p.add_argument("--html", action="store_true", help="self-contained HTML instead")
    p.set_defaults(run=_cmd_report)

    p = sub.add_parser(
        "compare",
        help="one row per doctor report (one per node), outliers marked",
        description="Compare doctor reports from several nodes: storage class, cold latency,"
        " best strategy and its throughput, verdict; nodes far from the median are marked.",
    )
    p.add_argument("files", metavar="REPORT.json", nargs="+")
    p.set_defaults(run=_cmd_compare)

    p = _target_command(
        sub,
        "warm",
        help="put the model in the page cache (vmtouch -t for models), or --evict it",
        description="Read every weight file of TARGET in parallel large blocks so the next load"
        " is served from RAM, with each file's residency before and after. Refuses, saying how"
        " much is missing, when the uncached part does not fit in available memory or the"
        " cgroup limit. --lock keeps the files resident (mlock; root or ulimit -l) until"
        " interrupted; --evict drops them from this machine's page cache, verified (for cold"
        " tests). Reads only: never writes, moves or deletes the model.",
    )
    p.add_argument("--threads", type=_THREADS, default=8, help="parallel readers (default 8)")
    p.add_argument(
        "--block", type=_BLOCK, default=parse_size("16MiB"), help="read size (default 16MiB)"
    )
    p.add_argument("--lock", action="store_true", help="mlock the files until interrupted")
    p.add_argument(
        "--for",
        dest="hold",
        type=_SECONDS,
        metavar="SECONDS",
        help="with --lock: release after SECONDS instead of waiting for Ctrl-C",
    )
    p.add_argument("--evict", action="store_true", help="drop the files from the page cache")
    _stall_timeout_arg(p, "read")
    p.add_argument(
        "--allow-drop-caches",
        action="store_true",
        help="with --evict: write /proc/sys/vm/drop_caches when a file will not evict",
    )
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON ('-': stdout)")
    p.set_defaults(run=_cmd_warm)

    p = _target_command(
        sub,
        "copy",
        help="copy the model to a local disk: verified, resumable, never touching the source",
        description="Copy TARGET's weight files and the config/tokenizer files beside them to"
        " DEST (a Hugging Face snapshot's layout preserved). Free space is checked first; each"
        " file is written under a temporary name, fsynced, read back and compared with the"
        " source, then renamed; an existing different file is never overwritten without"
        " --force; rerun to resume an interrupted copy. Without DEST, suggests local"
        " directories measured by the probes. --report DOCTOR.json adds the break-even.",
    )
    p.add_argument("dest", metavar="DEST", nargs="?", help="destination directory")
    p.add_argument("--threads", type=_THREADS, default=4, help="parallel block copies (default 4)")
    p.add_argument("--force", action="store_true", help="replace files that differ in DEST")
    _stall_timeout_arg(p, "copied")
    p.add_argument(
        "--report",
        metavar="DOCTOR.json",
        help="a doctor report of this model: prints the copy's break-even from its cold load",
    )
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON ('-': stdout)")
    p.set_defaults(run=_cmd_copy)

    p = sub.add_parser(
        "cluster",
        help="onboard a cluster: every node diagnoses itself, rank 0 writes the fleet report",
        description="Run under torchrun, one process per node: torchrun --nnodes=N"
        " --nproc-per-node=1 --node-rank=I --master-addr=HOST0 --master-port=29500"
        " -m loadscope cluster TARGET --out DIR. Each node runs the doctor within --budget;"
        " rank 0 writes DIR/node-I.json for every node plus fleet.md, fleet.html and"
        " fleet.json (outliers marked; a node that failed or stopped answering is named with"
        " its reason). With --hosts, print the line to run on each node instead.",
    )
    p.add_argument("target", metavar="TARGET", help="a path every node sees, or synthetic:SIZE")
    p.add_argument("--out", default="loadscope-fleet", metavar="DIR", help="(rank 0) reports")
    p.add_argument(
        "--budget", type=_SECONDS, default=60.0, metavar="SECONDS", help="per node (default 60)"
    )
    p.add_argument(
        "--hosts", metavar="H0,H1,...", help="print the torchrun line for each host and exit"
    )
    p.add_argument("--port", type=_PORT, default=29500, help="master port for --hosts (1-65535)")
    p.add_argument(
        "--join-timeout",
        type=_SECONDS,
        default=_JOIN_TIMEOUT_S,
        metavar="SECONDS",
        help="how long rank 0 waits for a node that never joined (default 120)",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=_SECONDS,
        default=_HEARTBEAT_TIMEOUT_S,
        metavar="SECONDS",
        help="a node silent this long is reported failed (default 10)",
    )
    p.add_argument("--synth-dir", help="where synthetic checkpoints are built")
    p.set_defaults(run=_cmd_cluster)

    p = sub.add_parser(
        "demo",
        help="see the slow-disk pathology on a synthetic model through an emulated network disk",
        description="Build a synthetic checkpoint, serve it through the emulated slow disk"
        " (FUSE, root; else the local disk, with the reason) and diagnose it. Removes"
        " everything it made.",
    )
    p.add_argument(
        "--size", type=_size, default=parse_size("512MiB"), help="model size (default 512MiB)"
    )
    p.add_argument(
        "--latency", type=_duration, default=0.005, help="per-request delay (default 5ms)"
    )
    p.add_argument(
        "--readahead-kb", type=_KIB, default=128, help="the mount's readahead (default 128)"
    )
    p.add_argument(
        "--max-background",
        type=_MAX_BACKGROUND,
        default=12,
        help="async requests in flight (default 12)",
    )
    p.add_argument(
        "--budget",
        type=_SECONDS,
        default=40.0,
        metavar="SECONDS",
        help="diagnosis budget (default 40)",
    )
    p.add_argument("--work-dir", metavar="DIR", help="where to build it (default /var/tmp)")
    p.add_argument(
        "--block",
        action="store_true",
        help="serve it as a network block volume (ext4 on a loop device over the slow disk)",
    )
    p.set_defaults(run=_cmd_demo)

    p = _target_command(
        sub,
        "tui",
        help="the terminal app: onboarding, live throughput charts, advice, export",
        description="Open the Textual app (also: loadscope with no arguments). With TARGET it"
        " starts the diagnosis at once; without, a guided onboarding picks the model. Needs a"
        " terminal; headless, use 'loadscope doctor'.",
        optional=True,
    )
    p.add_argument(
        "--budget",
        type=_SECONDS,
        default=None,
        metavar="SECONDS",
        help="time budget of the diagnosis (default 120 s)",
    )
    p.add_argument(
        "--emulate",
        action="store_true",
        help="serve the model through the emulated slow network disk (FUSE, root)",
    )
    p.add_argument("--report", metavar="FILE.json", help="open a saved doctor report instead")
    p.set_defaults(tui=True)

    p = sub.add_parser(
        "emulate",
        help="mount a directory as an emulated slow network disk (FUSE, root)",
        description="Serve SRC read-only at MOUNTPOINT through FUSE, with a latency on every"
        " read request, a shared bandwidth cap and explicit readahead, so the network-disk"
        " pathology reproduces on a fast local disk. Runs in the foreground until Ctrl-C or"
        " SIGTERM, then unmounts; it also exits and unmounts when its parent dies.",
    )
    p.add_argument("source", metavar="SRC", nargs="?", help="directory to serve")
    p.add_argument(
        "mountpoint", metavar="MOUNTPOINT", nargs="?", help="empty directory to mount on"
    )
    p.add_argument(
        "--latency", type=_duration, default=0.002, help="per-request delay (default 2ms)"
    )
    p.add_argument(
        "--jitter", type=_duration, default=0.0005, help="+/- uniform jitter (default 0.5ms)"
    )
    p.add_argument(
        "--bandwidth", type=_BANDWIDTH, default=None, help="shared cap, e.g. 200MB/s (default none)"
    )
    p.add_argument(
        "--threads", type=_SERVER_THREADS, default=16, help="server threads (default 16)"
    )
    p.add_argument(
        "--readahead-kb", type=_KIB, default=128, help="kernel readahead (default 128; 0 = none)"
    )
    p.add_argument(
        "--max-read-kb", type=_MAX_READ, default=1024, help="largest read request (default 1024)"
    )
    p.add_argument(
        "--max-background",
        type=_MAX_BACKGROUND,
        default=12,
        help="async requests in flight (default 12)",
    )
    p.add_argument("--direct-io", action="store_true", help="bypass the page cache for every read")
    p.add_argument(
        "--log-requests", metavar="FILE", help="append 'ns offset size path' per read to FILE"
    )
    p.add_argument("--seed", type=_SEED, default=0, help="seed of the jitter")
    p.add_argument(
        "--fail-after",
        type=_size,
        metavar="BYTES",
        help="fault: every read after BYTES served fails with EIO",
    )
    p.add_argument(
        "--stall-after",
        type=_size,
        metavar="BYTES",
        help="fault: every read after BYTES served never answers (until unmount)",
    )
    p.add_argument("--stall", action="store_true", help="fault: no read ever answers")
    p.add_argument(
        "--eio-rate",
        type=_PROBABILITY,
        default=0.0,
        metavar="P",
        help="fault: fail reads at random (a probability, 0 to 1)",
    )
    p.add_argument(
        "--unmount", metavar="MOUNTPOINT", help="unmount a (possibly stale) emulator mount and exit"
    )
    p.add_argument(
        "--block",
        action="store_true",
        help="a network block volume instead: SRC's files in an ext4 image on the slow disk,"
        " attached to a loop device and mounted read-only (findmnt shows ext4 on /dev/loopN;"
        " the block layer's readahead, merging and queue apply; root, mkfs.ext4)",
    )
    # Internal: the FUSE server process itself, as the supervisor (emulated_disk) starts it.
    p.add_argument("--serve-here", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(run=_cmd_emulate)

    p = sub.add_parser(
        "synth",
        help="write a synthetic checkpoint shaped like a decoder LLM",
        description="Write a deterministic synthetic checkpoint shaped like a decoder LLM"
        " (large embedding, attention and MLP matrices, small norms and biases;"
        " bf16/fp16/fp32), with an index when sharded.",
    )
    p.add_argument("out", metavar="OUT", help="output directory (created if missing)")
    p.add_argument(
        "--size",
        type=_size,
        default=parse_size("1GiB"),
        help="total tensor bytes, e.g. 512MiB, 2GiB (default 1GiB)",
    )
    p.add_argument("--shards", type=_SHARDS, default=1, help="number of weight files (default 1)")
    p.add_argument(
        "--format",
        choices=("safetensors", "torch", "both"),
        default="safetensors",
        help="safetensors, a torch zip checkpoint, or both with identical tensors",
    )
    p.add_argument(
        "--seed", type=_SEED, default=0, help="seed of the pseudo-random contents (default 0)"
    )
    p.add_argument(
        "--force", action="store_true", help="overwrite files of a previous synth in OUT"
    )
    p.set_defaults(run=_cmd_synth)
    return parser


def _cmd_inspect(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.model.inspection import inspect_target, to_json, to_text
    from loadscope.model.targets import open_target

    with open_target(args.target, synth_dir=args.synth_dir) as target:
        report = inspect_target(target)
        out.write((to_json(report) if args.json else to_text(report)) + "\n")
    return ExitCode.OK


def _cmd_probe(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.engine.probing import run_probes, to_text
    from loadscope.model.inspection import open_checked

    live = sys.stderr.isatty()

    def progress(step: str) -> None:
        if live:
            sys.stderr.write(f"\r  probing: {step:<40}")
            sys.stderr.flush()

    with open_checked(args.target, synth_dir=args.synth_dir) as target:
        try:
            report = run_probes(
                target,
                budget_s=args.budget,
                allow_drop_caches=args.allow_drop_caches,
                progress=progress,
            )
        finally:
            if live:
                sys.stderr.write("\r" + " " * 52 + "\r")
    return _emit(out, args.json, report.to_json(), to_text(report))


def _emit(out: TextIO, json_path: str | None, json_text: str, summary: str) -> ExitCode:
    """The summary on stdout and the JSON in a file, or only the JSON with ``--json -``."""
    if json_path == "-":
        out.write(json_text + "\n")
        return ExitCode.OK
    if json_path:
        _write_file(json_path, json_text + "\n")
    out.write(summary + "\n")
    if json_path:
        out.write(f"full result: {json_path}\n")
    return ExitCode.OK


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse a report path that cannot be written before any work, not after it."""
    from pathlib import Path

    for option in ("json", "md", "html"):
        path = getattr(args, option, None)
        if not isinstance(path, str) or path == "-":
            continue
        target = Path(path)
        parent = target.parent
        try:
            if target.is_dir():
                raise OutputError(f"cannot write {path}: it is a directory")
            if not target.exists() and not parent.is_dir():
                raise PathNotFound(f"cannot write {path}: no directory {parent}")
            if os.statvfs(parent).f_flag & os.ST_RDONLY:
                raise OutputError(f"cannot write {path}: {parent} is on a read-only filesystem")
            _try_write(target)
        except PermissionError:
            raise PermissionDenied(f"cannot write {path}: permission denied") from None
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _try_write(target: Path) -> None:
    """Open ``target`` for writing the way the report will be, changing nothing: an existing
    file is opened without truncation; otherwise a probe file is created beside it and
    removed (root may still be refused by /sys or /proc, which access() does not show)."""
    if target.exists():
        os.close(os.open(target, os.O_WRONLY | os.O_CLOEXEC))
        return
    probe = target.parent / f".{target.name}.loadscope-write-check-{os.getpid()}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.close(fd)
    os.unlink(probe)


def _write_file(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except PermissionError:
        raise PermissionDenied(f"cannot write {path}: permission denied") from None
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror}") from None


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


def _cmd_bench(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.engine.bench import (
        BenchOptions,
        TrialFinished,
        TrialProgress,
        TrialStarted,
        describe_strategies,
        run_bench,
        to_text,
    )
    from loadscope.model.inspection import open_checked

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
        strategies = tuple(s.strip() for s in args.strategies.split(",") if s.strip())
        if not strategies:
            raise UsageError("--strategies is empty (see --list-strategies)")
    options = BenchOptions(
        strategies=strategies,
        cache=cache,
        repeats=args.repeats,
        warmup=not args.no_warmup,
        budget_s=args.budget,
        knobs=_parse_knobs(args.knob),
        trial_timeout_s=args.trial_timeout,
        allow_drop_caches=args.allow_drop_caches,
    )
    _check_device_usable(args.device)
    if args.ranks is not None:
        return _bench_ranks(args, out, cache)
    options = dataclasses.replace(options, device=args.device)
    live = sys.stderr.isatty()
    current: dict[str, str] = {}

    def listen(event: object) -> None:
        if not live:
            return
        if isinstance(event, TrialStarted):
            t = event.trial
            warmup = " (warm-up)" if t.warmup else ""
            current["label"] = f"[{event.index + 1}/{event.total}] {t.strategy} {t.cache}{warmup}"
            sys.stderr.write(f"\r{current['label']:<60}")
        elif isinstance(event, TrialProgress) and event.total_bytes:
            pct = 100 * event.bytes_done / event.total_bytes
            rate = event.bytes_done / event.seconds if event.seconds > 0 else 0
            sys.stderr.write(
                f"\r{current.get('label', ''):<44} {pct:5.1f}% {format_bytes(rate)}/s   "
            )
        elif isinstance(event, TrialFinished):
            sys.stderr.write("\r" + " " * 78 + "\r")
        sys.stderr.flush()

    # Every header first: a hostile or broken file fails here, before any worker starts.
    with open_checked(args.target, synth_dir=args.synth_dir, loads=True) as target:
        report = run_bench(target, options, listen)
    return _emit(out, args.json, report.to_json(), to_text(report))


def _cmd_doctor(args: argparse.Namespace, out: TextIO) -> ExitCode:
    import json

    from loadscope.diagnosis.doctor import redact, run_doctor, to_markdown, to_text
    from loadscope.model.inspection import open_checked

    to_stdout = [f"--{o}" for o in ("json", "md", "html") if getattr(args, o) == "-"]
    if len(to_stdout) > 1:
        raise UsageError(f"only one report can go to stdout ('-'), not {' and '.join(to_stdout)}")
    _check_device_usable(args.device)
    spec = args.target or "synthetic:512MiB"
    if sys.stderr.isatty():
        sys.stderr.write(f"diagnosing {spec} (budget {args.budget:g} s) ...\n")
    with open_checked(spec, synth_dir=args.synth_dir, loads=True) as target:
        report = run_doctor(
            target,
            budget_s=args.budget,
            try_readahead=args.try_readahead,
            device=args.device,
            ranks=args.ranks,
        )
    from loadscope.report.html import to_html

    doc = redact(report.to_dict()) if args.redact_hosts else report.to_dict()
    # '-' is stdout for every report format, as for --json: that report alone goes there.
    for path, render in ((args.md, to_markdown), (args.html, to_html)):
        if path == "-":
            out.write(render(doc) + "\n")
        elif path:
            _write_file(path, render(doc) + "\n")
    if "-" in (args.md, args.html):
        if args.json:
            _write_file(args.json, json.dumps(doc, indent=2, default=str) + "\n")
        return doctor_exit_code(report.advice.verdict.status)
    _emit(out, args.json, json.dumps(doc, indent=2, default=str), to_text(report))
    if args.md and args.json != "-":
        out.write(f"markdown: {args.md}\n")
    return doctor_exit_code(report.advice.verdict.status)


def doctor_exit_code(status: str) -> ExitCode:
    """0 healthy, 10 a problem worth fixing, 1 when nothing could be measured."""
    if status == "healthy":
        return ExitCode.OK
    if status == "unmeasured":
        return ExitCode.FAILURE
    return ExitCode.PROBLEM_FOUND


def _cmd_report(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.diagnosis.doctor import to_markdown
    from loadscope.report.html import to_html

    doc = _load_report(args.file)
    out.write((to_html(doc) if args.html else to_markdown(doc)) + "\n")
    return ExitCode.OK


def _cmd_compare(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.report.compare import compare, row_of, to_text

    rows = compare([row_of(path, _load_report(path)) for path in args.files])
    out.write(to_text(rows) + "\n")
    return ExitCode.OK


def _bench_ranks(args: argparse.Namespace, out: TextIO, cache: tuple[CacheMode, ...]) -> ExitCode:
    from loadscope.engine.broadcast import MODES, BroadcastOptions, run_broadcast
    from loadscope.engine.broadcast import to_text as ranks_text
    from loadscope.model.inspection import open_checked

    modes = tuple(m.strip() for m in (args.modes or "").split(",") if m.strip()) or MODES
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise UsageError(f"unknown mode {unknown[0]!r} (known: {', '.join(MODES)})")
    if args.device not in ("cpu", "cuda"):
        raise UsageError("--ranks takes --device cpu or cuda (each rank uses its own GPU)")
    options = BroadcastOptions(
        ranks=args.ranks,
        modes=modes,  # type: ignore[arg-type]
        cache=cache,
        repeats=args.repeats,
        warmup=not args.no_warmup,
        device=args.device,
        allow_drop_caches=args.allow_drop_caches,
    )
    with open_checked(args.target, synth_dir=args.synth_dir, loads=True) as target:
        report = run_broadcast(target, options)
    return _emit(out, args.json, report.to_json(), ranks_text(report))


def _progress_line(label: str) -> Callable[[int, int, float], None]:
    """A one-line progress meter on stderr (terminals only): bytes, rate, ETA."""
    live = sys.stderr.isatty()
    last = [0.0]

    def show(done: int, total: int, seconds: float) -> None:
        if not live or seconds - last[0] < 0.2:
            return
        last[0] = seconds
        rate = done / seconds if seconds > 0 else 0.0
        eta = f"{(total - done) / rate:.0f} s left" if rate > 0 else ""
        sys.stderr.write(
            f"\r{label} {format_bytes(done)} of {format_bytes(total)}"
            f"  {format_bytes(rate)}/s  {eta}   "
        )
        sys.stderr.flush()

    return show


def _clear_progress() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r" + " " * 78 + "\r")


def _cmd_warm(args: argparse.Namespace, out: TextIO) -> ExitCode:
    import json

    from loadscope.actions.warm import Locked, evict, warm
    from loadscope.model.inspection import open_checked

    if args.evict and args.lock:
        raise UsageError("--evict and --lock are opposites: pick one")
    with open_checked(args.target, synth_dir=args.synth_dir) as target:
        if args.evict:
            report = evict(target, allow_drop_caches=args.allow_drop_caches)
        else:
            try:
                report = warm(
                    target,
                    threads=args.threads,
                    block_bytes=args.block,
                    progress=_progress_line("warming"),
                    stall_timeout_s=args.stall_timeout,
                )
            finally:
                _clear_progress()
        lines = []
        for f in report.files:
            b = "unknown" if f.before is None else f"{f.before:.0%}"
            a = "unknown" if f.after is None else f"{f.after:.0%}"
            lines.append(f"{b:>8} -> {a:<8} {format_bytes(f.size_bytes):>10}  {f.path}")
        rate = f", {format_bytes(report.bytes_per_s)}/s" if report.bytes_per_s else ""
        head = (
            f"warmed {format_bytes(report.bytes_read)} in {report.seconds:.2f} s{rate}"
            if report.mode == "warm"
            else f"evicted {len(report.files)} file(s) in {report.seconds:.2f} s"
        )
        summary = "\n".join([head, "resident before -> after", *lines, *report.notes])
        locked = None
        if args.lock:
            locked = Locked([(f.path, f.size_bytes) for f in report.files])
            report.locked_bytes, report.lock_note = locked.bytes, locked.note
            summary += f"\nlocked {format_bytes(locked.bytes)} in RAM" + (
                f" ({locked.note})" if locked.note else ""
            )
        code = _emit(out, args.json, json.dumps(report.to_dict(), indent=2), summary)
        if locked is not None and locked.bytes:
            out.write(
                "holding the lock: Ctrl-C to release\n"
                if args.hold is None
                else f"holding the lock for {args.hold:g} s\n"
            )
            out.flush()
            try:
                if args.hold is None:
                    signal.pause()
                else:
                    time.sleep(args.hold)
            finally:
                locked.release()
        return code


def _cmd_copy(args: argparse.Namespace, out: TextIO) -> ExitCode:
    import json

    from loadscope.actions.localcopy import break_even, copy_model, pointer_lines
    from loadscope.model.inspection import open_checked

    with open_checked(args.target, synth_dir=args.synth_dir) as target:
        if args.dest is None:
            return _suggest_destinations(target, out)
        try:
            report = copy_model(
                target,
                args.dest,
                threads=args.threads,
                force=args.force,
                progress=_progress_line("copying"),
                stall_timeout_s=args.stall_timeout,
            )
        finally:
            _clear_progress()
    copied = [f for f in report.files if f.status == "copied"]
    kept = [f for f in report.files if f.status == "already-there"]
    rate = f", {format_bytes(report.bytes_per_s)}/s" if report.bytes_per_s else ""
    lines = [
        f"copied {len(copied)} file(s), {format_bytes(report.bytes_copied)} in"
        f" {report.seconds:.2f} s{rate}; {len(kept)} already there (verified)",
        "every file was fsynced, read back and matched the source; the source was not touched",
    ]
    if args.report:
        doc = _load_report(args.report)
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
            f"break-even: run `loadscope doctor {args.target} --json r.json`"
            " and pass --report r.json"
        )
    lines += ["point your stack at the copy:", *(f"  {x}" for x in pointer_lines(args.dest))]
    return _emit(out, args.json, json.dumps(report.to_dict(), indent=2), "\n".join(lines))


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


def _cmd_cluster(args: argparse.Namespace, out: TextIO) -> ExitCode:
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
        if args.join_timeout != _JOIN_TIMEOUT_S:
            forwarded += ["--join-timeout", f"{args.join_timeout:g}"]
        if args.heartbeat_timeout != _HEARTBEAT_TIMEOUT_S:
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
    fleet = run_cluster(
        args.target,
        out_dir=Path(args.out),
        budget_s=args.budget,
        env=env,
        synth_dir=args.synth_dir,
        join_timeout_s=args.join_timeout,
        heartbeat_timeout_s=args.heartbeat_timeout,
    )
    if fleet is None:
        out.write(f"node-{env.rank}: report sent to rank 0\n")
        return ExitCode.OK
    out.write(fleet_text(fleet) + "\n\n")
    for path in fleet.written:
        out.write(f"wrote {path}\n")
    return exit_code(fleet)


def _cmd_demo(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.diagnosis.demo import DemoOptions, run_demo
    from loadscope.tools.emulator import EmulatorSettings

    settings = EmulatorSettings(
        latency_s=args.latency, readahead_kb=args.readahead_kb, max_background=args.max_background
    )
    run_demo(
        DemoOptions(
            size_bytes=args.size,
            settings=settings,
            budget_s=args.budget,
            work_dir=args.work_dir,
            block=args.block,
        ),
        out,
    )
    return ExitCode.OK


def _cmd_emulate(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from pathlib import Path

    from loadscope.tools.emulator import (
        EmulatorError,
        EmulatorSettings,
        check_mountpoint,
        check_source,
        die_with_parent,
        emulated_disk,
        serve,
        unmount_emulator,
    )

    if args.unmount:
        if args.source or args.mountpoint:
            raise UsageError("emulate --unmount takes only the MOUNTPOINT")
        from loadscope.tools.blockemu import is_block_emulator_mount, unmount_block
        from loadscope.tools.emulator import mounts_at

        if any(is_block_emulator_mount(m) for m in mounts_at(args.unmount)):
            unmount_block(args.unmount)
        else:
            unmount_emulator(args.unmount)
        out.write(f"unmounted {args.unmount}\n")
        return ExitCode.OK
    if not args.source or not args.mountpoint:
        raise UsageError("emulate needs SRC and MOUNTPOINT (or --unmount MOUNTPOINT)")
    settings = EmulatorSettings(
        latency_s=args.latency,
        jitter_s=args.jitter,
        bandwidth_bytes_per_s=args.bandwidth,
        threads=args.threads,
        readahead_kb=args.readahead_kb,
        max_read_kb=args.max_read_kb,
        max_background=args.max_background,
        direct_io=args.direct_io,
        log_requests=args.log_requests,
        seed=args.seed,
        fail_after_bytes=args.fail_after,
        stall_after_bytes=0 if args.stall else args.stall_after,
        eio_rate=args.eio_rate,
    )
    if args.serve_here and args.block:
        from loadscope.tools.blockemu import serve_block

        serve_block(args.source, args.mountpoint, settings)  # handles its own signals
        return ExitCode.OK
    if args.serve_here:
        # The server itself (started by emulated_disk). libfuse installs its own
        # SIGINT/SIGTERM/SIGHUP handlers (leave the loop, unmount), but only over the
        # default disposition: hand the signals back to it.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        serve(args.source, args.mountpoint, settings)
        return ExitCode.OK
    # The user's command supervises a server child: a signal in any moment (even while
    # libfuse is still mounting, before its handlers exist) reaches this process, which
    # stops the server and unmounts whatever is there; never a mount left behind.
    check_source(args.source)
    if not Path(args.mountpoint).is_dir():
        raise EmulatorError(f"{args.mountpoint}: mount point is not a directory")
    check_mountpoint(args.mountpoint)
    # As the help says: when the shell or program that started us goes away, so do we
    # (SIGTERM, which unmounts below), also when it was started in the background.
    die_with_parent()
    if args.block:
        from loadscope.tools.blockemu import emulated_block_disk

        served: Any = emulated_block_disk(args.source, args.mountpoint, settings)
        what = "the emulated block volume"
    else:
        served = emulated_disk(args.source, args.mountpoint, settings)
        what = "the emulated disk"
    try:
        with served as disk:
            if sys.stderr.isatty():
                how = f"ext4 on {disk.loop} over a disk answering in " if args.block else ""
                sys.stderr.write(
                    f"serving {args.source} at {args.mountpoint}: {how}{args.latency * 1e3:g}"
                    f" ms per request, readahead {args.readahead_kb} KiB; Ctrl-C unmounts\n"
                )
            disk.process.wait()
    except (KeyboardInterrupt, _Terminated):
        out.write(f"unmounted {args.mountpoint}\n")  # the way to stop it: not an error
        return ExitCode.OK
    raise EmulatorError(f"{what} at {args.mountpoint} stopped on its own")


class _Progress:
    """A one-line progress meter on stderr when it is a terminal; silent otherwise."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.done, self.stream = total, 0, stream
        self.start = self.last = time.monotonic()
        self.live = stream.isatty()

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.live and now - self.last >= 0.2:
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            self.stream.write(
                f"\r  {format_bytes(self.done)} / {format_bytes(self.total)}"
                f"  {format_bytes(rate)}/s   "
            )
            self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\r" + " " * 60 + "\r")


def _cmd_synth(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.tools.synth import synthesize

    total = args.size * (2 if args.format == "both" else 1)
    progress = _Progress(total, sys.stderr)
    t0 = time.monotonic()
    try:
        result = synthesize(
            args.out,
            args.size,
            shards=args.shards,
            fmt=args.format,
            seed=args.seed,
            force=args.force,
            progress=progress,
        )
    finally:
        progress.close()
    elapsed = time.monotonic() - t0
    s = result.shape
    out.write(
        f"wrote {len(result.files)} file(s), {result.tensor_count} tensors,"
        f" {format_bytes(result.tensor_bytes)} of tensors per format to {result.root}"
        f" in {elapsed:.1f} s\n"
        f"shape: hidden {s.hidden}, {s.layers} layers, intermediate {s.intermediate},"
        f" {s.heads} heads ({s.kv_heads} kv), vocab {s.vocab}; seed {result.seed}\n"
    )
    return ExitCode.OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``loadscope`` console script and ``python -m loadscope``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace, TextIO], ExitCode] | None = getattr(args, "run", None)
    if getattr(args, "tui", False):
        print(f"{PROG}: the app starts from the '{PROG}' command", file=sys.stderr)
        return int(ExitCode.USAGE)
    if run is None:
        parser.print_help()
        return ExitCode.OK
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _check_outputs(args)
        return int(run(args, sys.stdout))
    except LoadscopeError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except _Terminated:
        print(f"{PROG}: terminated", file=sys.stderr)
        return int(ExitCode.TERMINATED)
    except BrokenPipeError:
        # stdout closed early (| head): not an error worth a message.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.OK)
    except Exception as exc:
        if os.environ.get("LOADSCOPE_DEBUG"):
            raise
        print(
            f"{PROG}: internal error: {type(exc).__name__}: {exc}"
            " (a bug: please report it; LOADSCOPE_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return int(ExitCode.INTERNAL)
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        if stuck := stuck_reads():
            print(
                f"{PROG}: {len(stuck)} read(s) still wait in the kernel (first: {stuck[0]}),"
                " unkillable: they end when the storage answers, or at once when it is"
                " unmounted (umount -f; FUSE: echo 1 > /sys/fs/fuse/connections/N/abort)",
                file=sys.stderr,
            )
