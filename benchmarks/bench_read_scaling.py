"""Whether a sample reads at the whole file's rate: one file, cold and warm (issue 41).

On a synthetic single-file model of ``--size`` (default 2 GiB) under ``--dir`` (default
``/var/tmp``, this VM's own disk), ``--rounds`` rounds, each read after a verified
eviction: the whole file in one ``read()`` into fresh memory; 10% of it as 8 spans
spread over the file; the whole file into memory touched beforehand; then the whole file
and the 10% warm. Prints each read's median GB/s and the rounds beside it, so a storage
that swings between identical cold reads shows it.

Run: ``.venv/bin/python benchmarks/bench_read_scaling.py [--size 2GiB] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from loadscope.base.units import parse_size
from loadscope.probes.pagecache import ColdCache
from loadscope.tools.synth import synthesize

SPANS = 8
SHARE = 0.1


def _evict(path: str) -> None:
    e = ColdCache().evict(path)
    if not e.verified:
        sys.exit(f"{path}: not cold: {e.note}")


def whole(path: str) -> float:
    with open(path, "rb") as fh:
        t0 = time.perf_counter()
        fh.read()
        return time.perf_counter() - t0


def spans(path: str, size: int) -> tuple[float, int]:
    fd = os.open(path, os.O_RDONLY)
    step, length = size // SPANS, int(size * SHARE / SPANS)
    try:
        t0 = time.perf_counter()
        for i in range(SPANS):
            bytearray(os.pread(fd, length, i * step))
        return time.perf_counter() - t0, length * SPANS
    finally:
        os.close(fd)


def into_touched(path: str, size: int) -> float:
    buf = bytearray(size)
    for i in range(0, size, 4096):
        buf[i] = 1
    view, fd, off = memoryview(buf), os.open(path, os.O_RDONLY), 0
    try:
        t0 = time.perf_counter()
        while off < size:
            off += os.preadv(fd, [view[off : off + (64 << 20)]], off)
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/var/tmp")
    args = ap.parse_args()
    rates: dict[str, list[float]] = {
        k: []
        for k in ("cold whole", "cold 10%", "cold whole, touched memory", "warm whole", "warm 10%")
    }
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        ckpt = synthesize(Path(tmp) / "model", parse_size(args.size), seed=4)
        path = str(ckpt.files[0])
        size = os.path.getsize(path)
        for _ in range(args.rounds):
            _evict(path)
            rates["cold whole"].append(size / whole(path))
            _evict(path)
            secs, n = spans(path, size)
            rates["cold 10%"].append(n / secs)
            _evict(path)
            rates["cold whole, touched memory"].append(size / into_touched(path, size))
            whole(path)  # warm it
            rates["warm whole"].append(size / whole(path))
            secs, n = spans(path, size)
            rates["warm 10%"].append(n / secs)
    print(f"| read ({args.size}, {args.dir}) | GB/s, median (rounds) |\n|---|---|")
    for name, values in rates.items():
        rounds = ", ".join(f"{v / 1e9:.2f}" for v in values)
        print(f"| {name} | {statistics.median(values) / 1e9:.2f} ({rounds}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
