"""One file copied block by block (``loadscope copy``'s engine, :mod:`localcopy`): a pool
of threads reads the source's blocks (O_DIRECT where given, buffered ``pread`` else),
writes them to the partial file, keeps each block's crc32, and gives up with one line
when no byte moved for the stall timeout; the copy read back and compared
(:func:`verify_back`).

May import: ``loadscope.base``, :mod:`loadscope.actions.copydest` (its error).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loadscope.actions.copydest import CopyError
from loadscope.base.errors import ReadFailed
from loadscope.base.memory import fresh_memory
from loadscope.base.safeio import note_stuck, open_regular, pread_exactly

#: O_DIRECT offsets, lengths and buffers are multiples of the page size.
ALIGN = mmap.PAGESIZE


class Busy:
    """The wall time during which at least one thread was inside (``with busy:``): the
    time a resource (the source's reads, DEST's writes) was at work, however many threads
    overlapped on it."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._inside = 0
        self._since = 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            if self._inside == 0:
                self._since = time.monotonic()
            self._inside += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                self.seconds += time.monotonic() - self._since


@dataclass(slots=True)
class CopyRun:
    """What every file of one copy shares: how the source is read, the stop event, and
    the time the source's reads, DEST's writes and the read-backs took."""

    threads: int
    block_bytes: int
    stop: threading.Event
    stall_timeout_s: float
    reads: Busy = field(default_factory=Busy)
    writes: Busy = field(default_factory=Busy)
    verify_seconds: float = 0.0
    source_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count_read(self, n: int) -> None:
        with self.lock:
            self.source_bytes += n


class BlockCopy:
    """One file's blocks read from the source by a pool of threads (``run.threads``
    requests of ``run.block_bytes`` in flight, O_DIRECT through ``direct`` when given) and
    written to ``out`` (None: only read, to compare), each block's crc32 kept (offset ->
    (crc32, length)) to check the copy read back."""

    def __init__(
        self,
        src: int,
        direct: int | None,
        out: int | None,
        source: str,
        partial: Path | None,
        size: int,
        run: CopyRun,
        tick: Callable[[int], None],
    ) -> None:
        self.src, self.direct, self.out = src, direct, out
        self.source, self.partial, self.size = source, partial, size
        self.block_bytes, self.stop, self.tick, self.copy_run = run.block_bytes, run.stop, tick, run
        self.crcs: dict[int, tuple[int, int]] = {}
        self.errors: list[BaseException] = []
        self.abort = threading.Event()  # set when the caller is interrupted (Ctrl-C)
        #: Set when the copiers stopped answering: their fds must stay open (see _copy_one).
        self.stuck = False
        #: Set when an O_DIRECT read was refused (EINVAL) though the open was allowed.
        self.direct_refused = False
        self._offsets = iter(range(0, size, run.block_bytes))
        self._lock = threading.Lock()
        self._in_flight: dict[int, int] = {}  # copier -> the offset it reads
        self._moved = time.monotonic()

    def run(self) -> None:
        """Copy every block (or stop early with ``stop``); the first copier's error, or
        :class:`ReadFailed` when no byte moved for the stall timeout, is raised."""
        threads, stall_timeout_s = self.copy_run.threads, self.copy_run.stall_timeout_s
        blocks = -(-self.size // self.block_bytes)
        pool = [
            threading.Thread(target=self._worker, daemon=True)
            for _ in range(max(1, min(threads, blocks)))
        ]
        try:
            for t in pool:
                t.start()
            while any(t.is_alive() for t in pool):
                for t in pool:
                    t.join(timeout=0.1)
                if time.monotonic() - self._moved > stall_timeout_s:
                    self._give_up(pool, stall_timeout_s)
        except BaseException:
            self.abort.set()  # no thread may write after the caller closes the fds
            if not self.stuck:
                for t in pool:
                    if t.ident is not None:  # a signal may land between two start() calls
                        t.join()
            raise
        if self.errors:
            raise self.errors[0]

    def said(self, how: str) -> str:
        """How the source was read, ``how`` unless its O_DIRECT reads were refused."""
        if self.direct_refused:
            return "buffered pread (the filesystem refuses O_DIRECT reads: EINVAL)"
        return how

    def _give_up(self, pool: list[threading.Thread], stall_timeout_s: float) -> None:
        self.abort.set()
        self.stuck = True  # copiers blocked in the kernel keep their fds
        where = ", ".join(str(o) for o in sorted(set(self._in_flight.values()))[:3])
        note_stuck(f"{self.source} at offset {where}", pool)
        raise ReadFailed(
            f"no byte copied for {stall_timeout_s:g} s (reading at offset {where}):"
            " the storage stopped answering; nothing renamed",
            path=self.source,
        )

    def _worker(self) -> None:
        # One page-aligned buffer per copier, reused for each of its blocks (O_DIRECT
        # reads land in it directly).
        buf = fresh_memory(self.block_bytes)
        view = memoryview(buf)
        try:
            while not self.stop.is_set() and not self.abort.is_set() and not self.errors:
                with self._lock:
                    off = next(self._offsets, None)
                if off is None:
                    return
                self._in_flight[threading.get_ident()] = off
                if not self._copy_block(off, view):
                    return
        except BaseException as exc:  # noqa: BLE001  (re-raised by run)
            self.errors.append(exc)
        finally:
            view.release()
            # A stored error's traceback may hold a slice of it: then freed with the error.
            with contextlib.suppress(BufferError):
                buf.close()

    def _read(self, dst: memoryview, off: int) -> None:
        """Fill ``dst`` with the source's bytes at ``off``: O_DIRECT for its page-aligned
        part where allowed, a buffered pread for the rest (the file's unaligned tail)."""
        done = 0
        if self.direct is not None and not self.direct_refused:
            aligned = len(dst) - len(dst) % ALIGN
            try:
                while done < aligned:
                    n = os.preadv(self.direct, [dst[done:aligned]], off + done)
                    done += max(n, 0)
                    if n <= 0 or n % ALIGN:
                        break  # the end of the file (or a short read): the rest buffered
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise ReadFailed(
                        f"{exc.strerror} at offset {off + done}", path=self.source
                    ) from None
                self.direct_refused = True  # opened, but its reads refused: buffered now
        if done < len(dst):
            pread_exactly(self.src, dst[done:], off + done, self.source)

    def _copy_block(self, off: int, view: memoryview) -> bool:
        """The block at ``off`` read, written and counted; False when aborted meanwhile."""
        length = min(self.block_bytes, self.size - off)
        data = view[:length]
        with self.copy_run.reads:
            self._read(data, off)
        self.copy_run.count_read(length)
        if self.abort.is_set():
            return False
        if self.out is not None:
            written = 0
            try:
                with self.copy_run.writes:
                    while written < length:
                        written += os.pwrite(self.out, data[written:], off + written)
            except OSError as exc:
                raise CopyError(
                    f"writing at offset {off + written}: {exc.strerror}", path=self.partial
                ) from None
        self.crcs[off] = (zlib.crc32(data), length)
        self._moved = time.monotonic()
        self.tick(length)
        return True


def verify_back(path: Path, crcs: dict[int, tuple[int, int]], block_bytes: int) -> str | None:
    """Read ``path`` back block by block: each block's crc32 must equal the source's.
    Returns the whole file's crc32, or None at the first difference."""
    fd = open_regular(path)
    try:
        whole = 0
        for off in sorted(crcs):
            want, length = crcs[off]
            chunk = os.pread(fd, length, off)
            if len(chunk) != length or zlib.crc32(chunk) != want:
                return None
            whole = zlib.crc32(chunk, whole)
        if os.pread(fd, 1, sum(n for _, n in crcs.values())):
            return None  # longer than the source
        return f"{whole:08x}"
    finally:
        os.close(fd)
