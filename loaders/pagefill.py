"""Reading byte ranges into the page cache: the I/O of ``loadscope warm`` and of prefetching.

Two patterns, because the tools people run use both and they meet slow storage
differently:

- :class:`PageFill` — ``loadscope warm`` / ``loadscope.prewarm``: every range is cut
  into blocks and a pool of threads takes the next block of *any* file, so a single
  large file is read with as many requests in flight as there are threads;
- :func:`prefetch_files_sequentially` — vLLM's ``--safetensors-load-strategy prefetch``:
  a pool of threads where each thread reads *one file* front to back in blocks, so a
  one-file model gets one sequential reader however many threads are asked for.

Reads go into throw-away buffers; what stays is the page cache. Files are opened
read-only. Nothing here imports torch.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from loadscope.base.safeio import open_regular, pread_exactly

# ``loadscope warm``'s defaults, declared with a load's other settings (the public API's
# first call reads them without importing the fill).
from loadscope.loaders.requests import WARM_BLOCK_BYTES as WARM_BLOCK_BYTES  # noqa: PLC0414
from loadscope.loaders.requests import WARM_THREADS as WARM_THREADS  # noqa: PLC0414


@dataclass(frozen=True, slots=True)
class FillRange:
    """Bytes ``[start, end)`` of ``path`` to bring into the page cache."""

    path: str
    start: int
    end: int


def whole_files(paths_and_sizes: Sequence[tuple[str, int]]) -> list[FillRange]:
    return [FillRange(path, 0, size) for path, size in paths_and_sizes]


class PageFill:
    """Threads that read ``ranges`` in ``block_bytes`` blocks, the next block of any file.

    :meth:`start` opens the files (``POSIX_FADV_WILLNEED`` on each range: a sample's fill
    asks for its ranges, not the rest of the file) and starts the
    readers; ``done_bytes`` and ``in_flight`` (reader -> (file, offset) it waits on) may
    be read while they run; :meth:`join` waits and closes the files; setting ``stop``
    makes the readers finish their current block and return. The first read error is
    in ``errors`` (and raised by :meth:`run`).
    """

    def __init__(
        self,
        ranges: Sequence[FillRange],
        *,
        threads: int,
        block_bytes: int,
        stop: threading.Event | None = None,
    ) -> None:
        if threads < 1 or block_bytes < 4096:
            raise ValueError("threads must be >= 1 and block_bytes >= 4 KiB")
        self.block_bytes = block_bytes
        self.stop = stop or threading.Event()
        self.jobs = [
            (r.path, off, min(block_bytes, r.end - off))
            for r in ranges
            for off in range(r.start, r.end, block_bytes)
        ]
        self.total_bytes = sum(length for _, _, length in self.jobs)
        self.done_bytes = 0
        self.errors: list[BaseException] = []
        self.in_flight: dict[int, tuple[str, int]] = {}
        self._lock = threading.Lock()
        self._next = iter(self.jobs)
        self._fds: dict[str, int] = {}
        self.pool = [threading.Thread(target=self._reader, daemon=True) for _ in range(threads)]
        self._paths = list(dict.fromkeys(r.path for r in ranges))
        self._ranges = list(ranges)

    def start(self) -> None:
        try:
            for path in self._paths:
                self._fds[path] = open_regular(path)
            for r in self._ranges:
                os.posix_fadvise(
                    self._fds[r.path], r.start, r.end - r.start, os.POSIX_FADV_WILLNEED
                )
            for t in self.pool:
                t.start()
        except BaseException:
            self.stop.set()
            self.join()
            raise

    def alive(self) -> bool:
        return any(t.is_alive() for t in self.pool)

    def join(self) -> None:
        """Wait for every started reader, then close the files."""
        for t in self.pool:
            if t.ident is not None:  # a signal may land between two start() calls
                t.join()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def run(self) -> int:
        """Start, wait, close; raise the first read error. Returns the bytes read."""
        self.start()
        try:
            for t in self.pool:
                t.join()
        except BaseException:
            self.stop.set()
            raise
        finally:
            self.join()
        if self.errors:
            raise self.errors[0]
        return self.done_bytes

    def _reader(self) -> None:
        view = memoryview(bytearray(self.block_bytes))
        me = threading.get_ident()
        try:
            while not self.stop.is_set() and not self.errors:
                with self._lock:
                    job = next(self._next, None)
                if job is None:
                    return
                path, off, length = job
                self.in_flight[me] = (path, off)
                pread_exactly(self._fds[path], view[:length], off, path)
                with self._lock:
                    self.done_bytes += length
                self.in_flight.pop(me, None)
        except BaseException as exc:  # noqa: BLE001  (re-raised by run() or the caller)
            self.errors.append(exc)


def prefetch_files_sequentially(
    ranges: Sequence[FillRange], *, threads: int, block_bytes: int
) -> threading.Thread:
    """vLLM's prefetch: a background thread running a pool of ``threads`` readers, each
    reading one file's ranges front to back with buffered ``read(block_bytes)`` calls.

    Returns the background thread (already started; a daemon, as in vLLM, so a load
    that finishes first is not held up by it). Read errors end that file's prefetch
    only: the load that follows reads what it needs itself (vLLM logs a warning).
    """
    if threads < 1 or block_bytes < 1:
        raise ValueError("threads and block_bytes must be >= 1")
    per_file: dict[str, list[FillRange]] = {}
    for r in ranges:
        per_file.setdefault(r.path, []).append(r)
    queue = list(per_file.items())
    lock = threading.Lock()

    def read_one(path: str, parts: list[FillRange]) -> None:
        try:
            with open(path, "rb", buffering=0) as fh:
                for part in parts:
                    fh.seek(part.start)
                    left = part.end - part.start
                    while left > 0:
                        chunk = fh.read(min(block_bytes, left))
                        if not chunk:
                            break
                        left -= len(chunk)
        except OSError:
            return

    def pool_worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                path, parts = queue.pop(0)
            read_one(path, parts)

    def run_pool() -> None:
        workers = [
            threading.Thread(target=pool_worker, daemon=True)
            for _ in range(min(threads, max(1, len(per_file))))
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    background = threading.Thread(target=run_pool, daemon=True, name="vllm-style-prefetch")
    background.start()
    return background
