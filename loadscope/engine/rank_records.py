"""What ``bench --ranks`` records: its options, one rank's numbers, a trial, the report, events.

Owns the records the multi-rank trial runner builds (:class:`RankResult` per rank and
trial, :class:`BroadcastTrial`, :class:`BroadcastSummary` per mode and cache state,
:class:`BroadcastReport` with its JSON; its text and Markdown are
``loadscope.report.rank_text``'s), the events a live view follows
and the errors a run raises. The JSON keeps these fields in this order.

May import: ``loadscope.engine.trials``, ``loadscope.base``, ``loadscope.loaders.rank_events``
(:class:`RankInfo`, the description each rank sends as it starts). Nothing here runs a
rank.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from loadscope.base import errors
from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.engine.trials import CacheMode, Started, TrialStatus
from loadscope.loaders.rank_events import MODES, Mode, RankInfo, RankNumbers

SCHEMA_VERSION = 1
Device = Literal["cpu", "cuda"]


class BroadcastError(LoadscopeError):
    """The multi-rank benchmark cannot run as asked."""

    exit_code = ExitCode.USAGE


class NotEnoughMemory(BroadcastError, errors.NotEnoughMemory):
    """The plan would hold more copies of the model than this machine has room for."""

    exit_code = ExitCode.RESOURCES


class BroadcastCancelled(LoadscopeError):
    """The caller's cancel event was set: every rank's process group was killed."""

    exit_code = ExitCode.INTERRUPTED


#: Why a trial the budget left no time for did not run.
OUT_OF_TIME = "not run: the budget (--budget) left no time for it"


@dataclass(frozen=True, slots=True)
class BroadcastOptions:
    ranks: int = 2
    modes: tuple[Mode, ...] = MODES
    cache: tuple[CacheMode, ...] = ("cold", "warm")
    repeats: int = 3
    warmup: bool = True
    device: Device = "cpu"
    #: None: gloo on CPU, NCCL on CUDA.
    backend: str | None = None
    #: One trial (its cache set-up included; the first also covers start-up) without
    #: every rank reporting it: the launch is taken as hung and killed. None: 600 s, or
    #: more for a model that takes longer to read twice (pre-read and load) at 10 MB/s.
    trial_timeout_s: float | None = None
    #: The whole launch, start-up included. None: every trial's timeout, plus 2 minutes.
    timeout_s: float | None = None
    #: ``time.monotonic()`` after which no trial starts (``--budget``): rank 0 starts the
    #: next trial only when the longest so far still fits, and the ranks agree on it; the
    #: trials left are skipped, said why. None: every trial runs.
    deadline: float | None = field(default=None, compare=False)
    allow_drop_caches: bool = False
    #: Bytes of memory available to the ranks (tests inject a small one); default:
    #: min(available RAM, cgroup limit - usage).
    memory_available: Callable[[], int] | None = field(default=None, compare=False)
    #: Set from another thread to stop: every rank is killed and BroadcastCancelled raised.
    cancel: threading.Event | None = field(default=None, compare=False)
    read_chunk_bytes: int = 16 << 20
    master_addr: str = "127.0.0.1"
    #: A model in an object store: the ranged GETs each reading rank keeps in flight.
    store_concurrency: int = 32


@dataclass(frozen=True, slots=True)
class RankResult(RankNumbers):
    """One rank's numbers in one trial (:class:`~loadscope.loaders.rank.RankNumbers`, as
    the rank reported them), its RSS growth, and whether its tensors were the model's."""

    rss_delta_bytes: int | None = None
    #: Of it, pages other ranks may map too (page cache, shared memory).
    rss_shared_delta_bytes: int | None = None
    verified: bool | None = None
    mismatch: str | None = None


@dataclass(frozen=True, slots=True)
class BroadcastTrial:
    """One trial of the plan, never changed once built: as planned (mode, cache state,
    round), with rank 0's cache set-up once it reports it, then with every rank's numbers
    and their aggregate once the last rank has reported (or failed, or not run)."""

    id: int
    mode: Mode
    cache: CacheMode
    repeat: int  # 0 is the warm-up round
    warmup: bool
    status: TrialStatus = "ok"
    reason: str | None = None
    ranks: list[RankResult] = field(default_factory=list)
    slowest_rank: int | None = None
    slowest_seconds: float | None = None
    #: Model bytes / the slowest rank's time.
    bytes_per_s: float | None = None
    bytes_read_total: int | None = None
    read_amplification: float | None = None
    storage_read_bytes_total: int | None = None
    storage_amplification: float | None = None
    #: Where the storage's bytes were counted: "request log" (the emulated disk's),
    #: "/proc/<pid>/io" (the block layer, per rank), None where neither could see them.
    storage_counter: str | None = None
    peak_rss_bytes_total: int | None = None
    rss_delta_bytes_total: int | None = None
    cache_verified: bool | None = None
    residency_before: float | None = None
    cache_note: str = ""
    cache_seconds: float | None = None
    verified: bool | None = None


@dataclass(frozen=True, slots=True)
class BroadcastSummary:
    mode: Mode
    cache: CacheMode
    trials: int
    median_seconds: float | None
    median_bytes_per_s: float | None
    min_seconds: float | None
    max_seconds: float | None
    first_run_seconds: float | None
    read_amplification: float | None
    storage_amplification: float | None
    peak_rss_bytes_total: float | None
    #: RSS the ranks gained over a trial, summed: the copies of the model held.
    rss_delta_bytes_total: float | None
    #: Median independent time / this mode's median time, in the same cache state.
    speedup_vs_independent: float | None = None


@dataclass(slots=True)
class BroadcastReport:
    target: dict[str, Any]
    options: dict[str, Any]
    model_bytes: int
    tensors: int
    ranks: list[RankInfo]
    trials: list[BroadcastTrial]
    summary: list[BroadcastSummary]
    #: Modes left out, and why (the memory guard).
    skipped: dict[str, str]
    #: Why the launch stopped early, if it did (each names the rank).
    failures: list[str]
    notes: list[str]
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "target": self.target,
            "options": self.options,
            "model_bytes": self.model_bytes,
            "tensors": self.tensors,
            "ranks": [asdict(r) for r in self.ranks],
            "trials": [asdict(t) for t in self.trials],
            "summary": [asdict(s) for s in self.summary],
            "skipped": self.skipped,
            "failures": self.failures,
            "notes": self.notes,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


# -- events for a live view ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankStarted:
    info: RankInfo


class BroadcastTrialStarted(Started[BroadcastTrial]):
    """Rank 0 has set up (and checked) the cache; the ranks' clocks start next."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class RankFinished:
    trial: BroadcastTrial
    result: RankResult


@dataclass(frozen=True, slots=True)
class BroadcastTrialFinished:
    trial: BroadcastTrial


BroadcastEvent = RankStarted | BroadcastTrialStarted | RankFinished | BroadcastTrialFinished
BroadcastListener = Callable[[BroadcastEvent], None]
