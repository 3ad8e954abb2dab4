"""One ``bench`` trial in an isolated worker: the cache put in its state, the worker watched.

Owns what one trial does: the cache evicted or pre-read and *verified* (by
``loaders.cachestate``, as rank 0 of ``bench --ranks`` does), a fresh worker (forked
from the fork server unless told otherwise) given the trial's spec, its JSON-line
events followed (by :mod:`~loadscope.engine.supervise`'s loop) until it is done, fails,
times out or the run is cancelled (its process group killed), the parent's own view of
it (resident memory, I/O counters from /proc), and its numbers and tensor digests
checked against the reference read (:func:`run_trial`). Also the worker that only
describes the strategies, and the reference read given a time limit.

May import: ``loadscope.engine.bench_records``, ``loadscope.engine.children``,
``loadscope.engine.supervise``, ``loadscope.engine.trials``, ``loadscope.loaders``,
``loadscope.model``, ``loadscope.probes``, ``loadscope.base``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loadscope.base.processes import popen
from loadscope.engine.bench_records import (
    BenchCancelled,
    BenchError,
    BenchOptions,
    Listener,
    Trial,
    TrialProgress,
    WorkerStartFailed,
)
from loadscope.engine.children import Child, Pipes, forked, python_module
from loadscope.engine.supervise import Events, supervise
from loadscope.engine.trials import digest_mismatch, exit_reason, kill_group, reference_digests
from loadscope.loaders.cachestate import prepare_cache
from loadscope.loaders.events import Done, Failed, Progress, ProtocolError, Start, decode
from loadscope.model.targets import WeightFile
from loadscope.probes.memory import oom_kills
from loadscope.probes.pagecache import ColdCache
from loadscope.probes.sources import Source

_SERIES_POINTS = 50
#: A trial running when the deadline passes may finish within this much more.
DEADLINE_GRACE_S = 10.0
#: A trial stopped at the run's deadline is counted as cut by the budget (skipped) when its
#: bytes grew within this many seconds; a quieter one is a timeout (failed).
BUDGET_CUT_QUIET_S = 5.0
_WORKER_MODULE = "loadscope.loaders.worker"


def describe_strategies() -> dict[str, dict[str, Any]]:
    """Every strategy's declaration and why it is unavailable, asked of a worker process.

    The parent never imports torch or the peers itself: a worker answers. One whose fork
    server went away meanwhile (the server's children die with it) is asked once more, of
    a fresh server (``shared_server`` starts one).
    """
    for attempt in (1, 2):
        worker = _Worker(None)
        try:
            code = worker.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            kill_group(worker.proc)
            raise BenchError("cannot start a loader worker: no answer in 120 s") from None
        worker.pipes.join()
        if code == 0 and worker.lines:
            result: dict[str, dict[str, Any]] = json.loads(worker.lines[-1])
            return result
        gone = getattr(worker.proc, "server_gone", None)
        if not (attempt == 1 and gone):
            break
    tail = list(worker.pipes.stderr)[-1:] or [gone or f"exit code {code}"]
    raise BenchError(f"cannot start a loader worker: {tail[0]}")


def bounded_reference(
    files: list[WeightFile],
    tensors: Mapping[Path, tuple[str, ...] | None],
    timeout_s: float,
    names_of: dict[Path, tuple[str, ...]] | None = None,
) -> dict[str, str]:
    """The reference read, given at most ``timeout_s``: storage that stops answering makes
    a clear error, not a hang (the stuck read stays in its thread until the storage
    answers or goes away)."""
    out: list[dict[str, str]] = []
    errors: list[BaseException] = []

    def read() -> None:
        try:
            out.append(reference_digests(files, tensors, names_of))
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


def bounded_references(
    files: list[WeightFile],
    subsets: Mapping[int, Mapping[Path, tuple[str, ...] | None]],
    every: bool,
    timeout_s: float,
) -> dict[int, dict[str, str]]:
    """The reference of each of ``subsets`` (and of every tensor, key 0, when ``every``)
    from one bounded read of their union: the samples' sets overlap (the fit's smaller
    sets lie inside the first), and each was read again before."""
    union: dict[Path, tuple[str, ...] | None] = {}
    if not every:
        for subset in subsets.values():
            for path, names in subset.items():
                had = union.get(path, ())
                union[path] = None if names is None or had is None else (*had, *names)
    inside = files if every else [f for f in files if f.path in union]
    names_of: dict[Path, tuple[str, ...]] = {}
    read = bounded_reference(inside, union, timeout_s, names_of) if inside else {}
    out = {0: read} if every else {}
    for key, subset in subsets.items():
        kept: set[str] = set()
        for path, some in subset.items():
            kept.update(some if some is not None else names_of.get(path, ()))
        out[key] = {n: d for n, d in read.items() if n in kept}
    return out


def _preload_for(strategy: str, files: list[WeightFile]) -> list[str]:
    """The modules ``strategy``'s worker imports before its clock, for the fork server to
    import once (``transformers-model``: the modeling module of the model's config.json,
    read here as JSON: the parent never imports transformers)."""
    from loadscope.loaders.strategies import STRATEGIES
    from loadscope.loaders.strategies.transformers_load import modeling_module

    wanted = getattr(STRATEGIES.get(strategy), "preload", ())
    out = [m for m in wanted if m != "transformers-model"]
    # (A config.json with no model_type raised KeyError here: a traceback.)
    module = modeling_module(str(files[0].path.parent)) if files else None
    if "transformers-model" in wanted and module is not None:
        out.append(module)
    return out


_Event = Start | Progress | Done | Failed | ProtocolError


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
        proc: Child | None = None
        if argv is None:
            proc = forked(args, module=_WORKER_MODULE, preload=preload)
        if proc is None:
            command = list(argv or python_module(_WORKER_MODULE))
            try:
                proc = popen([*command, *args])
            except OSError as exc:
                raise WorkerStartFailed(command[0], exc) from None
        self.proc: Child = proc
        #: Its events as child 0 of :func:`supervise` (None once stdout closed).
        self.events: Events[_Event] = Events()
        self.lines: list[str] = []  # raw stdout (for --describe)
        on_line = self.lines.append if spec is None else self._decode
        self.pipes = Pipes(proc, on_line, lambda: self.events.put(0, None))

    def _decode(self, line: str) -> None:
        try:
            self.events.put(0, decode(line))
        except ProtocolError as exc:
            self.events.put(0, exc)


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
    source: Source | None = None,
    address: Callable[[WeightFile], str] = lambda wf: str(wf.path),
) -> tuple[Trial, dict[str, str]]:
    """Run one planned trial; returns it finished and its tensors' digests.
    ``scratch_dir``: where the worker's libraries may write caches (removed by the caller).
    ``source``: the model's source when it is not files (``probes/sources.py``): no page
    cache here to set, its trials cold as the source says; ``address`` where the worker
    reads each file (its object's address there)."""
    began = time.monotonic()
    if source is None:
        verified, resident, note = prepare_cache(
            [(str(wf.path), wf.size_bytes) for wf in files], trial.cache, cold
        )
    else:
        verified, resident, note = True, None, source.cold_means
    detail = dict(trial.detail)
    if note:
        detail["cache_note"] = note
    spec = _spec(trial, files, sample, options, block_stat, scratch_dir, total_bytes)
    chosen = [f for f in files if sample is None or f.path in sample]
    for entry, wf in zip(spec["files"], chosen, strict=True):
        entry["path"] = address(wf)
    if source is not None:
        spec["source"] = source.name  # no files here: no residency to read
    oom_before = oom_kills()
    preload = _preload_for(trial.strategy, files) if source is None else []
    worker = _Worker(spec, options.worker_argv, preload)
    watched = _watch(worker, trial, options, listener, total_bytes, oom_before)
    if watched.protocol:
        detail["protocol_errors"] = watched.protocol[:5]
    detail["rss_series"] = _downsample(watched.rss)
    series = _downsample(watched.points)
    if isinstance(watched.result, Failed):
        failed = replace(
            trial,
            # Stopped by the run's budget, not by the storage: not a failure of the load.
            status="skipped" if watched.cut_by_budget else "failed",
            reason=watched.result.reason,
            residency_before=resident,
            cache_verified=verified,
            series=series,
            detail=detail,
            wall_s=time.monotonic() - began,
        )
        return failed, {}
    assert isinstance(watched.result, Done)
    done = watched.result
    finished = _finished(trial, done, reference, detail, (verified, resident), series, began)
    return finished, done.digests


def _spec(
    trial: Trial,
    files: list[WeightFile],
    sample: dict[Path, tuple[str, ...]] | None,
    options: BenchOptions,
    block_stat: str | None,
    scratch_dir: str | None,
    total_bytes: int,
) -> dict[str, Any]:
    """What the worker is told to load, and how (its one argument, as JSON)."""
    return {
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
        # A CPU strategy on a GPU run (the doctor's routes beside the GPU ones) loads to
        # the CPU; every GPU strategy to the run's device.
        "device": options.device if _loads_to_gpu(trial.strategy) else "cpu",
        "block_stat": block_stat,
        "scratch_dir": scratch_dir,
        "total_bytes": total_bytes,
        "total_tensors": 0,
    }


def _loads_to_gpu(strategy: str) -> bool:
    from loadscope.loaders.strategies import STRATEGIES

    known = STRATEGIES.get(strategy)
    return bool(known is not None and known.requires.gpu)


@dataclass(slots=True)
class _Watched:
    """What the parent saw of one worker: how it ended, and what it said on the way."""

    result: Done | Failed | None = None
    started: Start | None = None
    #: (seconds since the worker's start, bytes done), as the worker reported them.
    points: list[tuple[float, int]] = field(default_factory=list)
    #: (seconds since the spawn, resident bytes), as the parent read them.
    rss: list[tuple[float, int]] = field(default_factory=list)
    protocol: list[str] = field(default_factory=list)
    #: Stopped at the run's deadline (the time budget), before its own trial timeout.
    cut_by_budget: bool = False


def _timeout_s(options: BenchOptions) -> float:
    """The trial's time limit: its own, cut to the run's deadline (with a short grace)."""
    if options.deadline is None:
        return options.trial_timeout_s
    return min(options.trial_timeout_s, max(DEADLINE_GRACE_S, options.deadline - time.monotonic()))


def _watch(
    worker: _Worker,
    trial: Trial,
    options: BenchOptions,
    listener: Listener,
    total_bytes: int,
    oom_before: int | None,
) -> _Watched:
    """Follow the worker until it is done or failed, kill it on timeout or cancel; it is
    reaped (or its group killed) whatever happens."""
    timeout_s = _timeout_s(options)
    deadline = time.monotonic() + timeout_s
    seen = _Watched()
    t_spawn = time.monotonic()

    def sample_rss() -> None:
        # The parent's own view of the worker: its resident memory over time.
        if (kib := _rss_kib(worker.proc.pid)) is not None:
            seen.rss.append((round(time.monotonic() - t_spawn, 3), kib * 1024))

    def exited(_child: int, code: int) -> None:
        # Its pipes read to their end first: its last stderr line is the reason's (under
        # load the reader thread was still behind, and the reason lost that line).
        worker.pipes.join(1)
        reason = exit_reason("worker", code, worker.pipes.stderr, oom_before)
        seen.result = Failed(time.monotonic(), reason)

    def timed_out() -> str | None:
        if time.monotonic() < deadline:
            return None
        still_loading = time.monotonic() - progressed[1] < BUDGET_CUT_QUIET_S
        if timeout_s < options.trial_timeout_s and still_loading:
            # Cut by the run's budget while its bytes were still coming: not a failure of
            # the storage. A worker that has gone quiet is a timeout, whatever ended it.
            seen.cut_by_budget = True
            return f"the time budget was spent: stopped after {timeout_s:.3g} s"
        return f"timed out after {timeout_s:.3g} s; worker killed"

    progressed = [0, t_spawn]  # bytes done, when they last grew

    def take(_child: int, event: _Event) -> None:
        _take(event, worker, seen, trial, listener, total_bytes)
        if seen.points and seen.points[-1][1] > progressed[0]:
            progressed[:] = [seen.points[-1][1], time.monotonic()]

    stopped = supervise(
        [worker.pipes],
        worker.events,
        take=take,
        exited=exited,
        done=lambda: seen.result is not None,
        limit=timed_out,
        cancel=options.cancel,
        cancelled=lambda: BenchCancelled("stopped: the worker's process group was killed"),
        exit_wait_s=30,
        reap_wait_s=30,
        on_tick=sample_rss,
    )
    if stopped is not None:
        seen.result = Failed(time.monotonic(), stopped)
    return seen


def _take(
    event: _Event,
    worker: _Worker,
    seen: _Watched,
    trial: Trial,
    listener: Listener,
    total_bytes: int,
) -> None:
    """One event from the worker's stdout, into ``seen`` (progress passed to ``listener``)."""
    if isinstance(event, ProtocolError):
        seen.protocol.append(str(event))
    elif isinstance(event, Start):
        seen.started = event
    elif isinstance(event, Progress):
        t0 = seen.started.t if seen.started else event.t
        seen.points.append((round(event.t - t0, 4), event.bytes_done))
        pid = worker.proc.pid
        listener(
            TrialProgress(
                trial, event.t - t0, event.bytes_done, total_bytes, pid, *_io_counters(pid)
            )
        )
    else:
        seen.result = event


def _finished(
    trial: Trial,
    done: Done,
    reference: Mapping[str, str],
    detail: dict[str, Any],
    cache: tuple[bool, float | None],
    series: list[tuple[float, int]],
    began: float,
) -> Trial:
    """``trial`` finished: its cache state as verified (verified, residency), the worker's
    numbers, its detail (``io`` last), its tensors checked against ``reference`` (none:
    not checked) and its wall time since ``began``."""
    io = done.detail.get("io", {})
    detail.update({k: v for k, v in done.detail.items() if k != "io"})
    detail["io"] = io
    syscr, rchar = io.get("syscr"), io.get("rchar")
    wrong = digest_mismatch(reference, done.digests) if reference else None
    return replace(
        trial,
        status="failed" if wrong is not None else trial.status,
        reason="wrong tensors: " + wrong if wrong is not None else trial.reason,
        seconds=done.seconds,
        bytes=done.bytes,
        bytes_per_s=done.bytes / done.seconds if done.seconds > 0 else None,
        first_tensor_s=done.first_tensor_s,
        tensors=done.tensors,
        major_faults=io.get("majflt"),
        minor_faults=io.get("minflt"),
        read_syscalls=syscr,
        read_bytes=rchar,
        avg_read_bytes=rchar / syscr if syscr and rchar is not None else trial.avg_read_bytes,
        block_requests=io.get("block_read_ios"),
        avg_request_bytes=io.get("avg_request_bytes"),
        residency_before=cache[1],
        cache_verified=cache[0],
        verified=wrong is None if reference else trial.verified,
        peak_rss_bytes=done.peak_rss_bytes,
        # In a sampled run: a trial on a sample (not the whole model) that has a time.
        sampled=trial.scope in ("sampled", "shards"),
        series=series,
        detail=detail,
        wall_s=time.monotonic() - began,
    )
