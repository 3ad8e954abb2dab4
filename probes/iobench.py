"""A small fio on the weight files themselves: cold latency, throughput by block size and readers.

Everything is read-only and bounded twice, by time and by bytes, and every
number says how many samples it rests on. Reads bypass the page cache with
``O_DIRECT`` where the filesystem allows it; elsewhere the file is evicted with
``posix_fadvise`` and the eviction verified with ``mincore`` before each
measurement ("evict-then-read"). Buffered reads then go through the kernel's
readahead — which is exactly what a plain ``read()`` or mmap load meets.
"""

from __future__ import annotations

import mmap
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from loadscope.base.errors import LoadscopeError
from loadscope.base.memory import fresh_memory
from loadscope.base.safeio import open_regular
from loadscope.base.units import format_bytes
from loadscope.probes.iosampler import IoDelta, IoSampler, delta
from loadscope.probes.pagecache import ColdCache
from loadscope.probes.result import Unavailable
from loadscope.probes.spec import (
    BarRows,
    Lines,
    Shown,
    block_of,
    blocks_of,
    figure,
    ok,
    status_text,
)

Method = Literal["o_direct", "evict-then-read"]
ALIGN = 4096
SEQUENTIAL_BLOCKS = (4 << 10, 64 << 10, 1 << 20, 16 << 20)
PARALLEL_READERS = (1, 4, 16, 64)
PARALLEL_BLOCK = 1 << 20
#: Bytes one sequential point may read, by block size (small blocks are slow by nature).
SEQUENTIAL_CAP = {4 << 10: 8 << 20, 64 << 10: 64 << 20, 1 << 20: 256 << 20, 16 << 20: 1 << 30}
PARALLEL_CAP = 1 << 30
LATENCY_MAX_SAMPLES = 400


@dataclass(frozen=True, slots=True)
class LatencyResult:
    method: Method
    block_bytes: int
    samples: int
    p50_us: float
    p90_us: float
    p99_us: float
    min_us: float
    max_us: float
    files_sampled: int
    note: str = ""


@dataclass(frozen=True, slots=True)
class ThroughputPoint:
    block_bytes: int
    readers: int
    bytes_read: int
    seconds: float
    bytes_per_s: float
    requests: int
    method: Method
    #: What the block layer saw meanwhile, when the storage has a block device.
    device_requests: int | None = None
    avg_request_bytes: float | None = None
    stopped_by: str = "bytes"  # "bytes", "time" or "eof"


@dataclass(frozen=True, slots=True)
class ThroughputResult:
    method: Method
    file: str
    sequential: tuple[ThroughputPoint, ...]
    parallel: tuple[ThroughputPoint, ...]
    note: str = ""
    #: The best parallel point's readers and request size again, landing the bytes in one
    #: fresh buffer of their size instead of small reused ones: the ceiling a loader that
    #: returns the model in RAM can reach (every page it fills is new memory to fault in).
    into_ram: ThroughputPoint | None = None
    #: Why ``into_ram`` was not measured, when it was not.
    into_ram_reason: str = ""


def o_direct_support(path: str) -> tuple[bool, str]:
    """Whether ``path`` can be read with O_DIRECT here, and if not, why."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError as exc:
        return False, f"O_DIRECT open refused ({exc.strerror})"
    try:
        buf = mmap.mmap(-1, ALIGN)
        try:
            os.preadv(fd, [buf], 0)
        except OSError as exc:
            return False, f"O_DIRECT read refused ({exc.strerror})"
        finally:
            buf.close()
    finally:
        os.close(fd)
    return True, "O_DIRECT supported"


def _open(path: str, direct: bool) -> int:
    fd = open_regular(path)
    if direct:
        # open_regular checked the file type; reopen with O_DIRECT on the same inode.
        os.close(fd)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    return fd


def _evict(cold: ColdCache, path: str) -> str:
    ev = cold.evict(path)
    if not ev.verified:
        return f"eviction of {Path(path).name} not verified: {ev.note}"
    return ""


def sequential_read(
    path: str,
    *,
    offset: int,
    length: int,
    block_bytes: int,
    direct: bool,
    deadline: float | None = None,
) -> tuple[int, float, int, str]:
    """Read ``length`` bytes from ``offset`` in ``block_bytes`` requests, one at a time.

    Returns (bytes read, seconds, requests, stopped_by). The primitive behind the
    sequential points, and what tests compare with ``dd``.
    """
    fd = _open(path, direct)
    buf = mmap.mmap(-1, block_bytes)  # page-aligned, as O_DIRECT needs
    done = requests = 0
    stopped = "bytes"
    try:
        start = time.perf_counter()
        while done < length:
            n = os.preadv(fd, [buf], offset + done)
            requests += 1
            if n <= 0:
                stopped = "eof"
                break
            done += n
            if n < block_bytes:
                stopped = "eof"
                break
            if deadline is not None and time.monotonic() >= deadline:
                stopped = "time"
                break
        seconds = time.perf_counter() - start
    finally:
        buf.close()
        os.close(fd)
    return done, seconds, requests, stopped


def _aligned(n: int) -> int:
    return n - n % ALIGN


class IoBench:
    """Runs the latency and throughput measurements on a set of files, within a deadline."""

    def __init__(
        self,
        files: list[tuple[str, int]],
        *,
        cold: ColdCache,
        direct: bool,
        sampler_factory: Callable[[], IoSampler] | None = None,
        seed: int = 0,
    ) -> None:
        if not files:
            raise Unavailable("no files to measure")
        self.files = files
        self.cold = cold
        self.direct = direct
        self.method: Method = "o_direct" if direct else "evict-then-read"
        self.sampler_factory = sampler_factory
        self.rng = random.Random(seed)
        self.largest = max(files, key=lambda f: f[1])
        #: The file and offset of the read in progress (what a stall message names).
        self.reading: tuple[str, int] = (self.largest[0], 0)
        # Successive points start where the last one stopped, so a point does not
        # re-read what the previous one may have left in a device or host cache.
        self._cursor = 0

    def where(self) -> str:
        path, offset = self.reading
        return f"{path} at offset {offset}"

    # -- latency -------------------------------------------------------------------------

    def latency(self, deadline: float) -> LatencyResult:
        """Cold random 4 KiB reads spread over the files, until ``deadline`` or enough samples."""
        usable = [(p, s) for p, s in self.files if s >= ALIGN]
        if not usable:
            raise Unavailable("files are smaller than one 4 KiB block")
        notes = []
        if not self.direct:
            for path, _ in usable:
                if note := _evict(self.cold, path):
                    notes.append(note)
        samples: list[float] = []
        fds = {}
        buf = mmap.mmap(-1, ALIGN)
        seen: set[tuple[str, int]] = set()
        try:
            for path, _ in usable:
                fds[path] = _open(path, self.direct)
                if not self.direct:
                    # No readahead: each sample must be one 4 KiB trip to storage.
                    os.posix_fadvise(fds[path], 0, 0, os.POSIX_FADV_RANDOM)
            weights = [s for _, s in usable]
            while len(samples) < LATENCY_MAX_SAMPLES and time.monotonic() < deadline:
                path, size = self.rng.choices(usable, weights=weights)[0]
                # Offsets on a 1 MiB grid plus a random page: far from each other, so a
                # read-around of one sample cannot warm the next.
                block = self.rng.randrange(0, max(1, size // ALIGN))
                offset = block * ALIGN
                if (path, offset >> 20) in seen:
                    if len(seen) >= sum(max(1, s >> 20) for _, s in usable):
                        break  # every MiB region sampled once: stop rather than re-read warm data
                    continue
                seen.add((path, offset >> 20))
                self.reading = (path, offset)
                t0 = time.perf_counter()
                os.preadv(fds[path], [buf], offset)
                samples.append((time.perf_counter() - t0) * 1e6)
        finally:
            buf.close()
            for fd in fds.values():
                os.close(fd)
        if not samples:
            raise Unavailable("no latency sample fit in the time budget")
        q = _quantiles(samples)
        return LatencyResult(
            method=self.method,
            block_bytes=ALIGN,
            samples=len(samples),
            p50_us=q[50],
            p90_us=q[90],
            p99_us=q[99],
            min_us=min(samples),
            max_us=max(samples),
            files_sampled=len({p for p, _ in seen}),
            note="; ".join(notes),
        )

    # -- throughput ----------------------------------------------------------------------

    def _region(self, want: int) -> tuple[int, int]:
        path_size = self.largest[1]
        want = min(_aligned(want) or ALIGN, _aligned(path_size) or path_size)
        if self._cursor + want > path_size:
            self._cursor = 0
        start = self._cursor
        self._cursor = _aligned(start + want)
        return start, want

    def _device_delta(self, run: Callable[[], ThroughputPoint]) -> ThroughputPoint:
        sampler = self.sampler_factory() if self.sampler_factory else None
        before = sampler.sample() if sampler else None
        point = run()
        if sampler is None or before is None:
            return point
        d: IoDelta = delta(before, sampler.sample())
        if d.block_read_ios is None:
            return point
        return ThroughputPoint(
            **{
                **{f: getattr(point, f) for f in point.__dataclass_fields__},
                "device_requests": d.block_read_ios,
                "avg_request_bytes": d.avg_request_bytes,
            }
        )

    def sequential(self, block_bytes: int, seconds: float) -> ThroughputPoint:
        """One reader, ``block_bytes`` requests, cold, for at most ``seconds`` or its byte cap."""
        path = self.largest[0]
        offset, length = self._region(SEQUENTIAL_CAP.get(block_bytes, 256 << 20))
        if not self.direct:
            _evict(self.cold, path)

        def run() -> ThroughputPoint:
            self.reading = (path, offset)
            done, secs, reqs, stopped = sequential_read(
                path,
                offset=offset,
                length=length,
                block_bytes=block_bytes,
                direct=self.direct,
                deadline=time.monotonic() + seconds,
            )
            return ThroughputPoint(
                block_bytes,
                1,
                done,
                secs,
                done / secs if secs > 0 else 0.0,
                reqs,
                self.method,
                stopped_by=stopped,
            )

        return self._device_delta(run)

    def parallel(
        self, readers: int, seconds: float, block_bytes: int = PARALLEL_BLOCK
    ) -> ThroughputPoint:
        """``readers`` threads issuing ``block_bytes`` positional reads over one region,
        each into one small buffer of its own, reused (the bytes never stay in RAM)."""
        return self._parallel(readers, seconds, block_bytes, PARALLEL_CAP, into_ram=False)

    def into_ram(
        self, readers: int, seconds: float, block_bytes: int, max_bytes: int
    ) -> ThroughputPoint:
        """The same reads landing side by side in one fresh buffer of up to ``max_bytes``,
        allocated inside the clock: what a loader holding the model pays for its memory."""
        return self._parallel(readers, seconds, block_bytes, max_bytes, into_ram=True)

    def _parallel(
        self, readers: int, seconds: float, block_bytes: int, cap: int, *, into_ram: bool
    ) -> ThroughputPoint:
        path = self.largest[0]
        offset, length = self._region(cap)
        if not self.direct:
            _evict(self.cold, path)
        pool = _ReaderPool(
            path, offset, length, block_bytes, readers, self.direct, self._note_reading
        )

        def run() -> ThroughputPoint:
            secs, done, requests, timed_out = pool.run(seconds, into_ram=into_ram)
            return ThroughputPoint(
                block_bytes,
                readers,
                done,
                secs,
                done / secs if secs > 0 else 0.0,
                requests,
                self.method,
                stopped_by="time" if timed_out else "bytes",
            )

        return self._device_delta(run)

    def _note_reading(self, path: str, offset: int) -> None:
        self.reading = (path, offset)


class _ReaderPool:
    """``readers`` threads taking ``block_bytes`` blocks of one region in turn, each read
    into a small buffer of its own (reused) or into its place in one shared buffer."""

    def __init__(
        self,
        path: str,
        offset: int,
        length: int,
        block_bytes: int,
        readers: int,
        direct: bool,
        on_read: Callable[[str, int], None],
    ) -> None:
        self.path, self.offset, self.block_bytes = path, offset, block_bytes
        self.readers, self.direct, self.on_read = readers, direct, on_read
        self.nblocks = max(1, (length + block_bytes - 1) // block_bytes)
        self._next_block = iter(range(self.nblocks))
        self._lock = threading.Lock()
        self.totals = [0] * readers
        self.counts = [0] * readers
        self.errors: list[OSError | LoadscopeError] = []
        self.deadline = 0.0
        self.timed_out = threading.Event()
        self.landing: list[memoryview] = []

    def run(self, seconds: float, *, into_ram: bool) -> tuple[float, int, int, bool]:
        """(seconds, bytes read, requests, stopped by time); the landing buffer, when
        ``into_ram``, is allocated inside the clock."""
        threads = [
            threading.Thread(target=self._worker, args=(i, into_ram), daemon=True)
            for i in range(self.readers)
        ]
        self.deadline = time.monotonic() + seconds
        t0 = time.perf_counter()
        buf = fresh_memory(self.nblocks * self.block_bytes) if into_ram else None
        if buf is not None:
            self.landing.append(memoryview(buf))
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            secs = time.perf_counter() - t0
        finally:
            if buf is not None:
                self.landing.pop().release()
                buf.close()
        if self.errors:
            raise self.errors[0]
        return secs, sum(self.totals), sum(self.counts), self.timed_out.is_set()

    def _worker(self, i: int, into_ram: bool) -> None:
        try:
            fd = _open(self.path, self.direct)
        except (OSError, LoadscopeError) as exc:  # the file went away meanwhile, say
            self.errors.append(exc.with_traceback(None))  # said by the point, not the thread
            return
        own = None if into_ram else mmap.mmap(-1, self.block_bytes)
        try:
            while True:
                if time.monotonic() >= self.deadline:
                    self.timed_out.set()
                    return
                with self._lock:
                    block = next(self._next_block, None)
                if block is None:
                    return
                at = block * self.block_bytes
                self.on_read(self.path, self.offset + at)
                if own is None:
                    # A slice of the shared buffer, released at once: the buffer
                    # can only be closed once no slice of it is alive.
                    with self.landing[0][at : at + self.block_bytes] as dest:
                        n = os.preadv(fd, [dest], self.offset + at)
                else:
                    n = os.preadv(fd, [own], self.offset + at)
                self.totals[i] += n
                self.counts[i] += 1
        except OSError as exc:
            self.errors.append(exc.with_traceback(None))  # no frame (and slice) kept alive
        finally:
            if own is not None:
                own.close()
            os.close(fd)


def _quantiles(samples: list[float]) -> dict[int, float]:
    if len(samples) == 1:
        return {50: samples[0], 90: samples[0], 99: samples[0]}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {50: cuts[49], 90: cuts[89], 99: cuts[98]}


def latency_text(lat: dict[str, Any]) -> str:
    """The cold read latency's figures, from its block in the probe report's JSON."""
    return (
        f"cold 4 KiB reads ({lat.get('method')}, {lat.get('samples')} samples):"
        f" p50 {figure('p50_us', lat.get('p50_us'))}, p90 {figure('p90_us', lat.get('p90_us'))},"
        f" p99 {figure('p99_us', lat.get('p99_us'))}"
    )


def latency_lines(lat: dict[str, Any]) -> Lines:
    """The cold read latency's line (or why it was not measured)."""
    return [("latency", latency_text(lat) if ok(lat) else status_text(lat))]


def throughput_shown(thr: dict[str, Any]) -> Shown:
    """The cold throughput, from its block in the probe report's JSON: one reader by
    request size, then by parallel readers, then the best of them into fresh memory,
    as bars on one scale, each under its caption (or why it was not measured)."""
    if not ok(thr):
        return [("throughput", status_text(thr))]
    seq, par = blocks_of(thr.get("sequential")), blocks_of(thr.get("parallel"))
    ram = block_of(thr.get("into_ram"))
    # The bars share one scale, the into-RAM point's too.
    scale = max((_rate(p) for p in [*seq, *par, ram] if p), default=0.0)
    method = thr.get("method")
    out: Shown = [
        ("throughput", f"cold, {method}; one reader, by request size:"),
        BarRows(
            ("request", "rate"),
            tuple(_bar(p, format_bytes(int(p.get("block_bytes") or 0))) for p in seq),
            scale,
        ),
    ]
    if par:
        readers = tuple(_bar(p, _readers(p)) for p in par)
        out += [
            ("", "parallel readers, 1 MiB requests:"),
            BarRows(("readers", "rate"), readers, scale),
        ]
    if ram:
        best = max(_rate(p) for p in par) if par else 0.0
        share = f"  {_rate(ram) / best:.2f}x" if best > 0 else ""
        landed = format_bytes(int(ram.get("bytes_read") or 0))
        out += [
            ("", f"into fresh RAM, where a loader lands it ({landed}):"),
            BarRows(("readers", "rate"), (_bar(ram, _readers(ram), share),), scale),
        ]
    elif par and thr.get("into_ram_reason"):
        out.append(("into RAM", str(thr["into_ram_reason"])))
    return out


def _rate(p: Mapping[str, Any]) -> float:
    value = p.get("bytes_per_s")
    return float(value) if isinstance(value, int | float) else 0.0


def _bar(p: dict[str, Any], label: str, remark: str | None = None) -> tuple[str, str, float, str]:
    if remark is None:
        avg = p.get("avg_request_bytes")
        remark = f"  kernel {format_bytes(avg)}/req" if avg else ""
    return label, figure("bytes_per_s", _rate(p)), _rate(p), remark


def _readers(p: dict[str, Any]) -> str:
    n = p.get("readers")
    return f"{n} reader{'s' if n != 1 else ''}"


def latency_chart(lat: Mapping[str, Any]) -> tuple[str, BarRows] | None:
    """The cold latency's percentiles as bars under their caption (the HTML's chart and
    the app's), from its block in the probe report's JSON; None when it did not run ok."""
    if not ok(lat):
        return None
    rows = tuple(
        (q, figure(f"{q}_us", v), float(v), "")
        for q, v in (
            ("p50", lat.get("p50_us")),
            ("p90", lat.get("p90_us")),
            ("p99", lat.get("p99_us")),
        )
        if isinstance(v, int | float)
    )
    caption = f"cold 4 KiB read latency ({lat.get('method')}, {lat.get('samples')} samples)"
    return caption, BarRows(("percentile", "latency"), rows, max((r[2] for r in rows), default=0.0))


def latency_p50(lat: Mapping[str, Any]) -> float | None:
    """The cold 4 KiB reads' median in microseconds, or None (not measured, or not a
    number: a block holds its figures only when its probe ran ok)."""
    value = lat.get("p50_us")
    return float(value) if isinstance(value, int | float) else None


def best_read(thr: Mapping[str, Any]) -> float | None:
    """The fastest read the throughput probe measured (parallel readers into reused
    buffers), or None without a parallel scan."""
    par = [_rate(p) for p in blocks_of(thr.get("parallel")) if _rate(p)]
    return max(par) if ok(thr) and par else None


def into_ram_rate(thr: Mapping[str, Any]) -> float | None:
    """The best parallel point again, landing in fresh memory (None: not measured)."""
    rate = _rate(block_of(thr.get("into_ram")))
    return rate or None
