"""``prefetch`` file by file against every file read ahead first, on the emulated slow disk.

The ``prefetch`` strategy reads a file ahead into the page cache with large sequential
reads and then loads it with ``load_file``. Done for every file first and loaded
afterwards, the first files' pages sit idle for a whole model's read, and on a VM whose
page cache is reclaimed proactively (this one: DAMON) some are gone by the time
``load_file`` maps them: each lost page is read again through the slow path the prefetch
was meant to avoid, and the whole load grows faster than the bytes (the sampled trials,
short, never see it). This times both orders of the same steps, cold (evicted and
verified), interleaved (order swapped each round), touching every page of every tensor
as the bench worker does, and prints the residency each file had when it was loaded.

Run: ``.venv/bin/python benchmarks/bench_prefetch_order.py [--size 4GiB] [--rounds 4]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from safetensors.torch import load_file

from loadscope.base.units import format_bytes, parse_size
from loadscope.loaders.worker import touch
from loadscope.probes.pagecache import ColdCache, residency
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize

BLOCK = 16 << 20  # the strategy's default read size


def _read_ahead(path: Path, view: memoryview) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        offset = 0
        while n := os.preadv(fd, [view], offset):
            offset += n
    finally:
        os.close(fd)


def _load(path: Path, keep: list[object]) -> None:
    for tensor in load_file(str(path)).values():
        touch(tensor)
        keep.append(tensor)


def _fraction(path: Path) -> float:
    return residency(str(path)).fraction or 0.0


def all_first(files: list[Path], view: memoryview) -> list[float]:
    """Every file read ahead, then every file loaded (loadscope's order before 2026-12-04)."""
    for f in files:
        _read_ahead(f, view)
    resident = [_fraction(f) for f in files]
    keep: list[object] = []
    for f in files:
        _load(f, keep)
    return resident


def file_by_file(files: list[Path], view: memoryview) -> list[float]:
    """Each file read ahead and loaded before the next (the strategy's order now)."""
    resident, keep = [], []
    for f in files:
        _read_ahead(f, view)
        resident.append(_fraction(f))
        _load(f, keep)
    return resident


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="4GiB")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--latency-ms", type=float, default=5.0)
    args = ap.parse_args()
    if (why := fuse_unavailable_reason()) is not None:
        print(f"emulated disk unavailable: {why}", file=sys.stderr)
        return 2
    size = parse_size(args.size)
    orders: dict[str, Callable[[list[Path], memoryview], list[float]]] = {
        "all files first": all_first,
        "file by file": file_by_file,
    }
    times: dict[str, list[float]] = {name: [] for name in orders}
    where = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="bench-prefetch-", dir=where) as tmp:
        src = synthesize(Path(tmp) / "m", size, shards=4, seed=17)
        settings = EmulatorSettings(latency_s=args.latency_ms / 1e3, jitter_s=0.0, readahead_kb=128)
        with emulated_disk(src.root, Path(tmp) / "mnt", settings) as disk:
            files = sorted(Path(disk.path).glob("*.safetensors"))
            cold = ColdCache(allow_drop_caches=True)
            view = memoryview(bytearray(BLOCK))
            for r in range(args.rounds):
                names = list(orders) if r % 2 == 0 else list(reversed(orders))
                for name in names:
                    for f in files:
                        ev = cold.evict(str(f))
                        if not ev.verified:
                            sys.exit(f"{f.name}: not verified cold: {ev.note}")
                    began = time.perf_counter()
                    resident = orders[name](files, view)
                    took = time.perf_counter() - began
                    times[name].append(took)
                    shown = ", ".join(f"{x:.1%}" for x in resident)
                    print(
                        f"round {r + 1} {name}: {took:.1f} s; resident when loaded: {shown}",
                        file=sys.stderr,
                    )
    old, new = times["all files first"], times["file by file"]
    pairs = ", ".join(f"{b / a:.2f}x" for a, b in zip(old, new, strict=True))
    o, n = statistics.median(old), statistics.median(new)
    print(
        f"{format_bytes(size)}, {args.rounds} rounds: all files first {o:.1f} s, file by file"
        f" {n:.1f} s (medians); file by file / all first {n / o:.2f}x (pairs: {pairs})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
