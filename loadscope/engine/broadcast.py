"""Multi-rank loading with ``torch.distributed``: every rank reads, or rank 0 reads and broadcasts.

With several ranks on a node (one per GPU), the question is whether each rank
should read the checkpoint itself (``independent``: N times the reads, N
readers on the storage at once) or one rank should read and broadcast
(``broadcast``, ``broadcast-async``), or the files should be split between the
ranks and shared (``sharded``). This module answers it by measurement, the way
the FastVideo A/B benchmark does: one launch of N real ranks (gloo on CPU,
NCCL on CUDA; see ``loaders/rank.py``) runs an interleaved plan (mode x cache x
repeat, one warm-up round first) with barriers between trials, rank 0 putting
the page cache in the asked state and verifying it before each trial.

Per trial the report gives every rank's time, the slowest rank (the load is done
when the last rank has every tensor), the bytes the ranks read in total and the
read amplification (total bytes read / model bytes: ~N for independent, ~1 for
broadcast and sharded), the bytes that really reached storage (``/proc/<pid>/io``,
a cross-check: ranks on one node share the page cache, so concurrent independent
reads may hit storage only once), peak RSS summed over ranks, GB/s (model bytes /
slowest rank's time), and whether every rank's tensors match a reference read.
The summary takes medians over repeats (warm-up excluded) and the speed-up of
each mode over ``independent`` in the same cache state.

The parent never imports torch: the ranks do. A rank that dies, fails or hangs
ends the launch: every rank's process group is killed, the trial it was in is
failed with a reason that names the rank, and later trials are marked not run.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from loadscope.base import errors
from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.base.units import format_bytes, format_rate
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
from loadscope.loaders.forkserver import ForkedProcess
from loadscope.loaders.rank import (
    RankCache,
    RankDone,
    RankEvent,
    RankFailed,
    RankProtocolError,
    RankStart,
    RankTrial,
    decode,
)
from loadscope.model.targets import Target, WeightFile
from loadscope.probes.system import memory_headroom, oom_kills

SCHEMA_VERSION = 1
Mode = Literal["independent", "broadcast", "broadcast-async", "sharded"]
MODES: tuple[Mode, ...] = get_args(Mode)
Device = Literal["cpu", "cuda"]
#: Memory a rank needs beyond the tensors it holds: measured ~230 MB RSS per rank after
#: init_process_group (torch, gloo), much of it shared with the fork server; rounded up.
RANK_OVERHEAD_BYTES = 256 << 20
#: Default timeouts allow reading the model at this rate (a slow network disk).
SLOWEST_EXPECTED_BYTES_PER_S = 10e6
#: After the first failure, how long to keep listening for the other ranks' reasons.
FAILURE_GRACE_S = 1.0
_STDERR_TAIL = 40
#: Plans longer than this go to the ranks in a file (argv strings are capped at 128 KiB).
_INLINE_PLAN_CHARS = 100_000


class BroadcastError(LoadscopeError):
    """The multi-rank benchmark cannot run as asked."""

    exit_code = ExitCode.USAGE


class NotEnoughMemory(BroadcastError, errors.NotEnoughMemory):
    """The plan would hold more copies of the model than this machine has room for."""

    exit_code = ExitCode.RESOURCES


class BroadcastCancelled(LoadscopeError):
    """The caller's cancel event was set: every rank's process group was killed."""

    exit_code = ExitCode.INTERRUPTED


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
    allow_drop_caches: bool = False
    #: Bytes of memory available to the ranks (tests inject a small one); default:
    #: min(available RAM, cgroup limit - usage).
    memory_available: Callable[[], int] | None = field(default=None, compare=False)
    #: Set from another thread to stop: every rank is killed and BroadcastCancelled raised.
    cancel: threading.Event | None = field(default=None, compare=False)
    read_chunk_bytes: int = 16 << 20
    master_addr: str = "127.0.0.1"


@dataclass(slots=True)
class RankResult:
    """One rank's numbers in one trial."""

    rank: int
    seconds: float
    #: Bytes of every read the rank issued on the files (its own accounting).
    bytes_read: int
    read_calls: int
    #: /proc/<pid>/io read_bytes over the timed region: what reached storage.
    storage_read_bytes: int | None
    #: /proc/<pid>/io rchar: bytes through read syscalls, page-cache hits included.
    rchar: int | None
    peak_rss_bytes: int | None
    #: "trial" (VmHWM reset at the trial's start) or "process" (ru_maxrss, lifetime).
    peak_rss_scope: str
    ru_maxrss_bytes: int
    rss_delta_bytes: int | None
    tensors: int
    tensor_bytes: int
    collectives: int
    verified: bool | None = None
    mismatch: str | None = None


@dataclass(slots=True)
class BroadcastTrial:
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
    peak_rss_bytes_total: int | None = None
    rss_delta_bytes_total: int | None = None
    cache_verified: bool | None = None
    residency_before: float | None = None
    cache_note: str = ""
    cache_seconds: float | None = None
    verified: bool | None = None


@dataclass(slots=True)
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
class RankInfo:
    rank: int
    pid: int
    backend: str
    device: str
    torch_version: str
    init_s: float
    threads: int
    rss_bytes: int | None


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

    def to_markdown(self) -> str:
        return to_markdown(self)


# -- events for a live view ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RankStarted:
    info: RankInfo


@dataclass(frozen=True, slots=True)
class BroadcastTrialStarted:
    """Rank 0 has set up (and checked) the cache; the ranks' clocks start next."""

    trial: BroadcastTrial
    index: int
    total: int


@dataclass(frozen=True, slots=True)
class RankFinished:
    trial: BroadcastTrial
    result: RankResult


@dataclass(frozen=True, slots=True)
class BroadcastTrialFinished:
    trial: BroadcastTrial


BroadcastEvent = RankStarted | BroadcastTrialStarted | RankFinished | BroadcastTrialFinished
BroadcastListener = Callable[[BroadcastEvent], None]


# -- planning -----------------------------------------------------------------------------------


def memory_need(mode: Mode, files: list[WeightFile], options: BroadcastOptions) -> tuple[int, str]:
    """Peak host memory a trial of ``mode`` needs, and how it was counted."""
    model = sum(f.size_bytes for f in files)
    largest = max((f.size_bytes for f in files), default=0)
    n = options.ranks
    runtime = n * RANK_OVERHEAD_BYTES
    if options.device == "cpu":
        # every mode ends with every rank holding the whole model
        need, how = n * model + runtime, f"{n} ranks x the {format_bytes(model)} model"
    else:
        # host buffers are staging only (one file per reading rank at a time)
        readers = 1 if mode in ("broadcast", "broadcast-async") else min(n, max(1, len(files)))
        need = readers * largest + runtime
        how = f"{readers} reading rank(s) x the largest file ({format_bytes(largest)})"
    if "warm" in options.cache:
        need += model
        how += f" + the page cache holding the model for warm trials ({format_bytes(model)})"
    return need, how + f" + {format_bytes(RANK_OVERHEAD_BYTES)} per rank of runtime"


def memory_guard(
    files: list[WeightFile], options: BroadcastOptions, available: int
) -> dict[str, str]:
    """Modes that would not fit in ``available`` bytes, with the numbers."""
    out: dict[str, str] = {}
    for mode in options.modes:
        need, how = memory_need(mode, files, options)
        if need > available:
            out[mode] = (
                f"would hold ~{format_bytes(need)} in RAM ({how}) but only"
                f" {format_bytes(available)} is available within RAM and the cgroup limit"
                f" ({format_bytes(need - available)} missing)"
            )
    return out


def plan_trials(options: BroadcastOptions, modes: tuple[Mode, ...]) -> list[BroadcastTrial]:
    """Interleaved: round by round, every cache state, every mode (round 0 is the warm-up)."""
    plan = interleaved(
        range(0 if options.warmup else 1, options.repeats + 1),
        options.cache,
        modes,
        lambda r, cache, mode: BroadcastTrial(0, mode, cache, r, r == 0),
    )
    for i, trial in enumerate(plan, 1):
        trial.id = i
    return plan


def _check(target: Target, options: BroadcastOptions) -> None:
    if options.ranks < 1:
        raise BroadcastError(f"ranks must be at least 1, not {options.ranks}")
    if options.repeats < 1:
        raise BroadcastError(f"repeats must be at least 1, not {options.repeats}")
    if not options.modes:
        raise BroadcastError("no mode to run")
    for mode in options.modes:
        if mode not in MODES:
            raise BroadcastError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
    for cache in options.cache:
        if cache not in ("cold", "warm"):
            raise BroadcastError(f"unknown cache state {cache!r} (cold or warm)")
    if not options.cache:
        raise BroadcastError("no cache state to run (cold, warm)")
    if target.formats != {"safetensors"}:
        raise BroadcastError(
            "multi-rank loading reads safetensors checkpoints; this target is "
            + " and ".join(sorted(target.formats))
        )
    if not target.files:
        raise BroadcastError("the target has no weight files")
    if options.device == "cuda":
        gpus = _visible_nvidia_gpus()
        if gpus is None and not os.path.exists("/dev/kfd"):
            raise BroadcastError(
                "device cuda needs a GPU driver (no /proc/driver/nvidia, /dev/kfd)"
            )
        backend = options.backend or "nccl"
        if gpus is not None and backend == "nccl" and gpus < options.ranks:
            raise BroadcastError(
                f"NCCL needs one GPU per rank: {options.ranks} ranks, {gpus} GPU(s) here"
            )


def _visible_nvidia_gpus() -> int | None:
    """GPUs the NVIDIA driver lists (not narrowed by CUDA_VISIBLE_DEVICES); None: no driver."""
    try:
        count = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip()]))
    return count


def timeouts(options: BroadcastOptions, model_bytes: int, trials: int) -> tuple[float, float]:
    """(one trial's, the whole launch's) timeout in seconds: as asked, else from the model."""
    trial = options.trial_timeout_s
    if trial is None:
        trial = max(600.0, 2 * model_bytes / SLOWEST_EXPECTED_BYTES_PER_S)
    whole = options.timeout_s
    if whole is None:
        whole = trial * trials + 120.0
    return trial, whole


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (rank 0's store binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


# -- the launch ---------------------------------------------------------------------------------


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[str] | ForkedProcess:
    """One rank, forked from the fork server (torch already imported), else a fresh interpreter."""
    if forkserver.enabled():
        try:
            return forkserver.shared_server().spawn(args, env=env, module="loadscope.loaders.rank")
        except forkserver.ForkServerError:
            pass  # a fresh interpreter still works, only slower to start
    return subprocess.Popen(
        [sys.executable, "-m", "loadscope.loaders.rank", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: killable with all it spawns
    )


_Item = tuple[int, RankEvent | RankProtocolError | None]


class _Rank:
    """One running rank: its process, a reader per pipe, and what it has said."""

    def __init__(
        self, rank: int, proc: subprocess.Popen[str] | ForkedProcess, out: queue.Queue[_Item]
    ) -> None:
        self.rank = rank
        self.proc = proc
        self.stderr: deque[str] = deque(maxlen=_STDERR_TAIL)
        self.done = False
        self.failed = False
        self.exit_code: int | None = None
        self._out = threading.Thread(target=self._read_stdout, args=(out,), daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()

    def _read_stdout(self, out: queue.Queue[_Item]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                out.put((self.rank, decode(line)))
            except RankProtocolError as exc:
                out.put((self.rank, exc))
        out.put((self.rank, None))

    def _read_stderr(self) -> None:
        # Read concurrently: a rank that fills its stderr pipe must not stall.
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def join(self, timeout: float = 5) -> None:
        self._out.join(timeout)
        self._err.join(timeout)


@dataclass(slots=True)
class _Outcome:
    infos: dict[int, RankInfo] = field(default_factory=dict)
    #: (priority, arrival order, text): deaths first, then the ranks' own reasons.
    problems: list[tuple[int, int, str]] = field(default_factory=list)
    protocol_errors: list[str] = field(default_factory=list)
    #: Trials every rank reported on.
    complete: set[int] = field(default_factory=set)


class _Launch:
    """N ranks running one plan; events turned into trials, failures into reasons."""

    def __init__(
        self,
        plan: list[BroadcastTrial],
        files: list[WeightFile],
        options: BroadcastOptions,
        reference: Mapping[str, str],
        model_bytes: int,
        say: BroadcastListener,
    ) -> None:
        self.plan = plan
        self.by_id = {t.id: t for t in plan}
        self.files = files
        self.options = options
        self.reference = reference
        self.model_bytes = model_bytes
        self.say = say
        self.results: dict[int, dict[int, RankResult]] = {t.id: {} for t in plan}
        self.trial_timeout_s, self.timeout_s = timeouts(options, model_bytes, len(plan))

    def _plan_json(self) -> str:
        o = self.options
        return json.dumps(
            {
                "files": [{"path": str(f.path), "size_bytes": f.size_bytes} for f in self.files],
                "trials": [
                    {"id": t.id, "mode": t.mode, "cache": t.cache, "repeat": t.repeat}
                    for t in self.plan
                ],
                "device": o.device,
                "backend": o.backend,
                # the parent's own timeout fires first, so a hang is reported by rank
                "collective_timeout_s": self.trial_timeout_s + 60,
                "allow_drop_caches": o.allow_drop_caches,
                "read_chunk_bytes": o.read_chunk_bytes,
            }
        )

    def run(self) -> _Outcome:
        o = self.options
        port = free_port(o.master_addr)
        plan_text = self._plan_json()
        with tempfile.TemporaryDirectory(prefix="loadscope-ranks-") as tmp:
            arg = plan_text
            if len(plan_text) > _INLINE_PLAN_CHARS:
                path = os.path.join(tmp, "plan.json")
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(plan_text)
                arg = "@" + path
            events: queue.Queue[_Item] = queue.Queue()
            ranks: list[_Rank] = []
            oom_before = oom_kills()
            try:
                for r in range(o.ranks):
                    env = {
                        **os.environ,
                        "RANK": str(r),
                        "WORLD_SIZE": str(o.ranks),
                        "LOCAL_RANK": str(r),
                        "LOCAL_WORLD_SIZE": str(o.ranks),
                        "MASTER_ADDR": o.master_addr,
                        "MASTER_PORT": str(port),
                    }
                    if o.master_addr.startswith("127.") and "GLOO_SOCKET_IFNAME" not in env:
                        env["GLOO_SOCKET_IFNAME"] = "lo"  # every rank is on this host
                    ranks.append(_Rank(r, _spawn([arg], env), events))
                return self._watch(ranks, events, oom_before)
            finally:
                for rank in ranks:
                    if rank.proc.poll() is None:
                        kill_group(rank.proc)
                for rank in ranks:
                    rank.join()

    def _watch(
        self, ranks: list[_Rank], events: queue.Queue[_Item], oom_before: int | None
    ) -> _Outcome:
        o = self.options
        out = _Outcome()
        order = 0
        started = time.monotonic()
        run_deadline = started + self.timeout_s
        last_progress = started
        failure_at: float | None = None

        def problem(priority: int, text: str) -> None:
            nonlocal order, failure_at
            order += 1
            out.problems.append((priority, order, text))
            if failure_at is None:
                failure_at = time.monotonic()

        while not all(r.exit_code is not None for r in ranks):
            now = time.monotonic()
            if o.cancel is not None and o.cancel.is_set():
                for r in ranks:
                    kill_group(r.proc)
                raise BroadcastCancelled("stopped: every rank's process group was killed")
            if failure_at is not None:
                if now - failure_at > FAILURE_GRACE_S:
                    break
            elif now > run_deadline or now - last_progress > self.trial_timeout_s:
                limit = self.timeout_s if now > run_deadline else self.trial_timeout_s
                problem(0, self._hang_reason(ranks, out, limit))
                break
            try:
                rank_no, item = events.get(timeout=0.1)
            except queue.Empty:
                continue
            rank = ranks[rank_no]
            if item is None:  # stdout closed: the rank exited (or is about to)
                try:
                    rank.exit_code = rank.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    kill_group(rank.proc)
                    rank.exit_code = rank.proc.poll()
                    rank.exit_code = -signal.SIGKILL if rank.exit_code is None else rank.exit_code
                if not rank.done and not rank.failed:
                    rank.join(1)  # its last stderr lines carry the reason
                    # The trial it died in: the first it had not reported (none when it
                    # died starting up, before it said it had joined).
                    current = next(
                        (t for t in self.plan if rank_no not in self.results[t.id]), None
                    )
                    if rank_no not in out.infos:
                        current = None
                    problem(
                        0,
                        exit_reason(
                            f"rank {rank_no}",
                            rank.exit_code,
                            rank.stderr,
                            oom_before,
                            killed="was ",
                            clean_exit="exited before finishing the plan",
                            unclean_exit="without saying why",
                            during=(
                                f"during trial #{current.id} ({current.mode}, {current.cache})"
                                if current is not None
                                else ""
                            ),
                        ),
                    )
            elif isinstance(item, RankProtocolError):
                out.protocol_errors.append(f"rank {rank_no}: {item}")
            elif isinstance(item, RankStart):
                info = RankInfo(
                    item.rank,
                    item.pid,
                    item.backend,
                    item.device,
                    item.torch_version,
                    item.init_s,
                    item.threads,
                    item.rss_bytes,
                )
                out.infos[item.rank] = info
                self.say(RankStarted(info))
            elif isinstance(item, RankCache):
                trial = self.by_id[item.trial]
                trial.cache_verified = item.verified
                trial.residency_before = item.residency
                trial.cache_note = item.note
                trial.cache_seconds = item.seconds
                self.say(BroadcastTrialStarted(trial, self.plan.index(trial), len(self.plan)))
            elif isinstance(item, RankTrial):
                if self._add(item):
                    out.complete.add(item.trial)
                    last_progress = time.monotonic()
            elif isinstance(item, RankFailed):
                rank.failed = True
                where = f" in trial #{item.trial}" if item.trial is not None else " at start-up"
                reason = _SOURCE_LOCATION.sub("", item.reason)
                problem(1, f"rank {rank_no} failed{where}: {reason}"[:400])
            elif isinstance(item, RankDone):
                rank.done = True
        return out

    def _hang_reason(self, ranks: list[_Rank], out: _Outcome, limit: float) -> str:
        current = next((t for t in self.plan if t.id not in out.complete), None)
        if current is None:
            waiting = [r.rank for r in ranks if r.exit_code is None]
            return f"timed out after {limit:.3g} s at the end: rank(s) {_list(waiting)} still ran"
        if not out.infos or len(out.infos) < len(ranks):
            missing = [r.rank for r in ranks if r.rank not in out.infos]
            return (
                f"timed out after {limit:.3g} s starting: rank(s) {_list(missing)} never joined"
                " the process group"
            )
        reported = self.results[current.id]
        late = [r for r in ranks if r.rank not in reported]
        states = ", ".join(f"rank {r.rank} {_proc_state(r.proc.pid)}" for r in late)
        return (
            f"timed out after {limit:.3g} s in trial #{current.id} ({current.mode},"
            f" {current.cache}): rank(s) {_list([r.rank for r in late])} had not finished it"
            f" ({states})"
            + (f"; rank(s) {_list(sorted(reported))} had" if reported else "")
            + "; every rank was killed"
        )

    def _add(self, event: RankTrial) -> bool:
        """Record one rank's result; True when every rank has reported this trial."""
        trial = self.by_id[event.trial]
        before, after = event.rss_before_bytes, event.rss_after_bytes
        result = RankResult(
            rank=event.rank,
            seconds=event.seconds,
            bytes_read=event.bytes_read,
            read_calls=event.read_calls,
            storage_read_bytes=event.storage_read_bytes,
            rchar=event.rchar,
            peak_rss_bytes=event.peak_rss_bytes,
            peak_rss_scope=event.peak_rss_scope,
            ru_maxrss_bytes=event.ru_maxrss_bytes,
            rss_delta_bytes=None if before is None or after is None else after - before,
            tensors=event.tensors,
            tensor_bytes=event.tensor_bytes,
            collectives=event.collectives,
        )
        mismatched = sorted(n for n, d in event.digests.items() if self.reference.get(n) != d)
        missing = sorted(set(self.reference) - set(event.digests))
        result.verified = not mismatched and not missing
        if not result.verified:
            parts = []
            if mismatched:
                parts.append(
                    f"{len(mismatched)} tensor(s) differ from the reference read"
                    f" (first: {mismatched[0]})"
                )
            if missing:
                parts.append(f"{len(missing)} tensor(s) missing (first: {missing[0]})")
            result.mismatch = "; ".join(parts)
        self.results[trial.id][event.rank] = result
        self.say(RankFinished(trial, result))
        if len(self.results[trial.id]) < self.options.ranks:
            return False
        _finish(trial, self.results[trial.id], self.model_bytes)
        self.say(BroadcastTrialFinished(trial))
        return True


#: gloo and c10 prefix errors with their source file: "[/__w/.../pair.cc:553] ".
_SOURCE_LOCATION = re.compile(r"\[[^\]\s]+\.(?:cc|cpp|h|hpp):\d+\] ")
_STATES = {
    "R": "running",
    "S": "waiting (on another rank?)",
    "D": "in uninterruptible I/O (storage?)",
    "T": "stopped",
    "t": "stopped by a debugger",
    "Z": "exited",
}


def _proc_state(pid: int) -> str:
    """What a late rank is doing, from ``/proc/<pid>/stat``: a hung read shows as D."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
    return _STATES.get(state, f"in state {state}")


def _list(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) or "none"


def _finish(trial: BroadcastTrial, results: dict[int, RankResult], model_bytes: int) -> None:
    """Aggregate every rank's numbers into the trial."""
    trial.ranks = [results[r] for r in sorted(results)]
    slowest = max(trial.ranks, key=lambda r: r.seconds)
    trial.slowest_rank, trial.slowest_seconds = slowest.rank, slowest.seconds
    trial.bytes_per_s = model_bytes / slowest.seconds if slowest.seconds > 0 else None
    trial.bytes_read_total = sum(r.bytes_read for r in trial.ranks)
    trial.read_amplification = trial.bytes_read_total / model_bytes if model_bytes else None
    storage = [r.storage_read_bytes for r in trial.ranks]
    if all(s is not None for s in storage):
        trial.storage_read_bytes_total = sum(s for s in storage if s is not None)
        trial.storage_amplification = (
            trial.storage_read_bytes_total / model_bytes if model_bytes else None
        )
    peaks = [r.peak_rss_bytes for r in trial.ranks]
    if all(p is not None for p in peaks):
        trial.peak_rss_bytes_total = sum(p for p in peaks if p is not None)
    deltas = [r.rss_delta_bytes for r in trial.ranks]
    if all(d is not None for d in deltas):
        trial.rss_delta_bytes_total = sum(d for d in deltas if d is not None)
    trial.verified = all(r.verified for r in trial.ranks)
    if not trial.verified:
        trial.status = "failed"
        trial.reason = "wrong tensors: " + "; ".join(
            f"rank {r.rank}: {r.mismatch}" for r in trial.ranks if not r.verified
        )


def _summaries(trials: list[BroadcastTrial]) -> list[BroadcastSummary]:
    out: list[BroadcastSummary] = []
    keys = list(dict.fromkeys((t.mode, t.cache) for t in trials))
    for mode, cache in keys:
        group = [t for t in trials if t.mode == mode and t.cache == cache]

        def counted(t: BroadcastTrial) -> bool:
            return not t.warmup and t.status == "ok" and bool(t.cache_verified)

        times = spread(
            group,
            lambda t: t.slowest_seconds,
            steady=counted,
            warmup=lambda t: t.warmup and t.status == "ok",
        )
        steady = [t for t in group if counted(t) and t.slowest_seconds]
        out.append(
            BroadcastSummary(
                mode,
                cache,
                times.trials,
                times.median_s,
                median(t.bytes_per_s for t in steady),
                times.min_s,
                times.max_s,
                times.first_run_s,
                median(t.read_amplification for t in steady),
                median(t.storage_amplification for t in steady),
                median(t.peak_rss_bytes_total for t in steady),
                median(t.rss_delta_bytes_total for t in steady),
            )
        )
    faster = speedups({(s.mode, s.cache): s.median_seconds for s in out}, "independent")
    for s in out:
        s.speedup_vs_independent = faster.get((s.mode, s.cache))
    return out


def run_broadcast(
    target: Target, options: BroadcastOptions, listener: BroadcastListener | None = None
) -> BroadcastReport:
    """Run the multi-rank plan on ``target`` with ``options.ranks`` real ranks; the report."""
    say = listener or (lambda _e: None)
    _check(target, options)
    files = list(target.files)
    model_bytes = target.total_bytes
    available = (options.memory_available or memory_headroom)()
    skipped = memory_guard(files, options, available)
    modes = tuple(m for m in options.modes if m not in skipped)
    if not modes:
        raise NotEnoughMemory(
            f"{options.ranks} ranks cannot load this model here: "
            + "; ".join(f"{m}: {why}" for m, why in skipped.items())
        )
    notes: list[str] = []
    if options.device == "cuda":
        notes.append(
            "GPU memory was not checked before the run: each rank holds the whole model on its GPU"
        )
    reference = reference_digests(files, {})
    plan = plan_trials(options, modes)
    launch = _Launch(plan, files, options, reference, model_bytes, say)
    outcome = launch.run()
    if outcome.problems and not outcome.infos and _port_taken(outcome):
        # Another process took the free port between our check and rank 0's bind: once more.
        notes.append("the rendezvous port was taken; the ranks were started again")
        outcome = _Launch(plan, files, options, reference, model_bytes, say).run()
    failures = [text for _p, _o, text in sorted(outcome.problems)]
    _mark_unfinished(plan, outcome, failures)
    if outcome.protocol_errors:
        notes.append(
            f"{len(outcome.protocol_errors)} line(s) from the ranks were not events"
            f" (first: {outcome.protocol_errors[0]})"
        )
    if any(r.peak_rss_scope == "process" for t in plan for r in t.ranks):
        notes.append(
            "peak RSS is the rank's lifetime peak (ru_maxrss) in some trials:"
            " /proc/self/clear_refs refused the reset"
        )
    infos = [outcome.infos[r] for r in sorted(outcome.infos)]
    return BroadcastReport(
        target={
            "spec": target.report_spec,
            "kind": target.kind,
            "root": target.report_root,
            "files": len(files),
            "total_bytes": model_bytes,
            "formats": sorted(target.formats),
        },
        options={
            "ranks": options.ranks,
            "modes": list(modes),
            "cache": list(options.cache),
            "repeats": options.repeats,
            "warmup": options.warmup,
            "device": options.device,
            "backend": infos[0].backend if infos else options.backend,
            "timeout_s": launch.timeout_s,
            "trial_timeout_s": launch.trial_timeout_s,
        },
        model_bytes=model_bytes,
        tensors=len(reference),
        ranks=infos,
        trials=plan,
        summary=_summaries(plan),
        skipped=skipped,
        failures=failures,
        notes=notes,
    )


def _port_taken(outcome: _Outcome) -> bool:
    text = " ".join(p[2] for p in outcome.problems).lower()
    return "address already in use" in text or "eaddrinuse" in text


def _mark_unfinished(plan: list[BroadcastTrial], outcome: _Outcome, failures: list[str]) -> None:
    """The trial the launch died in is failed with the reasons; the ones after were not run."""
    stopped_at: BroadcastTrial | None = None
    for trial in plan:
        if trial.id in outcome.complete:
            continue
        if stopped_at is None:
            stopped_at = trial
            trial.status = "failed"
            trial.reason = "; ".join(failures) or "the ranks stopped without finishing it"
        else:
            trial.status = "skipped"
            trial.reason = f"not run: the ranks were stopped in trial #{stopped_at.id}"


# -- rendering ----------------------------------------------------------------------------------


def _secs(value: float | None) -> str:
    """At most six characters: "8.69ms", "1.23s", "123s"."""
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.3g}ms"
    return f"{value:.3g}s" if value < 100 else f"{value:.0f}s"


def _x(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}x"


def _rate(value: float | None) -> str:
    return "-" if not value else format_rate(value)


def _size(value: float | None) -> str:
    return "-" if value is None else format_bytes(value).replace(" ", "")


def _header_lines(report: BroadcastReport) -> tuple[str, str]:
    t, o = report.target, report.options
    return (
        f"{t['spec']} ({t['files']} file(s), {format_bytes(report.model_bytes)},"
        f" {report.tensors} tensors)",
        f"{o['ranks']} ({o['backend'] or '?'}, {o['device']}),"
        f" {o['repeats']} repeat(s){' after a warm-up round' if o['warmup'] else ''}",
    )


def _failed_lines(report: BroadcastReport) -> list[str]:
    """Why each mode and cache state has no result (the launch's own failures are listed apart)."""
    stopped = "; ".join(report.failures)
    lines = []
    for s in report.summary:
        if s.median_seconds is None:
            bad = next(
                (
                    t
                    for t in report.trials
                    if t.mode == s.mode and t.cache == s.cache and t.status != "ok"
                ),
                None,
            )
            why = bad.reason if bad and bad.reason else "no trial with a verified cache state"
            if bad is not None and (why == stopped or why.startswith("not run:")):
                why = "the launch stopped early (see why)"
            lines.append(f"{s.mode} {s.cache}: {why}")
    return lines


def to_text(report: BroadcastReport) -> str:
    """One screen for the CLI: the summary table, then what failed or was left out."""
    target, ranks = _header_lines(report)
    lines = [f"target   {target}", f"ranks    {ranks}", ""]
    # 79 columns, each wider than its widest value: fits an 80-column terminal.
    header = (
        f"{'mode':<16}{'cache':<5}{'median':>7}{'rate':>10}{'x ind':>6}"
        f"{'amp':>6}{'stor':>6}{'held':>8}{'RSS':>8}{'first':>7}"
    )
    lines += [header, "-" * len(header)]
    for s in report.summary:
        if s.median_seconds is None:
            lines.append(f"{s.mode:<16}{s.cache:<5}failed (below)")
            continue
        lines.append(
            f"{s.mode:<16}{s.cache:<5}{_secs(s.median_seconds):>7}"
            f"{_rate(s.median_bytes_per_s):>10}{_x(s.speedup_vs_independent):>6}"
            f"{_x(s.read_amplification, 1):>6}{_x(s.storage_amplification, 1):>6}"
            f"{_size(s.rss_delta_bytes_total):>8}{_size(s.peak_rss_bytes_total):>8}"
            f"{_secs(s.first_run_seconds):>7}"
        )
    lines.append(
        textwrap.fill(
            "median: the slowest rank's time (the load ends when the last rank has every"
            " tensor); rate: model bytes / that time; x ind: speed-up over independent reads"
            " in the same cache state; amp: bytes the ranks read / model bytes; stor:"
            " bytes that reached storage (/proc/<pid>/io) / model bytes; held: RSS the ranks"
            " gained (the copies of the model in RAM); RSS: peak RSS summed over ranks;"
            " first: the warm-up round.",
            80,
        )
    )
    failed = _failed_lines(report)
    if failed:
        lines += ["", "failed:"] + [f"  {line}"[:240] for line in failed]
    if report.failures:
        early = any(t.status != "ok" and not t.ranks for t in report.trials)
        title = "the launch stopped early:" if early else "the ranks reported problems:"
        lines += ["", title] + [f"  {f}"[:240] for f in report.failures]
    if report.skipped:
        lines += ["", "skipped:"] + [f"  {k}: {v}" for k, v in report.skipped.items()]
    unverified = [t for t in report.trials if t.status == "ok" and not t.cache_verified]
    if unverified:
        lines.append(
            f"{len(unverified)} trial(s) kept out of the medians: cache state not verified"
            f" (first: #{unverified[0].id} {unverified[0].cache_note})"
        )
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def to_markdown(report: BroadcastReport) -> str:
    """The summary as a Markdown table (for an issue), with failures and notes."""
    lines = [
        "## Multi-rank loading",
        "",
        "target: {}; ranks: {}".format(*_header_lines(report)),
        "",
        "| mode | cache | trials | median (slowest rank) | GB/s | vs independent"
        " | read amplification | storage amplification | RSS gained (sum) | peak RSS (sum)"
        " | first run |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in report.summary:
        gbps = "-" if not s.median_bytes_per_s else f"{s.median_bytes_per_s / 1e9:.3g}"
        lines.append(
            f"| {s.mode} | {s.cache} | {s.trials} | {_secs(s.median_seconds)} | {gbps}"
            f" | {_x(s.speedup_vs_independent)} | {_x(s.read_amplification)}"
            f" | {_x(s.storage_amplification)} | {_size(s.rss_delta_bytes_total)}"
            f" | {_size(s.peak_rss_bytes_total)}"
            f" | {_secs(s.first_run_seconds)} |"
        )
    failed = _failed_lines(report) + report.failures
    if failed:
        lines += ["", "**Failed:**", ""] + [f"- {f}" for f in failed]
    if report.skipped:
        lines += ["", "**Skipped:**", ""] + [f"- {k}: {v}" for k, v in report.skipped.items()]
    if report.notes:
        lines += [""] + [f"_{n}_" for n in report.notes]
    return "\n".join(lines) + "\n"
