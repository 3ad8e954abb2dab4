"""Where a cold parallel read into RAM loses to the probe's readers: the fresh memory.

One shard (the largest of a 2 GiB, 4-shard synthetic model) served by the emulated FUSE
disk (5 ms, readahead 128 KiB), read cold with the probe's best shape (16 readers x
1 MiB, O_DIRECT) into:

- ``reuse``: one 1 MiB buffer per reader, reused (what the probe's scan measures);
- ``fresh-shared``: one fresh buffer the size of the shard as ``auto`` took it before
  2026-12-05: ``mmap.mmap(-1, n)``, which is *shared* anonymous memory (shmem), marked
  ``MADV_HUGEPAGE`` (a no-op on shmem where ``shmem_enabled`` is ``never``);
- ``fresh-4k``: private anonymous memory in 4 KiB pages (``auto`` since 2026-12-05);
- ``fresh-huge``: private anonymous memory marked ``MADV_HUGEPAGE`` (``huge_pages=yes``);
- ``prefaulted``: the same buffer with every page touched before the clock starts;
- ``populate``: the same buffer populated by ``MADV_POPULATE_WRITE`` inside the clock;
- ``ahead``: the same buffer populated by one more thread, 8 MiB at a time, while the
  readers read (the first touch taken off the readers' path where a CPU is free).

Rounds interleave the variants; every read is evicted and verified cold first. Medians,
with the share of both CPUs busy during each read (``/proc/stat``): where it is near
100%, the emulated disk's server and the loader share saturated CPUs, and no loader-side
change in how memory is touched can be faster than the CPU time it costs.
Then the memory alone, no I/O (``--memory-only`` runs just this): a fresh 1 GiB buffer
written whole (``memset``, the GIL released) by one thread and by two, as shared
anonymous memory, private in 4 KiB pages and private in 2 MiB pages, against writing the
same buffer again once its pages exist; then a first write 0, 2 and 8 s after freeing
as much.
Run: ``.venv/bin/python benchmarks/bench_fresh_memory.py [--rounds 3] [--memory-only]``
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from loadscope.base.memory import fresh_memory
from loadscope.loaders.parallelread import parallel_read
from loadscope.probes.pagecache import ColdCache
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize

READERS, BLOCK = 16, 1 << 20
AHEAD_CHUNK = 8 << 20
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # Linux 5.14+


def _reuse(path: str, size: int) -> None:
    jobs = iter(range(0, size, BLOCK))
    lock = threading.Lock()

    def reader() -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, BLOCK)
        view = memoryview(buf)
        try:
            while True:
                with lock:
                    off = next(jobs, None)
                if off is None:
                    return
                os.preadv(fd, [view], off)
        finally:
            view.release()
            buf.close()
            os.close(fd)

    pool = [threading.Thread(target=reader) for _ in range(READERS)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def _populate_ahead(buf: mmap.mmap, size: int) -> threading.Thread:
    def run() -> None:
        for off in range(0, size, AHEAD_CHUNK):
            buf.madvise(MADV_POPULATE_WRITE, off, min(AHEAD_CHUNK, size - off))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _fresh(path: str, size: int, variant: str) -> float:
    if variant == "fresh-shared":
        buf = mmap.mmap(-1, size + 4096)
        buf.madvise(mmap.MADV_HUGEPAGE)
    else:
        buf = fresh_memory(size + 4096, huge_pages=variant != "fresh-4k")
    view = memoryview(buf)
    if variant == "prefaulted":
        for i in range(0, size, 4096):
            view[i] = 0
    t0 = time.perf_counter()
    if variant == "populate":
        buf.madvise(MADV_POPULATE_WRITE)
    ahead = _populate_ahead(buf, size) if variant == "ahead" else None
    parallel_read(
        path, view, [(0, size)], threads=READERS, block_bytes=BLOCK, flags=os.O_DIRECT, align=4096
    )
    if ahead is not None:
        ahead.join()
    secs = time.perf_counter() - t0
    view.release()
    buf.close()
    return secs


MEMORY_BYTES = 1 << 30


def _buffer(kind: str) -> mmap.mmap:
    if kind == "shared":
        return mmap.mmap(-1, MEMORY_BYTES)  # what mmap.mmap(-1, n) gives: shmem
    return fresh_memory(MEMORY_BYTES, huge_pages=kind == "private, 2 MiB")


def _first_and_again(threads: int, kind: str) -> tuple[float, float]:
    """(first write, second write) of a fresh buffer, in bytes/s."""
    libc = ctypes.CDLL(None)
    buf = _buffer(kind)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    part = MEMORY_BYTES // threads

    def write_all() -> float:
        pool = [
            threading.Thread(target=libc.memset, args=(ctypes.c_void_p(base + i * part), 1, part))
            for i in range(threads)
        ]
        t0 = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return MEMORY_BYTES / (time.perf_counter() - t0)

    first, again = write_all(), write_all()
    buf.close()
    return first, again


def memory_table(rounds: int) -> None:
    kinds = ("shared", "private, 4 KiB", "private, 2 MiB")
    shapes = [(n, kind) for n in (1, 2) for kind in kinds]
    got: dict[tuple[int, str], list[tuple[float, float]]] = {s: [] for s in shapes}
    for r in range(rounds):
        for shape in shapes if r % 2 == 0 else shapes[::-1]:
            got[shape].append(_first_and_again(*shape))
    print("| writers | memory | first write | written again | first / again | first writes |")
    print("|---|---|---|---|---|---|")
    for n, kind in shapes:
        firsts = [a for a, _ in got[(n, kind)]]
        first = statistics.median(firsts)
        again = statistics.median(b for _, b in got[(n, kind)])
        runs = ", ".join(f"{x / 1e9:.2f}" for x in firsts)
        print(
            f"| {n} | {kind} | {first / 1e9:.2f} GB/s | {again / 1e9:.2f} GB/s"
            f" | {first / again:.2f}x | {runs} |"
        )


def recycle_table(waits: tuple[float, ...] = (0.0, 2.0, 8.0)) -> None:
    """A first write of fresh private memory right after freeing as much, and seconds
    later: whether memory the guest has just freed is cheaper to touch again."""
    print("| freed before | first write |")
    print("|---|---|")
    for wait in waits:
        _first_and_again(1, "private, 4 KiB")  # write and free 1 GiB
        time.sleep(wait)
        first, _ = _first_and_again(1, "private, 4 KiB")
        print(f"| {wait:g} s | {first / 1e9:.2f} GB/s |")


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU since boot (idle and iowait are not busy)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--memory-only", action="store_true", help="only the memory, no reads")
    args = ap.parse_args()
    if args.memory_only:
        memory_table(args.rounds)
        print()
        recycle_table()
        return 0
    if (why := fuse_unavailable_reason()) is not None:
        sys.exit(f"the emulated disk is unavailable: {why}")
    variants = (
        "reuse",
        "fresh-shared",
        "fresh-4k",
        "fresh-huge",
        "prefaulted",
        "populate",
        "ahead",
    )
    rates: dict[str, list[float]] = {v: [] for v in variants}
    busy: dict[str, list[float]] = {v: [] for v in variants}
    slow = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
    with tempfile.TemporaryDirectory(prefix="bench-fresh-", dir="/var/tmp") as tmp:
        src = synthesize(Path(tmp) / "src", 2 << 30, shards=4, seed=23).root
        with emulated_disk(src, Path(tmp) / "mnt", slow) as disk:
            shard = max(Path(disk.path).glob("*.safetensors"), key=lambda p: p.stat().st_size)
            size = shard.stat().st_size // 4096 * 4096
            for r in range(args.rounds):
                for v in variants if r % 2 == 0 else variants[::-1]:
                    ev = ColdCache().evict(str(shard))
                    if not ev.verified:
                        sys.exit(f"{shard}: not verified cold ({ev.note})")
                    busy0, total0 = _cpu_ticks()
                    if v == "reuse":
                        t0 = time.perf_counter()
                        _reuse(str(shard), size)
                        secs = time.perf_counter() - t0
                    else:
                        secs = _fresh(str(shard), size, v)
                    busy1, total1 = _cpu_ticks()
                    rates[v].append(size / secs)
                    busy[v].append((busy1 - busy0) / max(1, total1 - total0))
    base = statistics.median(rates["reuse"])
    print("| into | median | vs reuse | CPUs busy | rounds |")
    print("|---|---|---|---|---|")
    for v in variants:
        med = statistics.median(rates[v])
        runs = ", ".join(f"{x / 1e9:.2f}" for x in rates[v])
        cpu = statistics.median(busy[v])
        print(f"| {v} | {med / 1e9:.2f} GB/s | {med / base:.2f}x | {cpu:.0%} | {runs} |")
    print()
    memory_table(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
