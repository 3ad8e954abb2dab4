"""What both trial runners share: the round plan, the reference read and its check, a
dead child's reason, process-group kills, the memory refusal, the report's target, the
trial-started event and the statistics of a group of trials.

``bench`` runs one worker per trial; ``broadcast`` one launch of N ranks for a whole
plan. Both plan interleaved rounds (every cache state, every strategy or mode, round
0 the warm-up), check every loaded tensor against :func:`reference_digests` with
:func:`digest_mismatch`, name a child that died with :func:`exit_reason`, refuse a
trial that would not fit in RAM with :func:`ram_refusal`, and summarise a (name, cache)
group with :func:`spread` (medians over the steady trials, the warm-up's first-run time,
the range) and :func:`speedups` (over the baseline in the same cache state).

May import: ``loadscope.model``, ``loadscope.loaders``, ``loadscope.probes``,
``loadscope.base``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar

from loadscope.base.units import format_bytes
from loadscope.loaders.forkserver import ForkedProcess
from loadscope.loaders.safetensors_format import read_header
from loadscope.model.targets import Target, WeightFile
from loadscope.probes.memory import describe_death

CacheMode = Literal["cold", "warm"]
TrialStatus = Literal["ok", "failed", "skipped"]

T = TypeVar("T")
K = TypeVar("K")
N = TypeVar("N")


@dataclass(frozen=True, slots=True)
class Started(Generic[T]):
    """An event for a live view: ``trial``, the ``index``-th of ``total``, starts now."""

    trial: T
    index: int
    total: int


def interleaved(
    rounds: Iterable[int],
    caches: Sequence[CacheMode],
    names: Sequence[N],
    make: Callable[[int, CacheMode, N], T | None],
) -> list[T]:
    """Round by round, every cache state, every name: ``make(round, cache, name)``
    (None leaves that one out). Interleaving spreads the machine's drift over every
    strategy instead of charging it to whichever ran last."""
    out: list[T] = []
    for r in rounds:
        for cache in caches:
            for name in names:
                if (item := make(r, cache, name)) is not None:
                    out.append(item)
    return out


#: The reference read's requests in flight and their size: many large reads, the way a
#: network disk answers fastest (one pread per tensor read 1 GiB at page-fault speed on
#: the emulated 5 ms disk, 13 s of a 60 s diagnosis; 16 x 4 MiB, ~1 s).
REFERENCE_THREADS = 16
REFERENCE_CHUNK = 4 << 20


def reference_digests(
    files: list[WeightFile],
    tensors: Mapping[Path, tuple[str, ...] | None],
    names_of: dict[Path, tuple[str, ...]] | None = None,
) -> dict[str, str]:
    """crc32 of each tensor's bytes read straight from the file at its header offsets
    (``tensors``: per file, the names to read; a file not in it: all of them), read in
    :data:`REFERENCE_CHUNK` pieces with :data:`REFERENCE_THREADS` in flight, each
    tensor's crc taken over its pieces in order. ``names_of``, when given, receives every
    file's tensor names (from the headers this read anyway)."""
    pieces: list[tuple[str, str, int, int]] = []  # (tensor, path, offset, length)
    crcs: dict[str, tuple[int, int]] = {}
    for wf in files:
        header = read_header(wf.path)
        if names_of is not None:
            names_of[wf.path] = tuple(t.name for t in header.tensors)
        wanted = tensors.get(wf.path)
        names = set(wanted) if wanted is not None else None
        for t in header.tensors:
            if names is not None and t.name not in names:
                continue
            start = header.data_offset + t.begin
            crcs[t.name] = (0, 0)
            for o in range(0, t.nbytes, REFERENCE_CHUNK):
                pieces.append((t.name, str(wf.path), start + o, min(REFERENCE_CHUNK, t.nbytes - o)))
    for i, data in _in_order([(path, off, n) for _, path, off, n in pieces]):
        name = pieces[i][0]
        crc, size = crcs[name]
        crcs[name] = (zlib.crc32(data, crc), size + len(data))
    return {name: f"{crc:08x}:{size}" for name, (crc, size) in crcs.items()}


def _in_order(reads: Sequence[tuple[str, int, int]]) -> Iterator[tuple[int, bytes]]:
    """``(index, bytes)`` of each ``(path, offset, length)`` pread, in order, with
    :data:`REFERENCE_THREADS` daemon threads reading at most twice that many ahead. Daemon
    threads: a read stuck on storage that stopped answering must not keep the process
    from exiting (a pool's threads are joined at exit), as the caller's timeout says.

    Each thread reads through descriptors of its own: many FUSE daemons serve one open
    file's reads one stream at a time (a bucket through rclone mount read 64 MiB in 24 s
    with 16 threads on one descriptor, 0.9 s with one each)."""
    slots: list[bytes | BaseException | None] = [None] * len(reads)
    ready = [threading.Event() for _ in reads]
    ahead = threading.Semaphore(2 * REFERENCE_THREADS)
    lock, stop = threading.Lock(), threading.Event()
    todo = iter(range(len(reads)))

    def work() -> None:
        # One descriptor at a time, of the file this thread reads now (the pieces come in
        # file order): a 1,000-shard model must not hold 16,000 open.
        held: list[tuple[str, int]] = []
        try:
            while True:
                ahead.acquire()
                with lock:
                    i = next(todo, None)
                if i is None or stop.is_set():
                    ahead.release()
                    return
                path, offset, length = reads[i]
                try:
                    if not held or held[0][0] != path:
                        if held:
                            os.close(held.pop()[1])
                        held.append((path, os.open(path, os.O_RDONLY | os.O_CLOEXEC)))
                    slots[i] = os.pread(held[0][1], length, offset)
                except BaseException as exc:  # noqa: BLE001  (raised in the reader, in order)
                    slots[i] = exc
                ready[i].set()
        finally:
            for _path, fd in held:
                os.close(fd)

    for _ in range(min(REFERENCE_THREADS, len(reads))):
        threading.Thread(target=work, daemon=True, name="reference-piece").start()
    try:
        for i in range(len(reads)):
            ready[i].wait()
            got, slots[i] = slots[i], None
            ahead.release()
            if isinstance(got, BaseException):
                raise got
            yield i, got or b""
    finally:
        stop.set()  # and wake the readers waiting for room, so that they end
        for _ in range(REFERENCE_THREADS):
            ahead.release()


def digest_mismatch(reference: Mapping[str, str], digests: Mapping[str, str]) -> str | None:
    """How a trial's tensor ``digests`` differ from the ``reference`` read (the first
    differing and the first missing tensor named), or None when every one matches.

    A name one side has and the other lacks is not a difference when its bytes are
    those of a tensor the other side has: a tied alias (``lm_head.weight`` sharing the
    embedding's storage), which pickles keep and ``save_pretrained``'s safetensors drop."""
    theirs, ours = set(reference.values()), set(digests.values())
    mismatched = sorted(
        n for n, d in digests.items() if reference.get(n, d if d in theirs else None) != d
    )
    missing = sorted(n for n in set(reference) - set(digests) if reference[n] not in ours)
    parts = []
    if mismatched:
        parts.append(
            f"{len(mismatched)} tensor(s) differ from the reference read (first: {mismatched[0]})"
        )
    if missing:
        parts.append(f"{len(missing)} tensor(s) missing (first: {missing[0]})")
    return "; ".join(parts) or None


def kill_group(proc: subprocess.Popen[str] | ForkedProcess) -> None:
    """SIGKILL the child's process group (it and all it spawned), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)


def exit_reason(
    who: str,
    returncode: int,
    stderr_tail: Sequence[str],
    oom_before: int | None = None,
    *,
    killed: str = "",
    clean_exit: str = "exited with code 0 without a result",
    unclean_exit: str = "without a result",
    during: str = "",
) -> str:
    """Why ``who`` (``worker``, ``rank 1``) ended without its result, with the last line
    it wrote to stderr: the signal after ``killed`` ("was "; an OOM kill told apart by
    the kernel's counters), else its exit code (``clean_exit`` for 0, else "exited with
    code N" and ``unclean_exit``), then ``during`` (what it was doing: "during trial #6")."""
    if returncode < 0:
        reason = f"{who} {killed}" + describe_death(signal.Signals(-returncode).name, oom_before)
    elif returncode == 0:
        reason = f"{who} {clean_exit}"
    else:
        reason = f"{who} exited with code {returncode} {unclean_exit}"
    if during:
        reason += f" {during}"
    last = next((line for line in reversed(stderr_tail) if line.strip()), None)
    return f"{reason}: {last.strip()[:200]}" if last else reason


def ram_refusal(need: int, how: str, room: int, room_is: str) -> str | None:
    """Why a trial holding ``need`` bytes (counted as ``how``) must not run in ``room``
    (what is ``room_is``: "free", "available"), with the numbers; None when it fits."""
    if need <= room:
        return None
    return (
        f"would hold ~{format_bytes(need)} in RAM ({how}) but only {format_bytes(room)}"
        f" is {room_is} within RAM and the cgroup limit ({format_bytes(need - room)} missing)"
    )


def target_record(target: Target) -> dict[str, Any]:
    """The report's ``target``: what was loaded, as both runners' JSON gives it; for a
    torch model with the same model as safetensors beside it, those files' names; and
    why the other format's files in the folder cannot be used, if so."""
    record: dict[str, Any] = {
        "spec": target.report_spec,
        "kind": target.kind,
        "root": target.report_root,
        "files": len(target.files),
        "total_bytes": target.total_bytes,
        "formats": sorted(target.formats),
    }
    if not target.on_files:  # another kind of storage: which (files keep the old shape)
        record["source_kind"] = target.source
        record["source_title"] = target.detail
    if target.formats == {"torch"} and target.on_files:
        # What the advice's conversion code names: the user's own files (and index).
        record["torch_files"] = [os.path.relpath(f.path, target.root) for f in target.files]
        if target.index is not None:
            record["torch_index"] = os.path.relpath(target.index, target.root)
    if target.formats == {"torch"} and target.alternates:
        record["safetensors_beside"] = [
            os.path.relpath(f.path, target.root) for f in target.alternates
        ]
        if target.alternates_index is not None:
            record["safetensors_index"] = os.path.relpath(target.alternates_index, target.root)
    if target.alternates_problem:
        record["alternates_problem"] = target.alternates_problem
    return record


class Ended(Protocol):
    """A trial record, as far as :func:`first_not_ok` reads it."""

    @property
    def status(self) -> str: ...


E = TypeVar("E", bound=Ended)


def first_not_ok(
    group: Iterable[E], key: Callable[[E], tuple[str, str]], at: tuple[str, str]
) -> E | None:
    """The first trial of ``group`` at ``at`` (name, cache) that did not end ok: the one
    whose reason a table gives for a row without a result."""
    return next((t for t in group if key(t) == at and t.status != "ok"), None)


def median(values: Iterable[float | int | None]) -> float | None:
    """The median of the known values, None when there is none."""
    known = [float(v) for v in values if v is not None]
    return statistics.median(known) if known else None


@dataclass(frozen=True, slots=True)
class Spread:
    """One (name, cache) group's times: steady trials counted, their median and range,
    and the warm-up round's time (the first-run cost)."""

    trials: int
    median_s: float | None
    min_s: float | None
    max_s: float | None
    first_run_s: float | None


def spread(
    group: Sequence[T],
    seconds: Callable[[T], float | None],
    steady: Callable[[T], bool],
    warmup: Callable[[T], bool],
) -> Spread:
    """The :class:`Spread` of ``group``: ``steady`` picks the trials the medians are of
    (ok, verified cache, not the warm-up), ``warmup`` the first-run one."""
    kept = [t for t in group if steady(t) and seconds(t)]
    secs = [s for t in kept if (s := seconds(t)) is not None]
    first = next((seconds(t) for t in group if warmup(t)), None)
    return Spread(
        len(kept),
        statistics.median(secs) if secs else None,
        min(secs) if secs else None,
        max(secs) if secs else None,
        first,
    )


def speedups(
    times: Mapping[tuple[K, str], float | None], baseline: K
) -> dict[tuple[K, str], float]:
    """Per (name, cache): the baseline's time in the same cache state over its own."""
    out: dict[tuple[K, str], float] = {}
    for (name, cache), mine in times.items():
        base = times.get((baseline, cache))
        if base and mine:
            out[(name, cache)] = base / mine
    return out
