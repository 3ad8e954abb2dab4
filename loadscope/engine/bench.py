"""``loadscope bench``: run loader strategies side by side, cold and warm, in isolated workers.

The plan is interleaved (A B C A B C ...) so every strategy sees the same
machine state, with one warm-up round reported as first-run cost and excluded
from the medians. Before each trial the cache is put in the asked state and
*verified* (cold: evicted and checked with mincore; warm: pre-read and
checked); a trial whose cache state could not be verified is marked and kept
out of the medians. Each trial runs in a fresh worker process in its own
process group, streams JSON-line events, and is killed on timeout; its tensors'
digests are compared with a reference read. Strategies that would hold the
model in RAM are skipped, with the numbers, when they would not fit.

Huge models: with ``--budget``, a pilot round on a sample estimates every
trial's fixed cost and load rate; when the plan does not fit, each strategy runs
on a sample sized to an equal share of the budget (whole shards where they are
small enough, else a span of tensors per file: :mod:`loadscope.engine.sampling`), at that
size and a quarter of it, and its whole-model time is the fitted fixed cost plus
the model at the fitted rate, with the fit's error. A strategy that loads whole
files runs on whole shards, runs whole, or is skipped with the reason: never
scaled from a tensor sample.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.planning import CostModel, plan_budget
from loadscope.engine.sampling import (
    SHARD_OVERSHOOT,
    SMALL_FRACTION,
    Fit,
    SampleSet,
    Scope,
    choose_sample,
    choose_shards,
    error_text,
    extrapolate,
    fit,
    sample_size,
    smaller_sample,
    smaller_shards,
)
from loadscope.engine.trials import (
    CacheMode,
    TrialStatus,
    exit_reason,
    interleaved,
    kill_group,
    median,
    reference_digests,
    speedups,
    spread,
)
from loadscope.loaders import forkserver
from loadscope.loaders.events import Done, Failed, Progress, ProtocolError, Start, decode
from loadscope.loaders.forkserver import ForkedProcess
from loadscope.loaders.pagefill import WARM_BLOCK_BYTES, WARM_THREADS, PageFill, whole_files
from loadscope.model.targets import Target, WeightFile
from loadscope.probes.pagecache import NOWAIT_SAMPLES, ColdCache, checked_fraction
from loadscope.probes.system import memory_headroom, oom_kills, page_cache_room

SCHEMA_VERSION = 1
#: Memory kept free beyond a strategy's predicted peak: the interpreter, torch, slack.
RUNTIME_OVERHEAD_BYTES = 600 << 20
WARM_ENOUGH = 0.95
#: The strategies that land tensors on a GPU (what the doctor runs with --device cuda):
#: safetensors' own device load, the pinned staging path, the common read-then-.to(),
#: and gds when kvikio is there. None holds the whole model in host RAM.
GPU_STRATEGIES = ("mmap-cuda", "staged", "read-to-cuda", "gds")
_SERIES_POINTS = 50
_STDERR_TAIL = 40
#: A trial running when the deadline passes may finish within this much more.
DEADLINE_GRACE_S = 10.0


class BenchError(LoadscopeError):
    exit_code = ExitCode.USAGE


class WorkerStartFailed(BenchError):
    """The interpreter for a loader worker cannot be started (missing, or not executable)."""

    def __init__(self, executable: str, exc: OSError) -> None:
        why = exc.strerror or str(exc)
        if isinstance(exc, PermissionError):
            why += " (this user may not execute it or a directory above it)"
            self.exit_code = ExitCode.PERMISSION
        super().__init__(f"cannot start a loader worker: {executable}: {why}")


class BenchCancelled(LoadscopeError):
    """The caller's cancel event was set: the running worker's group was killed."""

    exit_code = ExitCode.INTERRUPTED


@dataclass(frozen=True, slots=True)
class BenchOptions:
    strategies: tuple[str, ...] | None = None
    cache: tuple[CacheMode, ...] = ("cold",)
    repeats: int = 3
    warmup: bool = True
    budget_s: float | None = None
    knobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    hints: dict[str, Any] = field(default_factory=dict)
    trial_timeout_s: float = 600.0
    #: A hard end for the whole run (``time.monotonic()``): trials not started by then are
    #: skipped, and a running one is given at most a short grace past it.
    deadline: float | None = None
    #: Set from another thread to stop the run: the worker's process group is killed
    #: within ~0.1 s and run_bench raises BenchCancelled.
    cancel: threading.Event | None = field(default=None, compare=False)
    allow_drop_caches: bool = False
    #: Override the measured memory headroom (tests; containers that hide their limit).
    memory_headroom_bytes: int | None = None
    #: Force sampling with this many bytes; else chosen from the budget.
    sample_bytes: int | None = None
    #: Per strategy, the bytes its sample may hold instead (a fast strategy affords more
    #: in the same time; at least the model's size: it runs whole).
    sample_bytes_for: dict[str, int] = field(default_factory=dict)
    sample_reason: str = "asked for"
    #: Up to this many rounds beyond ``repeats`` while ``deadline`` leaves time for one
    #: more, as long as the last round took.
    more_rounds: int = 0
    #: Strategies to run warm as well (None: all of them, when "warm" is asked for).
    warm_strategies: tuple[str, ...] | None = None
    #: The worker command (tests inject misbehaving workers); default: the real worker.
    worker_argv: tuple[str, ...] | None = None
    #: Where tensors are loaded: "cpu" runs the CPU strategies, "cuda" or "cuda:N" the GPU ones.
    device: str = "cpu"


@dataclass(slots=True)
class Trial:
    id: int
    strategy: str
    cache: CacheMode
    repeat: int  # 0 is the warm-up round
    warmup: bool
    status: TrialStatus = "ok"
    reason: str | None = None
    seconds: float | None = None
    bytes: int | None = None
    bytes_per_s: float | None = None
    first_tensor_s: float | None = None
    tensors: int | None = None
    major_faults: int | None = None
    minor_faults: int | None = None
    read_syscalls: int | None = None
    read_bytes: int | None = None
    avg_read_bytes: float | None = None
    block_requests: int | None = None
    avg_request_bytes: float | None = None
    residency_before: float | None = None
    cache_verified: bool | None = None
    verified: bool | None = None
    peak_rss_bytes: int | None = None
    sampled: bool = False
    extrapolated_seconds: float | None = None
    #: In a sampled run: what this trial read ("sampled": the sample's tensors, "shards":
    #: whole files of a subset, "whole": the whole model); None when nothing was sampled.
    scope: str | None = None
    #: A trial at the second, smaller size: it feeds the fit, not the medians.
    fit: bool = False
    #: Seconds from the cache's preparation to the worker's end (what the trial cost).
    wall_s: float | None = None
    #: (seconds since start, bytes done), downsampled.
    series: list[tuple[float, int]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Summary:
    strategy: str
    cache: CacheMode
    trials: int
    median_seconds: float | None
    median_bytes_per_s: float | None
    x_vs_mmap: float | None
    first_run_seconds: float | None
    min_seconds: float | None
    max_seconds: float | None
    extrapolated_median_seconds: float | None = None
    #: Median time until the first tensor was ready (a streaming loader's head start).
    median_first_tensor_s: float | None = None
    #: What the trials read in a sampled run (see Trial.scope); None: the whole model.
    scope: str | None = None
    #: The extrapolation's fit (sampled and shards scopes): fixed cost, rate, and the
    #: relative standard error of extrapolated_median_seconds (None: not measurable).
    fixed_seconds: float | None = None
    fit_bytes_per_s: float | None = None
    error_estimate: float | None = None
    fit_note: str = ""
    #: Bytes one steady trial loaded (the sample's, the shards' or the model's).
    measured_bytes: int | None = None


@dataclass(slots=True)
class Sample:
    bytes: int
    total_bytes: int
    tensors: int
    files: int
    #: The largest relative error of any strategy's extrapolation (each is the error of
    #: a fit of a fixed cost and a rate to its trials at two sample sizes).
    error_estimate: float | None = None
    reason: str = ""
    #: The second, smaller sample size the fit uses (None: one size only).
    small_bytes: int | None = None
    #: "tensors": runs of tensors in every file; "shards": whole files of a subset.
    kind: str = "tensors"


@dataclass(slots=True)
class BenchReport:
    target: dict[str, Any]
    options: dict[str, Any]
    trials: list[Trial]
    summary: list[Summary]
    skipped: dict[str, str]
    sample: Sample | None
    notes: list[str]
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "target": self.target,
            "options": self.options,
            "trials": [asdict(t) for t in self.trials],
            "summary": [asdict(s) for s in self.summary],
            "skipped": self.skipped,
            "sample": asdict(self.sample) if self.sample else None,
            "notes": self.notes,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


# -- events for a live view (CLI progress line, TUI charts) -------------------------------------


@dataclass(frozen=True, slots=True)
class TrialStarted:
    trial: Trial
    index: int
    total: int


@dataclass(frozen=True, slots=True)
class TrialProgress:
    trial: Trial
    seconds: float
    bytes_done: int
    total_bytes: int
    #: The worker process (for a profiler) and its I/O counters so far, read by the
    #: parent from /proc; None where unreadable.
    pid: int | None = None
    major_faults: int | None = None
    read_syscalls: int | None = None
    read_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class TrialFinished:
    trial: Trial


BenchEvent = TrialStarted | TrialProgress | TrialFinished
Listener = Callable[[BenchEvent], None]


# -- strategies available here ------------------------------------------------------------------


def describe_strategies() -> dict[str, dict[str, Any]]:
    """Every strategy's declaration and why it is unavailable, asked of a worker process.

    The parent never imports torch or the peers itself: a worker answers.
    """
    worker = _Worker(None)
    try:
        code = worker.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        kill_group(worker.proc)
        raise BenchError("cannot start a loader worker: no answer in 120 s") from None
    worker.join_output()
    lines = worker.lines
    if code != 0 or not lines:
        tail = worker.stderr[-1:] or [f"exit code {code}"]
        raise BenchError(f"cannot start a loader worker: {tail[0]}")
    result: dict[str, dict[str, Any]] = json.loads(lines[-1])
    return result


# -- reference digests --------------------------------------------------------------------------


def _bounded_reference(
    files: list[WeightFile], tensors: Mapping[Path, tuple[str, ...] | None], timeout_s: float
) -> dict[str, str]:
    """The reference read, given at most ``timeout_s``: storage that stops answering makes
    a clear error, not a hang (the stuck read stays in its thread until the storage
    answers or goes away)."""
    out: list[dict[str, str]] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            out.append(reference_digests(files, tensors))
        except BaseException as exc:  # noqa: BLE001  (re-raised below, in the caller)
            errors.append(exc)

    worker = threading.Thread(target=read, daemon=True, name="reference-read")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise BenchError(
            f"the reference read of {files[0].path.parent} got no answer within"
            f" {timeout_s:g} s: the storage stopped answering"
        )
    if errors:
        raise errors[0]
    return out[0]


# -- one trial ----------------------------------------------------------------------------------


NOWAIT_NOTE = (
    f"mincore is hidden from this user, so {NOWAIT_SAMPLES} pages per file were asked"
    " with RWF_NOWAIT reads"
)


def _prepare_cache(
    files: list[WeightFile], mode: CacheMode, cold: ColdCache
) -> tuple[bool, float | None, str]:
    """Put every file in ``mode`` and verify it; (verified, mean residency, note).

    Residency is mincore's, or sampled with RWF_NOWAIT reads where mincore is hidden
    from this user (``checked_fraction``): asked once per file, right before the trial."""
    notes: list[str] = []
    fractions: list[float | None] = []
    sampled = False
    if mode == "cold":
        ok = True
        for wf in files:
            ev = cold.evict(wf.path)
            fractions.append(ev.after)
            sampled = sampled or "sampling" in ev.method
            if not ev.verified:
                ok = False
                notes.append(f"{wf.path.name}: {ev.note}")
    else:
        # As `loadscope warm` reads: many large requests in flight, so that on slow
        # storage the warm-up costs what the fix costs, not a single-stream read.
        PageFill(
            whole_files([(str(wf.path), wf.size_bytes) for wf in files]),
            threads=WARM_THREADS,
            block_bytes=WARM_BLOCK_BYTES,
        ).run()
        for wf in files:
            fraction, by_sampling = checked_fraction(wf.path)
            fractions.append(fraction)
            sampled = sampled or by_sampling
    known = [f for f in fractions if f is not None]
    mean = sum(known) / len(known) if known and len(known) == len(fractions) else None
    if mode == "warm":
        ok = mean is not None and mean >= WARM_ENOUGH
        if not ok:
            notes.append(
                "residency unknown"
                if mean is None
                else f"only {mean:.0%} resident after pre-reading"
            )
    if ok and sampled:
        notes.append(f"verified {mode} by sampling: {NOWAIT_NOTE}")
    return ok, mean, "; ".join(notes)


def _preload_for(strategy: str, files: list[WeightFile]) -> list[str]:
    """The modules ``strategy``'s worker imports before its clock, for the fork server to
    import once (``transformers-model``: the modeling module of the model's config.json,
    read here as JSON: the parent never imports transformers)."""
    from loadscope.loaders.strategies import STRATEGIES

    wanted = getattr(STRATEGIES.get(strategy), "preload", ())
    out = [m for m in wanted if m != "transformers-model"]
    if "transformers-model" in wanted and files:
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            config = json.loads((files[0].path.parent / "config.json").read_text())
            kind = str(config["model_type"]).replace("-", "_")
            if kind.isidentifier():
                out.append(f"transformers.models.{kind}.modeling_{kind}")
    return out


class _Worker:
    """One running worker: its events, its stderr tail, and a kill switch.

    Forked from the fork server (torch already imported) unless ``argv`` names
    another command or ``LOADSCOPE_FORKSERVER=0``; ``spec`` None asks it to describe
    the strategies instead (its answer is in ``lines``).
    """

    def __init__(
        self,
        spec: dict[str, Any] | None,
        argv: tuple[str, ...] | None = None,
        preload: list[str] | None = None,
    ) -> None:
        args = ["--describe"] if spec is None else [json.dumps(spec)]
        forked = self._forked(args, preload) if argv is None else None
        self.proc: subprocess.Popen[str] | ForkedProcess
        if forked is not None:
            self.proc = forked
        else:
            command = argv or (sys.executable, "-m", "loadscope.loaders.worker")
            try:
                self.proc = subprocess.Popen(
                    [*command, *args],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,  # its own process group: killable with all it spawns
                )
            except OSError as exc:
                raise WorkerStartFailed(command[0], exc) from None
        self.events: queue.Queue[Start | Progress | Done | Failed | ProtocolError | None] = (
            queue.Queue()
        )
        self.lines: list[str] = []  # raw stdout (for --describe)
        self.stderr: list[str] = []
        self._describe = spec is None
        self._out = threading.Thread(target=self._read_stdout, daemon=True)
        self._out.start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def join_output(self, timeout: float = 10) -> None:
        """After the exit: wait until everything the worker wrote has been read."""
        self._out.join(timeout)

    @staticmethod
    def _forked(args: list[str], preload: list[str] | None = None) -> ForkedProcess | None:
        if not forkserver.enabled():
            return None
        try:
            return forkserver.shared_server().spawn(args, preload=preload)
        except forkserver.ForkServerError:
            return None  # a fresh interpreter still works, only slower to start

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if self._describe:
                self.lines.append(line)
                continue
            try:
                self.events.put(decode(line))
            except ProtocolError as exc:
                self.events.put(exc)
        self.events.put(None)

    def _read_stderr(self) -> None:
        # Read concurrently: a worker that fills its stderr pipe must not stall.
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))
            del self.stderr[:-_STDERR_TAIL]


def _rss_kib(pid: int) -> int | None:
    with (
        contextlib.suppress(OSError, ValueError),
        open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh,
    ):
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def _io_counters(pid: int) -> tuple[int | None, int | None, int | None]:
    """(major faults, read syscalls, bytes read) of a running process, from /proc."""
    majflt = syscr = rchar = None
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh,
    ):
        # fields after the parenthesised name: state is [0], majflt is field 12 => [9]
        majflt = int(fh.read().rsplit(")", 1)[1].split()[9])
    with (
        contextlib.suppress(OSError, ValueError, KeyError),
        open(f"/proc/{pid}/io", encoding="ascii", errors="replace") as fh,
    ):
        io = dict(line.split(": ", 1) for line in fh.read().splitlines() if ": " in line)
        syscr, rchar = int(io["syscr"]), int(io["rchar"])
    return majflt, syscr, rchar


def _downsample(
    points: list[tuple[float, int]], n: int = _SERIES_POINTS
) -> list[tuple[float, int]]:
    if len(points) <= n:
        return points
    step = (len(points) - 1) / (n - 1)
    return [points[round(i * step)] for i in range(n)]


def run_trial(
    trial: Trial,
    files: list[WeightFile],
    sample: dict[Path, tuple[str, ...]] | None,
    *,
    options: BenchOptions,
    reference: dict[str, str],
    block_stat: str | None,
    cold: ColdCache,
    listener: Listener,
    total_bytes: int,
    scratch_dir: str | None = None,
) -> tuple[Trial, dict[str, str]]:
    """Run one trial; returns it and its tensors' digests. ``scratch_dir``: where the
    worker's libraries may write caches (removed by the caller)."""
    began = time.monotonic()
    try:
        return _run_trial(
            trial,
            files,
            sample,
            options=options,
            reference=reference,
            block_stat=block_stat,
            cold=cold,
            listener=listener,
            total_bytes=total_bytes,
            scratch_dir=scratch_dir,
        )
    finally:
        trial.wall_s = time.monotonic() - began


def _run_trial(
    trial: Trial,
    files: list[WeightFile],
    sample: dict[Path, tuple[str, ...]] | None,
    *,
    options: BenchOptions,
    reference: dict[str, str],
    block_stat: str | None,
    cold: ColdCache,
    listener: Listener,
    total_bytes: int,
    scratch_dir: str | None = None,
) -> tuple[Trial, dict[str, str]]:
    verified, resident, note = _prepare_cache(files, trial.cache, cold)
    trial.cache_verified = verified
    trial.residency_before = resident
    if note:
        trial.detail["cache_note"] = note
    spec = {
        "strategy": trial.strategy,
        "files": [
            {
                "path": str(wf.path),
                "size_bytes": wf.size_bytes,
                "format": wf.format,
                "tensors": None if sample is None else list(sample.get(wf.path, ())),
            }
            for wf in files
            if sample is None or wf.path in sample
        ],
        "knobs": options.knobs.get(trial.strategy, {}),
        "hints": options.hints,
        "device": options.device,
        "block_stat": block_stat,
        "scratch_dir": scratch_dir,
        "total_bytes": total_bytes,
        "total_tensors": 0,
    }
    oom_before = oom_kills()
    worker = _Worker(spec, options.worker_argv, _preload_for(trial.strategy, files))
    timeout_s = options.trial_timeout_s
    if options.deadline is not None:
        timeout_s = min(timeout_s, max(DEADLINE_GRACE_S, options.deadline - time.monotonic()))
    deadline = time.monotonic() + timeout_s
    started: Start | None = None
    result: Done | Failed | None = None
    points: list[tuple[float, int]] = []
    rss: list[tuple[float, int]] = []
    protocol: list[str] = []
    t_spawn = time.monotonic()
    try:
        while result is None:
            # The parent's own view of the worker: its resident memory over time.
            if (kib := _rss_kib(worker.proc.pid)) is not None:
                rss.append((round(time.monotonic() - t_spawn, 3), kib * 1024))
            if options.cancel is not None and options.cancel.is_set():
                kill_group(worker.proc)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.proc.wait(timeout=5)
                raise BenchCancelled("stopped: the worker's process group was killed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                kill_group(worker.proc)
                result = Failed(
                    time.monotonic(),
                    f"timed out after {timeout_s:.3g} s; worker killed",
                )
                break
            try:
                event = worker.events.get(timeout=min(remaining, 0.1))
            except queue.Empty:
                continue
            if event is None:
                code = worker.proc.wait(timeout=30)
                result = Failed(
                    time.monotonic(), exit_reason("worker", code, worker.stderr, oom_before)
                )
            elif isinstance(event, ProtocolError):
                protocol.append(str(event))
            elif isinstance(event, Start):
                started = event
            elif isinstance(event, Progress):
                t0 = started.t if started else event.t
                points.append((round(event.t - t0, 4), event.bytes_done))
                pid = worker.proc.pid
                listener(
                    TrialProgress(
                        trial, event.t - t0, event.bytes_done, total_bytes, pid, *_io_counters(pid)
                    )
                )
            else:
                result = event
    finally:
        if worker.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.proc.wait(timeout=30)
            if worker.proc.poll() is None:
                kill_group(worker.proc)
    if protocol:
        trial.detail["protocol_errors"] = protocol[:5]
    trial.series = _downsample(points)
    trial.detail["rss_series"] = _downsample(rss)
    if isinstance(result, Failed):
        trial.status, trial.reason = "failed", result.reason
        return trial, {}
    assert isinstance(result, Done)
    _fill_metrics(trial, result, reference)
    return trial, result.digests


def _fill_metrics(trial: Trial, done: Done, reference: dict[str, str]) -> None:
    trial.seconds = done.seconds
    trial.bytes = done.bytes
    trial.tensors = done.tensors
    trial.bytes_per_s = done.bytes / done.seconds if done.seconds > 0 else None
    trial.first_tensor_s = done.first_tensor_s
    trial.peak_rss_bytes = done.peak_rss_bytes
    io = done.detail.get("io", {})
    trial.major_faults = io.get("majflt")
    trial.minor_faults = io.get("minflt")
    trial.read_syscalls = io.get("syscr")
    trial.read_bytes = io.get("rchar")
    if trial.read_syscalls and trial.read_bytes is not None:
        trial.avg_read_bytes = trial.read_bytes / trial.read_syscalls
    trial.block_requests = io.get("block_read_ios")
    trial.avg_request_bytes = io.get("avg_request_bytes")
    trial.detail.update({k: v for k, v in done.detail.items() if k != "io"})
    trial.detail["io"] = io
    if reference:
        mismatched = sorted(n for n, d in done.digests.items() if reference.get(n) != d)
        missing = sorted(set(reference) - set(done.digests))
        trial.verified = not mismatched and not missing
        if not trial.verified:
            trial.status = "failed"
            parts = []
            if mismatched:
                parts.append(
                    f"{len(mismatched)} tensor(s) differ from the reference read"
                    f" (first: {mismatched[0]})"
                )
            if missing:
                parts.append(f"{len(missing)} tensor(s) missing (first: {missing[0]})")
            trial.reason = "wrong tensors: " + "; ".join(parts)


# -- the plan -----------------------------------------------------------------------------------


def _applicable(
    target: Target,
    available: dict[str, dict[str, Any]],
    names: tuple[str, ...] | None,
    device: str = "cpu",
) -> tuple[list[str], dict[str, str]]:
    """The strategies to run on ``device`` and why the others asked for cannot run.

    Without ``names``, the strategies of the device's kind (CPU or GPU) are considered;
    one of the other kind asked for by name is skipped with the reason.
    """
    if device not in ("cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise BenchError(f"unknown device {device!r} (use cpu, cuda or cuda:N)")
    gpu_run = device != "cpu"
    formats = target.all_formats
    chosen, skipped = [], {}
    for name in names or tuple(n for n, i in available.items() if bool(i.get("gpu")) == gpu_run):
        info = available.get(name)
        if info is None:
            raise BenchError(f"unknown strategy {name!r} (known: {', '.join(available)})")
        if info.get("gpu") and not gpu_run:
            skipped[name] = "needs a GPU (--device cuda)"
        elif not info.get("gpu") and gpu_run:
            skipped[name] = (
                f"a CPU strategy: it does not load to {device} (run it without --device)"
            )
        elif not formats & set(info["formats"]):
            skipped[name] = (
                f"reads {' or '.join(info['formats'])} checkpoints;"
                f" this target is {' and '.join(sorted(formats))}"
            )
        elif info.get("unavailable"):
            skipped[name] = str(info["unavailable"])
        else:
            chosen.append(name)
    return chosen, skipped


def memory_guard(name: str, info: dict[str, Any], model_bytes: int, headroom: int) -> str | None:
    """Why ``name`` must not run (it would not fit in RAM), or None."""
    multiple = float(info.get("ram_multiple", 1.0))
    if multiple <= 0:
        return None
    need = int(multiple * model_bytes) + RUNTIME_OVERHEAD_BYTES
    if need <= headroom:
        return None
    return (
        f"would hold ~{format_bytes(need)} in RAM ({multiple:g}x the"
        f" {format_bytes(model_bytes)} loaded"
        f" + runtime) but only {format_bytes(headroom)} is free within RAM and the cgroup limit"
        f" ({format_bytes(need - headroom)} missing)"
    )


def _headroom(options: BenchOptions) -> int:
    if options.memory_headroom_bytes is not None:
        return options.memory_headroom_bytes
    return memory_headroom()


def _summaries(
    trials: list[Trial], fits: Mapping[tuple[str, str], Fit], scopes: Mapping[str, Scope]
) -> list[Summary]:
    out: list[Summary] = []
    keys = list(dict.fromkeys((t.strategy, t.cache) for t in trials))
    whole_times: dict[tuple[str, str], float | None] = {}
    for strategy, cache in keys:
        group = [t for t in trials if t.strategy == strategy and t.cache == cache]

        def counted(t: Trial) -> bool:
            return not t.warmup and not t.fit and t.status == "ok" and bool(t.cache_verified)

        times = spread(
            group,
            lambda t: t.seconds,
            steady=counted,
            warmup=lambda t: t.warmup and t.status == "ok",
        )
        steady = [t for t in group if counted(t) and t.seconds]
        med = times.median_s
        fitted = fits.get((strategy, cache))
        summary = Summary(
            strategy,
            cache,
            times.trials,
            med,
            median(t.bytes_per_s for t in steady if t.bytes_per_s),
            None,
            times.first_run_s,
            times.min_s,
            times.max_s,
            fitted.seconds if fitted and med is not None else None,
            median(t.first_tensor_s for t in steady),
            scopes.get(strategy),
        )
        loaded = median(t.bytes for t in steady if t.bytes)
        summary.measured_bytes = int(loaded) if loaded is not None else None
        if fitted is not None and med is not None:
            summary.fixed_seconds = fitted.fixed_s
            summary.fit_bytes_per_s = fitted.bytes_per_s
            summary.error_estimate = fitted.error
            summary.fit_note = fitted.note
        whole_times[(strategy, cache)] = summary.extrapolated_median_seconds or med
        out.append(summary)
    # Whole-model times on both sides: a sampled strategy's fixed cost is not scaled.
    faster = speedups(whole_times, "mmap")
    for s in out:
        s.x_vs_mmap = faster.get((s.strategy, s.cache))
    return out


def _unsampled_reason(info: dict[str, Any], whole: int, sample: int, smallest: int) -> str:
    what = "the whole model folder" if info.get("sample_files") is False else "whole files"
    parts = [f"cannot be sampled: it loads {what}"]
    if info.get("sample_shards") is False:
        parts.append(
            "its time on a subset of them does not scale to the whole (it reads the files"
            " of a load together)"
        )
    elif info.get("sample_files") is not False:
        parts.append(
            f"the smallest ({format_bytes(smallest)}) is over {SHARD_OVERSHOOT:g}x the sample"
        )
    parts.append(
        f"and a whole load ({format_bytes(whole)}) is {whole / max(sample, 1):.0f}x the"
        f" {format_bytes(sample)} sample the budget allows"
    )
    return ", ".join(parts)


def _scopes(
    files: list[WeightFile],
    names: list[str],
    available: dict[str, dict[str, Any]],
    sizes: Mapping[str, int],
    repeats: int,
) -> tuple[dict[str, Scope], dict[str, tuple[SampleSet | None, SampleSet | None]], dict[str, str]]:
    """Per strategy: what it reads in a sampled run (and at the fit's smaller size), or
    why it cannot run, given the bytes ``sizes`` allots each (a fast strategy affords a
    bigger sample in the same time, and a whole load when its share covers the model).

    Whole shards near the size where the model has such shards (a strategy then reads
    files exactly as the whole load does), else a tensor sample; a strategy that loads
    whole files runs whole when that costs no more than its sampled trials would, and
    is skipped when neither fits."""
    total = sum(f.size_bytes for f in files)
    tensor_sets: dict[int, tuple[SampleSet, SampleSet | None]] = {}
    shard_sets: dict[int, tuple[SampleSet, SampleSet | None] | None] = {}
    scopes: dict[str, Scope] = {}
    sets: dict[str, tuple[SampleSet | None, SampleSet | None]] = {}
    skipped: dict[str, str] = {}
    for name in names:
        info = available[name]
        want = sizes[name]
        if want >= total or (
            info.get("samples") is False and total <= (max(1, repeats) + SMALL_FRACTION) * want
        ):
            scopes[name], sets[name] = "whole", (None, None)
            continue
        if want not in shard_sets:
            shards = choose_shards(files, want)
            shard_sets[want] = (shards, smaller_shards(files, shards)) if shards else None
        if (
            shard_sets[want] is not None
            and info.get("sample_files") is not False
            and info.get("sample_shards") is not False
        ):
            # Whole files, read the way the whole load reads each of its files: the most
            # faithful sample there is, when the shards are small enough.
            scopes[name], sets[name] = "shards", shard_sets[want]  # type: ignore[assignment]
        elif info.get("samples") is not False:
            if want not in tensor_sets:
                tensors = choose_sample(files, want)
                tensor_sets[want] = (tensors, smaller_sample(files, tensors))
            scopes[name], sets[name] = "sampled", tensor_sets[want]
        else:
            smallest = min(f.size_bytes for f in files)
            skipped[name] = _unsampled_reason(info, total, want, smallest)
    return scopes, sets, skipped


def _no_strategy_left(names: list[str], skipped: dict[str, str]) -> None:
    if not names:
        raise BenchError(
            "no strategy can run on this target here: "
            + "; ".join(f"{k}: {v}" for k, v in skipped.items())
        )


def run_bench(
    target: Target, options: BenchOptions, listener: Listener | None = None
) -> BenchReport:
    """Plan, run and summarise the trials for ``target``.

    The workers get a scratch directory for what their libraries cache under the temp
    dir; it is removed when the run ends, and one left by a run that was killed
    outright (its process gone) is removed by the next run."""
    _reap_stale_scratch()
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    try:
        return _run_bench(target, options, listener, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


SCRATCH_PREFIX = "loadscope-scratch-"


def _reap_stale_scratch() -> None:
    """Remove scratch directories whose run (the pid in the name) no longer exists."""
    with contextlib.suppress(OSError):
        for entry in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
            pid = entry.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
            if not pid.isdigit():
                continue
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(entry, ignore_errors=True)
            except OSError:
                continue


def _run_bench(
    target: Target, options: BenchOptions, listener: Listener | None, scratch: str
) -> BenchReport:
    say = listener or (lambda _e: None)
    notes: list[str] = []
    from loadscope.loaders.strategies import check_knobs

    try:
        options = dataclasses.replace(options, knobs=check_knobs(options.knobs))
    except ValueError as exc:
        raise BenchError(f"knob {exc}") from None
    available = describe_strategies()
    names, skipped = _applicable(target, available, options.strategies, options.device)
    files = list(target.files)
    total = target.total_bytes
    sampleable = target.formats == {"safetensors"}
    sampling = options.sample_bytes if sampleable else None

    def files_for(name: str) -> list[WeightFile]:
        """A strategy's files: the target's, or the same model in the other format."""
        return list(target.files_in(frozenset(available[name]["formats"])))

    # Both formats side by side (a folder holding both): the torch strategies read the
    # pickles, checked against the safetensors' tensors; whole files, never sampled.
    other = [n for n in names if files_for(n) != files]
    if other:
        rest = [n for n in names if n not in other]
        notes.append(
            f"{', '.join(other)} read the torch files ({len(files_for(other[0]))}) beside the"
            + (
                f" safetensors ({len(files)}) that {', '.join(rest)} read: both formats, the"
                " same tensors"
                if rest
                else f" safetensors ({len(files)}), checked against their tensors"
            )
        )
        if sampling is not None or options.budget_s is not None:
            notes.append("not sampled: the torch files are loaded whole")
        sampling = None
    reason = options.sample_reason
    sample_info: Sample | None = None
    headroom = _headroom(options)
    if sampling is None:
        for name in list(names):
            mine = sum(f.size_bytes for f in files_for(name))
            if why := memory_guard(name, available[name], mine, headroom):
                skipped[name] = why
                names.remove(name)
    _no_strategy_left(names, skipped)
    block_stat = _block_stat_of(files[0].path)
    cold = ColdCache(allow_drop_caches=options.allow_drop_caches)
    sizes: dict[str, int] = {}
    if options.budget_s is not None and sampling is None and sampleable and not other:
        planned = _fit_budget(target, names, available, options, block_stat, cold, say)
        if planned is not None:
            sizes, reason = planned
            sampling = min(sizes.values())
    scopes: dict[str, Scope] = {}
    sets: dict[str, tuple[SampleSet | None, SampleSet | None]] = {}
    once: set[str] = set()  # run whole, once, in place of their sampled rounds
    if sampling is not None:
        sizes = {n: sizes.get(n, options.sample_bytes_for.get(n, sampling)) for n in names}
        scopes, sets, unsampled = _scopes(files, names, available, sizes, options.repeats)
        skipped.update(unsampled)
        names = [n for n in names if n not in unsampled]
        for name in names:
            big = sets[name][0]
            nbytes = total if big is None else sample_size(files, big)[0]
            if why := memory_guard(name, available[name], nbytes, headroom):
                skipped[name] = why
        names = [n for n in names if n not in skipped]
        _no_strategy_left(names, skipped)
        once = {n for n in names if scopes[n] == "whole" and sizes[n] < total}
        extrapolated = [n for n in names if scopes[n] != "whole"]
        if not extrapolated:
            sampling, scopes, sets, once = None, {}, {}, set()
        else:
            # The report's sample: the smallest any strategy read.
            first = min(extrapolated, key=lambda n: sample_size(files, sets[n][0] or {})[0])
            big, small = sets[first]
            assert big is not None
            nbytes, count = sample_size(files, big)
            sample_info = Sample(
                nbytes,
                total,
                count,
                len(big),
                None,
                reason,
                sample_size(files, small)[0] if small else None,
                "shards" if scopes[first] == "shards" else "tensors",
            )
    if sampling is not None and "pickle" in " ".join(names):
        notes.append("torch checkpoints are loaded whole even when sampling")
    # One reference read per distinct set of tensors a trial loads (None: every tensor).
    distinct = {id(s): s for pair in sets.values() for s in pair if s is not None}
    references: dict[int, dict[str, str]] = {}
    if sampleable:
        if sampling is None or any(scopes[n] == "whole" for n in names):
            references[0] = _bounded_reference(files, {}, options.trial_timeout_s)
        for key, subset in distinct.items():
            inside = [f for f in files if f.path in subset]
            references[key] = _bounded_reference(inside, subset, options.trial_timeout_s)
    learned: dict[str, str] = {}  # torch checkpoints: the first trial's digests
    caches = list(options.cache)
    if "warm" in caches:
        room, what = page_cache_room()
        if total > WARM_ENOUGH * room:
            caches.remove("warm")
            notes.append(
                f"warm trials not run: the {format_bytes(total)} of files cannot stay in the"
                f" page cache within {what}"
            )
    if not caches:
        raise BenchError(notes[-1])

    def wanted(name: str, cache: str) -> bool:
        return cache == "cold" or options.warm_strategies is None or name in options.warm_strategies

    def round_of(r: int) -> list[Trial]:
        return interleaved(
            [r],
            caches,
            names,
            # A strategy run whole in a sampled run loads the model once, in round 1.
            lambda r, cache, name: (
                Trial(0, name, cache, r, r == 0, scope=scopes.get(name))
                if wanted(name, cache) and (name not in once or r == 1)
                else None
            ),
        )

    plan: list[Trial] = []
    for r in range(0 if options.warmup else 1, options.repeats + 1):
        plan += round_of(r)
        if r == 1:
            # The fit's second size, once per strategy and cache, after the first round:
            # when the budget runs short, what is lost is the fit's error, not a strategy.
            plan += [
                Trial(0, name, cache, 1, False, scope=scopes[name], fit=True)
                for cache in caches
                for name in names
                if wanted(name, cache) and sets.get(name, (None, None))[1] is not None
            ]
    extra = options.more_rounds if options.deadline is not None else 0
    i = 0
    while i < len(plan):
        trial = plan[i]
        trial.id = i + 1
        i += 1
        if options.cancel is not None and options.cancel.is_set():
            raise BenchCancelled("stopped before the next trial")
        if options.deadline is not None and time.monotonic() >= options.deadline:
            trial.status, trial.reason = "skipped", "the time budget was spent"
            continue
        chosen = sets[trial.strategy][1 if trial.fit else 0] if sampling is not None else None
        reference = references[id(chosen) if chosen is not None else 0] if sampleable else learned
        say(TrialStarted(trial, i - 1, len(plan)))
        its_files = files_for(trial.strategy)
        _, digests = run_trial(
            trial,
            its_files,
            chosen,
            options=options,
            reference=reference,
            block_stat=block_stat,
            cold=cold,
            listener=say,
            total_bytes=(
                sum(f.size_bytes for f in its_files)
                if chosen is None
                else sample_size(files, chosen)[0]
            ),
            scratch_dir=scratch,
        )
        trial.sampled = trial.scope in ("sampled", "shards") and trial.seconds is not None
        if not sampleable and not learned and trial.status == "ok" and digests:
            # Torch checkpoints have no header to read a reference from: the first trial's
            # tensors become the reference every later trial must match.
            learned.update(digests)
            trial.detail["reference"] = True
        say(TrialFinished(trial))
        if i == len(plan) and extra > 0 and options.deadline is not None:
            # Time left: one more round at the same sizes when the last one, as timed,
            # fits what is left (its spread is then measured, not "±?").
            last = max(t.repeat for t in plan)
            took = sum(t.wall_s or 0.0 for t in plan if t.repeat == last and not t.fit)
            if last >= 1 and took > 0 and options.deadline - time.monotonic() > 1.2 * took:
                extra -= 1
                plan += round_of(last + 1)
    if late := sum(1 for t in plan if t.status == "skipped"):
        notes.append(f"{late} of {len(plan)} trials not run: the time budget was spent")
    fits = _extrapolate(plan, total)
    if sample_info is not None:
        errors = [f.error for f in fits.values() if f.error is not None]
        sample_info.error_estimate = max(errors) if errors else None
    return BenchReport(
        target={
            "spec": target.report_spec,
            "kind": target.kind,
            "root": target.report_root,
            "files": len(files),
            "total_bytes": total,
            "formats": sorted(target.formats),
        },
        options={
            "strategies": names,
            "cache": list(options.cache),
            "repeats": options.repeats,
            "warmup": options.warmup,
            "budget_s": options.budget_s,
            "knobs": options.knobs,
            "hints": options.hints,
            # Only GPU runs say so: CPU reports keep the shape they always had.
            **({"device": options.device} if options.device != "cpu" else {}),
        },
        trials=plan,
        summary=_summaries(plan, fits, scopes),
        skipped=skipped,
        sample=sample_info,
        notes=notes,
    )


def _extrapolate(plan: list[Trial], total: int) -> dict[tuple[str, str], Fit]:
    """Fit each sampled strategy's trials (both sizes) and give every sampled trial its
    whole-model time; trials whose cache was not verified are extrapolated, not fitted."""
    fits: dict[tuple[str, str], Fit] = {}
    for key in dict.fromkeys((t.strategy, t.cache) for t in plan if t.sampled):
        group = [t for t in plan if (t.strategy, t.cache) == key and t.sampled and t.bytes]
        points = [
            (t.bytes or 0, t.seconds or 0.0)
            for t in group
            if not t.warmup and t.status == "ok" and bool(t.cache_verified)
        ]
        fitted = fit(points, total)
        if fitted is None:
            continue
        fits[key] = fitted
        for t in group:
            if t.status == "ok" and t.seconds is not None and t.bytes:
                t.extrapolated_seconds = extrapolate(t.seconds, t.bytes, total, fitted)
    return fits


def _block_stat_of(path: Path) -> str | None:
    dev = os.stat(path).st_dev
    stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    return str(stat) if os.major(dev) != 0 and stat.exists() else None


def _fit_budget(
    target: Target,
    names: list[str],
    available: dict[str, dict[str, Any]],
    options: BenchOptions,
    block_stat: str | None,
    cold: ColdCache,
    say: Listener,
) -> tuple[dict[str, int], str] | None:
    """Pilot every strategy that reads a sample on a small one; when full loads do not
    fit the budget, the bytes each strategy's sample may hold, and why (None: they fit).

    A trial's cost is its worker's fixed cost (measured around each pilot trial: fork,
    cache eviction and check, digests) plus its load, which scales with the bytes; only
    the load is scaled. Every trial's load is given the same share of the time, so a
    fast strategy gets a bigger sample (or the whole model) than a slow one. Strategies
    that load whole files are not piloted (they would read the model) and are planned
    at the median piloted rate.
    """
    assert options.budget_s is not None
    files = list(target.files)
    total = target.total_bytes
    pilot_bytes = min(total // 4, 64 << 20)
    if pilot_bytes <= 0:
        return None
    pilot = choose_sample(files, pilot_bytes)
    pilot_actual, _ = sample_size(files, pilot)
    reference = reference_digests(files, pilot)
    overheads: dict[str, list[float]] = {"cold": [], "warm": []}
    per_byte: dict[tuple[str, str], float] = {}
    whole_only = [n for n in names if available[n].get("samples") is False]
    for name in [n for n in names if n not in whole_only]:
        for cache in options.cache:
            t = Trial(0, name, cache, 0, True)
            began = time.monotonic()
            run_trial(
                t,
                files,
                pilot,
                options=options,
                reference=reference,
                block_stat=block_stat,
                cold=cold,
                listener=say,
                total_bytes=pilot_actual,
            )
            overheads[cache].append(max(0.0, time.monotonic() - began - (t.seconds or 0.0)))
            per_byte[(name, cache)] = (t.seconds or 0.0) / max(pilot_actual, 1)
    if not per_byte:
        return None
    for cache in options.cache:
        typical = statistics.median(v for (_, c), v in per_byte.items() if c == cache)
        per_byte.update({(n, cache): typical for n in whole_only})
    fixed = statistics.median(overheads["cold"] or overheads["warm"])
    # A warm pilot follows its cold one, so its cache preparation read the whole model:
    # the page-cache fill each warm round pays once.
    fill = max(0.0, statistics.median(overheads["warm"]) - fixed) if overheads["warm"] else 0.0
    runs = options.repeats + (1 if options.warmup else 0)
    plan = plan_budget(
        CostModel(per_byte, fixed, fill_s_per_byte=fill / max(total, 1)),
        list(per_byte),
        total,
        options.budget_s,
        repeats=(runs,),
        floor_bytes=pilot_actual,
    )
    if not plan.sizes:
        return None
    return plan.sizes, (
        f"full loads would take ~{plan.whole_s:.0f} s, over the {options.budget_s:g} s budget"
    )


# -- the results table --------------------------------------------------------------------------


def _secs(value: float) -> str:
    return f"{value:.3g}s" if value < 100 else f"{value:.0f}s"


def _short(value: float | None) -> str:
    """Seconds in at most 7 characters: ``24.3s``, ``152ms``, ``0.7ms``, ``0s``."""
    if value is None:
        return "-"
    if value == 0:
        return "0s"
    if value < 1:
        return f"{value * 1e3:.3g}ms" if value >= 0.001 else f"{value * 1e3:.1f}ms"
    return _secs(value)


def _count(value: int | None) -> str:
    if value is None:
        return "-"
    if value >= 10_000_000:
        return f"{value / 1e6:.0f}M"
    return f"{value / 1000:.0f}k" if value >= 10_000 else str(value)


def _size(value: float | None) -> str:
    if not value:
        return "-"
    return format_bytes(value).replace(" ", "")


def extrapolation_lines(report: BenchReport) -> list[str]:
    """What each strategy read in a sampled run and how its whole-model time was made."""
    smp = report.sample
    assert smp is not None
    lines = [
        *textwrap.wrap(
            f"whole-model times ({format_bytes(smp.total_bytes)}): fixed cost + bytes / rate,"
            " fitted to each strategy's trials at two sizes: what 'read' says and a quarter"
            " of it (± one standard error; ±? where the trials cannot measure it); 'whole':"
            " loaded whole, measured, not extrapolated.",
            80,
        ),
        f"{'strategy':<16}{'cache':<6}{'read':<14}{'time':>8}{'error':>7}{'fixed':>8}"
        f"{'rate':>10}{'1st':>8}",
    ]
    for s in report.summary:
        if s.median_seconds is None:
            continue
        read = (
            "whole"
            if s.scope in (None, "whole")
            else f"{'shards' if s.scope == 'shards' else 'sample'} {_size(s.measured_bytes)}"
        )
        head = _short(s.median_first_tensor_s)
        if s.extrapolated_median_seconds is None:
            rate = format_rate(s.median_bytes_per_s) if s.median_bytes_per_s else "-"
            lines.append(
                f"{s.strategy:<16}{s.cache:<6}{read:<14}"
                f"{_short(s.median_seconds):>8}{'-':>7}{'-':>8}{rate:>10}{head:>8}"
            )
            continue
        rate = format_rate(s.fit_bytes_per_s) if s.fit_bytes_per_s else "-"
        lines.append(
            f"{s.strategy:<16}{s.cache:<6}{read:<14}"
            f"{'~' + _short(s.extrapolated_median_seconds):>8}{error_text(s.error_estimate):>7}"
            f"{_short(s.fixed_seconds):>8}{rate:>10}{head:>8}"
        )
    return lines


def format_lines(bench: dict[str, Any]) -> list[str]:
    """Safetensors against torch.load on the same tensors, as seed 000 put it: "safetensors
    is 76.6x faster than torch.load on CPU here" (or the other way, as measured), from a
    bench report's JSON (the text, the Markdown and the HTML say the same)."""
    medians = {
        (s.get("strategy"), s.get("cache")): s.get("median_seconds")
        for s in bench.get("summary") or []
        if isinstance(s, dict)
    }
    options = bench.get("options") or {}
    device = "the GPU" if str(options.get("device", "cpu")).startswith("cuda") else "CPU"
    out = []
    for cache in ("cold", "warm"):
        st, pk = medians.get(("mmap", cache)), medians.get(("pickle", cache))
        if not isinstance(st, (int, float)) or not isinstance(pk, (int, float)) or not st or not pk:
            continue
        if pk >= st:
            text = f"safetensors is {pk / st:.1f}x faster than torch.load on {device} here"
        else:
            text = f"torch.load is {st / pk:.1f}x faster than safetensors on {device} here"
        mm = medians.get(("pickle-mmap", cache))
        extra = f"; torch.load(mmap=True) {mm:.3g} s" if isinstance(mm, (int, float)) else ""
        checked = [
            t.get("verified")
            for t in bench.get("trials") or []
            if isinstance(t, dict)
            and t.get("cache") == cache
            and str(t.get("strategy", "")).startswith("pickle")
            and t.get("status") == "ok"
        ]
        same = (
            "the same tensors, digests checked"
            if checked and all(checked)
            else "NOT verified to be the same tensors"
        )
        out.append(
            f"formats, {cache}: {text} (load_file {st:.3g} s, torch.load(weights_only=True)"
            f" {pk:.3g} s{extra}; {same})"
        )
    return out


def to_text(report: BenchReport) -> str:
    t = report.target
    lines = [f"target   {t['spec']} ({t['files']} file(s), {format_bytes(t['total_bytes'])})"]
    if report.sample:
        smp = report.sample
        what = (
            f"{smp.files} of {t['files']} whole files"
            if smp.kind == "shards"
            else f"{smp.tensors} tensors in {smp.files} file(s)"
        )
        lines.append(
            f"sample   {format_bytes(smp.bytes)} of {format_bytes(smp.total_bytes)}"
            f" ({what}); times extrapolated to the whole model: {smp.reason}"
        )
    header = (
        f"{'strategy':<16}{'cache':<5}{'median':>8}{'rate':>10}{'x mmap':>7}"
        f"{'faults':>11}{'reads':>6}{'avg req':>8}{'RSS':>8}"
    )
    lines += ["", header, "-" * len(header)]
    by_key = {
        (tr.strategy, tr.cache): tr for tr in report.trials if tr.status == "ok" and not tr.warmup
    }
    for s in report.summary:
        example = by_key.get((s.strategy, s.cache))
        if s.median_seconds is None or example is None:
            bad = next(
                (
                    tr
                    for tr in report.trials
                    if tr.strategy == s.strategy and tr.cache == s.cache and tr.status != "ok"
                ),
                None,
            )
            why = bad.reason if bad and bad.reason else "no trial with a verified cache"
            verb = "not run" if bad is not None and bad.status == "skipped" else "failed"
            lines.append(f"{s.strategy:<16}{s.cache:<5}{verb}: {why}"[:160])
            continue
        secs = s.extrapolated_median_seconds or s.median_seconds
        shown = "~" + _short(secs) if s.extrapolated_median_seconds else _secs(secs)
        # The rate of the time shown: the whole model's over its extrapolated time.
        per_s = t["total_bytes"] / secs if s.extrapolated_median_seconds else s.median_bytes_per_s
        rate = format_rate(per_s) if per_s else "-"
        x = f"{s.x_vs_mmap:.2f}x" if s.x_vs_mmap else "-"
        lines.append(
            f"{s.strategy:<16}{s.cache:<5}{shown:>8}{rate:>10}{x:>7}"
            f"{_count(example.major_faults) + '/' + _count(example.minor_faults):>11}"
            f"{_count(example.read_syscalls):>6}"
            f"{_size(example.avg_request_bytes):>8}{_size(example.peak_rss_bytes):>8}"
        )
    lines.append(
        textwrap.fill(
            "x mmap: speed-up over mmap load_file in the same cache state. From one steady"
            " trial: faults (major/minor), reads (read syscalls), avg req (block-layer request"
            " size; '-' where storage has no block device) and peak RSS.",
            80,
        )
    )
    if report.sample:
        lines += ["", *extrapolation_lines(report)]
    if formats := format_lines(report.to_dict()):
        lines += ["", *formats]
    if report.skipped:
        lines += ["", "skipped:"] + [f"  {k}: {v}" for k, v in report.skipped.items()]
    failed = [tr for tr in report.trials if tr.status == "failed"]
    if failed:
        lines += ["", "failed trials:"] + [
            f"  #{tr.id} {tr.strategy} {tr.cache}: {tr.reason}" for tr in failed
        ]
    unverified = [tr for tr in report.trials if tr.status == "ok" and not tr.cache_verified]
    if unverified:
        lines += [
            "",
            f"{len(unverified)} trial(s) kept out of the medians: cache state not verified",
        ]
        lines += [
            f"  #{tr.id} {tr.strategy} {tr.cache}: {tr.detail.get('cache_note', '')}"
            for tr in unverified
        ]
    for note in report.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)
