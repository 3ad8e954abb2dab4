"""What ``loadscope bench`` records: its options, one trial, a summary, the report, its events.

Owns the records the single-process trial runner builds (:class:`Trial` once per trial,
:class:`Summary` per strategy and cache state, :class:`BenchReport` with its JSON), the
events a live view follows (CLI progress line, TUI charts) and the errors a run raises.
The JSON keeps these fields in this order: a report's shape is its schema.

May import: ``loadscope.engine.trials``, ``loadscope.loaders.strategies``,
``loadscope.base``. Nothing here runs a trial.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.engine.trials import CacheMode, Started, TrialStatus
from loadscope.loaders.strategies import reads_torch

SCHEMA_VERSION = 1


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
    #: Per (strategy, cache), the bytes its sample may hold instead (a fast strategy, or a
    #: warm trial, affords more in the same time; at least the model's size: it runs whole).
    sample_bytes_for: dict[tuple[str, str], int] = field(default_factory=dict)
    sample_reason: str = "asked for"
    #: Strategies that only run whole, with what one whole trial of each is estimated to
    #: take (seconds: its fixed cost, and its load by the planner's rates, replaced by the
    #: measured load of the strategy it ``reads_as`` once that ran): where the plan
    #: skipped one, it runs once, cold, after the planned trials, before any extra round,
    #: when what is left of ``deadline`` holds it (a route with no figure before a
    #: figure's repeats), in this order, stopping at the first that does not fit.
    late: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Up to this many rounds beyond ``repeats`` while ``deadline`` leaves time for one
    #: more, as long as the last round took.
    more_rounds: int = 0
    #: Where a whole extra round does not fit: these strategies' trials of it, when they
    #: do (the figures printed under a fix, and their baselines, before the evidence).
    favoured: tuple[str, ...] = ()
    #: The default loads every ratio is against: their fit trials (small samples) run even
    #: past ``deadline``, since without them the default's figure, the denominator of
    #: every speed-up, is refused and the run measures nothing.
    denominators: tuple[str, ...] = ()
    #: Strategies to run warm as well (None: all of them, when "warm" is asked for).
    warm_strategies: tuple[str, ...] | None = None
    #: The worker command (tests inject misbehaving workers); default: the real worker.
    worker_argv: tuple[str, ...] | None = None
    #: Where tensors are loaded: "cpu" runs the CPU strategies, "cuda" or "cuda:N" the GPU ones.
    device: str = "cpu"
    #: On a GPU run, the CPU strategies named in ``strategies`` run too, on the CPU (the
    #: doctor on a GPU machine times the routes users apply on either side).
    cpu_too: bool = False


@dataclass(frozen=True, slots=True)
class Trial:
    """One trial, never changed once built: as planned (strategy, cache state, round,
    what it reads), then as :func:`~loadscope.engine.trial_run.run_trial` finished it,
    every measured field set in one go (and, in a sampled run, with its whole-model time)."""

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


@dataclass(frozen=True, slots=True)
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
    #: Of ``fixed_seconds``, the set-up the trials measured apart (a command's start-up,
    #: the first call's imports): known, not fitted.
    setup_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    bytes: int
    total_bytes: int
    tensors: int
    files: int
    #: The largest relative error of any strategy's extrapolation (each is the error of
    #: a fit of a fixed cost and a rate to its trials at two or three sample sizes).
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

    def other_format_differs(self) -> str | None:
        """Why the safetensors beside a torch model are not that model: the first trial of
        them whose tensors differ from the torch files'; None when none did."""
        if not self.target.get("safetensors_beside"):
            return None
        for t in self.trials:
            wrong = t.status == "failed" and (t.reason or "").startswith("wrong tensors")
            if wrong and not reads_torch(t.strategy):
                return (
                    "the safetensors files beside the model hold other tensors than the torch"
                    f" files (trial #{t.id}, {t.strategy}: {t.reason}): not the same model"
                )
        return None


# -- events for a live view (CLI progress line, TUI charts) -------------------------------------


class TrialStarted(Started[Trial]):
    """A trial's cache is about to be put in its state, and its worker started."""

    __slots__ = ()


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
