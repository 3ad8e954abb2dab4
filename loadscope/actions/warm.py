"""``loadscope warm``: put a model in the page cache (or take it out), and prove it.

vmtouch ``-t`` for models: every weight file is read in parallel large blocks
(``--threads``, ``--block``) so the next load is a memory copy, with the
residency of each file measured before and after. It refuses, saying how much
is missing, when the part of the model not yet cached does not fit in available
memory or the cgroup limit (the kernel would only evict it again, or evict
something else). ``--lock`` then maps the files and ``mlock``\\s them (root or
``ulimit -l``) until interrupted, so memory pressure cannot evict them.
``--evict`` is the inverse, for testing cold loads: ``posix_fadvise(DONTNEED)``
per file, verified with ``mincore``.

Files are opened read-only and never written: this works on a read-only
model, and as a user who may only read it (residency then reads "unknown").

May import: ``loadscope.model``, ``loadscope.loaders``, ``loadscope.probes``,
``loadscope.base``, and :mod:`loadscope.actions.throughput`.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loadscope.actions.throughput import rate, timing_fields
from loadscope.base.errors import ExitCode, LoadscopeError, NotEnoughMemory, ReadFailed
from loadscope.base.safeio import STALL_TIMEOUT_S, StorageStalled, note_stuck, open_regular
from loadscope.base.units import format_bytes
from loadscope.loaders.pagefill import WARM_BLOCK_BYTES, WARM_THREADS, PageFill, whole_files
from loadscope.model.targets import Target
from loadscope.probes.memory import memory_headroom
from loadscope.probes.pagecache import (
    COLD_FRACTION,
    LIBC,
    MAP_FAILED,
    NOT_KEPT,
    ColdCache,
    keeps_pages,
    residency,
)

DEFAULT_BLOCK = WARM_BLOCK_BYTES
DEFAULT_THREADS = WARM_THREADS
#: Kept free beyond the model, so warming does not push the machine into reclaim.
MEMORY_MARGIN = 256 << 20
#: Re-reads of a file found not fully resident right after warming.
TOP_UP_PASSES = 2

Progress = Callable[[int, int, float], None]  # bytes done, bytes total, seconds


class WarmCancelled(LoadscopeError):
    """Interrupted: what was read stays cached; nothing else changed."""

    exit_code = ExitCode.INTERRUPTED


@dataclass(slots=True)
class FileResidency:
    path: str
    size_bytes: int
    before: float | None  # fraction resident, None when the kernel will not say
    after: float | None = None


@dataclass(slots=True)
class WarmReport:
    mode: str  # "warm" | "evict"
    files: list[FileResidency]
    #: Every byte read, re-reads included: the model's bytes once, plus ``top_up_bytes``.
    bytes_read: int = 0
    seconds: float = 0.0
    #: Of ``bytes_read``, the re-reads of files found not fully resident right after.
    top_up_bytes: int = 0
    #: --lock: bytes locked, or why not.
    locked_bytes: int | None = None
    lock_note: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def bytes_per_s(self) -> float | None:
        return rate(self.bytes_read, self.seconds)

    @property
    def model_bytes(self) -> int:
        """The model's size: what was warmed (the bytes read may be more, see top-ups)."""
        return sum(f.size_bytes for f in self.files)

    def to_dict(self) -> dict[str, object]:
        return {
            "schema_version": 1,
            "mode": self.mode,
            "model_bytes": self.model_bytes,
            **timing_fields("bytes_read", self.bytes_read, self.seconds),
            "top_up_bytes": self.top_up_bytes,
            "locked_bytes": self.locked_bytes,
            "lock_note": self.lock_note,
            "files": [
                {"path": f.path, "size_bytes": f.size_bytes, "before": f.before, "after": f.after}
                for f in self.files
            ],
            "notes": self.notes,
        }


def _fraction(path: str) -> float | None:
    return residency(path).fraction


def _residencies(target: Target) -> list[FileResidency]:
    return [FileResidency(str(f.path), f.size_bytes, _fraction(str(f.path))) for f in target.files]


def check_fits(files: list[FileResidency], available: int) -> None:
    """Refuse, with the numbers, when the uncached part of the model does not fit."""
    missing_from_cache = sum(int(f.size_bytes * (1 - (f.before or 0.0))) for f in files)
    need = missing_from_cache + MEMORY_MARGIN
    if need > available:
        raise NotEnoughMemory(
            f"warming needs {format_bytes(missing_from_cache)} more in the page cache"
            f" (+{format_bytes(MEMORY_MARGIN)} margin) but only {format_bytes(available)} is"
            f" available (RAM or the cgroup limit): {format_bytes(need - available)} missing;"
            " the kernel would evict it again"
        )


def check_keeps_pages(files: list[FileResidency]) -> None:
    """After a warm that left nothing resident: fail, saying why, where the mount keeps
    no pages to the next open (FUSE ``direct_io``, or a daemon that drops them at each
    open), rather than blame memory pressure (a bucket through rclone mount: 384 MiB read
    in 25 s, 0% resident, "memory is under pressure"). Asked after the reads, never
    before them: a read of a stalled mount left pages locked that a later read in the
    calling thread waited on, unkillable."""
    largest = max(files, key=lambda f: f.size_bytes, default=None)
    try:
        kept = keeps_pages(largest.path) if largest is not None else None
    except (OSError, StorageStalled):
        return  # the warm's own reads meet it, and say so in their words
    if largest is None or kept is not False:
        return
    raise LoadscopeError(
        f"{largest.path}: read, but nothing stayed: this mount keeps no pages in the page"
        f" cache: {NOT_KEPT}; copy the model to a local disk instead (loadscope copy SRC DEST)"
    )


def warm(
    target: Target,
    *,
    threads: int = DEFAULT_THREADS,
    block_bytes: int = DEFAULT_BLOCK,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    available: Callable[[], int] = memory_headroom,
    stall_timeout_s: float = STALL_TIMEOUT_S,
) -> WarmReport:
    """Read every weight file in parallel blocks; residency before and after."""
    if threads < 1 or block_bytes < 4096:
        raise LoadscopeError("--threads must be >= 1 and --block >= 4KiB")
    files = _residencies(target)
    check_fits(files, available())
    report = WarmReport("warm", files)
    fill = PageFill(
        whole_files([(f.path, f.size_bytes) for f in files]),
        threads=threads,
        block_bytes=block_bytes,
        stop=cancel,
    )
    start = time.monotonic()
    _fill(fill, start, progress, stall_timeout_s)
    report.seconds = time.monotonic() - start
    report.bytes_read = fill.done_bytes
    if fill.errors:
        raise fill.errors[0]
    if cancel is not None and cancel.is_set():
        raise WarmCancelled(
            f"stopped after {format_bytes(fill.done_bytes)} of {format_bytes(fill.total_bytes)}"
        )
    for f in files:
        f.after = _fraction(f.path)
    if all(f.after is not None and f.after <= COLD_FRACTION for f in files):
        check_keeps_pages(files)  # nothing stayed: the mount's doing, not memory pressure
    for f in files:
        report.top_up_bytes += _top_up(f, block_bytes)
    report.bytes_read += report.top_up_bytes
    report.seconds = time.monotonic() - start
    report.notes += _residency_notes(files)
    return report


def _fill(fill: PageFill, start: float, progress: Progress | None, stall_timeout_s: float) -> None:
    """Run ``fill`` to its end, its progress said; :class:`ReadFailed` when no byte was read
    for ``stall_timeout_s`` (its readers are then left to the kernel, their fds open)."""
    total = fill.total_bytes
    stalled: str | None = None
    try:
        fill.start()
        last_done, last_moved = 0, time.monotonic()
        while fill.alive():
            for t in fill.pool:
                t.join(timeout=0.1)
            now = time.monotonic()
            if fill.done_bytes != last_done:
                last_done, last_moved = fill.done_bytes, now
            elif now - last_moved > stall_timeout_s:
                stalled, where = _stalled(fill, stall_timeout_s)
                note_stuck(where, fill.pool)
                fill.stop.set()
                break
            if progress is not None:
                progress(fill.done_bytes, total, now - start)
    except BaseException:
        fill.stop.set()  # Ctrl-C: no reader may touch the fds closed below
        raise
    finally:
        if stalled is None:
            fill.join()
        # else: readers are stuck in the kernel; their fds stay open until they return
    if stalled is not None:
        raise ReadFailed(stalled)


def _stalled(fill: PageFill, stall_timeout_s: float) -> tuple[str, str]:
    """What a person is told when no byte moved, and where the readers wait."""
    waiting = sorted(set(fill.in_flight.values()))
    where = ", ".join(f"{p} at offset {o}" for p, o in waiting[:3]) or "?"
    said = (
        f"no byte read for {stall_timeout_s:g} s (waiting on {where}):"
        " the storage stopped answering"
    )
    return said, where


def _top_up(f: FileResidency, block_bytes: int) -> int:
    """``f``'s residency after warming (``f.after``, read right after it), topped up, and
    the bytes read to top it up.

    Memory pressure (or a proactive reclaimer such as DAMON) may have taken pages back
    while the rest was read: a file not fully resident is read again, twice at most.
    """
    read = 0
    for _ in range(TOP_UP_PASSES):
        if f.after is None or f.after >= 1.0:
            break
        read += _read_file(f.path, block_bytes)
        f.after = _fraction(f.path)
    return read


def _residency_notes(files: list[FileResidency]) -> list[str]:
    """What the residency after warming tells a person: pressure, or no way to see it."""
    notes = []
    if any(f.after is not None and f.after < 1.0 for f in files):
        notes.append(
            "some pages were evicted again right after being read: memory is under pressure"
            " here (or a proactive reclaimer runs); --lock keeps them resident"
        )
    if any(f.after is None for f in files):
        notes.append(
            "residency unknown for files this user does not own (mincore reports only the"
            " caller's own mappings since Linux 5.2): run as the owner or root to see it"
        )
    return notes


def _read_file(path: str, block_bytes: int) -> int:
    fd = open_regular(path)
    try:
        buf = memoryview(bytearray(block_bytes))
        total = 0
        while n := os.readv(fd, [buf]):
            total += n
        return total
    finally:
        os.close(fd)


def evict(target: Target, *, allow_drop_caches: bool = False) -> WarmReport:
    """Drop every weight file from this machine's page cache and verify it."""
    files = _residencies(target)
    report = WarmReport("evict", files)
    cold = ColdCache(allow_drop_caches=allow_drop_caches)
    start = time.monotonic()
    for f in files:
        result = cold.evict(f.path)
        f.after = result.after
        if not result.verified:
            # Memory-backed storage (tmpfs): said once for the model, not once per file.
            said = (
                result.note
                if result.memory_backed
                else f"{f.path}: {result.note or 'eviction not verified'}"
            )
            if said not in report.notes:
                report.notes.append(said)
    report.seconds = time.monotonic() - start
    return report


def still_resident(report: WarmReport) -> list[FileResidency]:
    """The files an eviction left in the page cache (known to be above the cold threshold);
    files whose residency this user cannot see are not counted."""
    return [f for f in report.files if f.after is not None and f.after > COLD_FRACTION]


# -- --lock ---------------------------------------------------------------------------------------

_libc = LIBC
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = MAP_FAILED


class Locked:
    """The files mapped and mlocked; ``release()`` (or the process ending) unlocks them."""

    def __init__(self, paths: list[tuple[str, int]]) -> None:
        self.maps: list[tuple[int, int]] = []
        self.bytes = 0
        self.note: str | None = None
        for path, size in paths:
            if size == 0:
                continue
            fd = open_regular(path)
            try:
                addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            finally:
                os.close(fd)
            if addr in (None, _MAP_FAILED):
                self.note = f"{path}: mmap failed: {os.strerror(ctypes.get_errno())}"
                break
            self.maps.append((addr, size))
            if _libc.mlock(ctypes.c_void_p(addr), size) != 0:
                err = ctypes.get_errno()
                self.note = (
                    f"mlock refused ({os.strerror(err)}) after {format_bytes(self.bytes)}:"
                    " run as root or raise the locked-memory limit (ulimit -l, or"
                    " LimitMEMLOCK= / --ulimit memlock=-1 in a container)"
                )
                break
            self.bytes += size

    def release(self) -> None:
        for addr, size in self.maps:
            _libc.munmap(ctypes.c_void_p(addr), size)  # unlocks too
        self.maps.clear()
