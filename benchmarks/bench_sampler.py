"""Speed target: the I/O sampler must be cheap enough to run at 10 Hz beside a load.

Run: ``.venv/bin/python benchmarks/bench_sampler.py`` (exit 1 when the target is missed).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from loadscope.probes.iosampler import IoSampler

#: At 10 Hz a sample has 100 ms; it may take at most 1% of that.
TARGET_S = 0.001


def main() -> int:
    dev = os.stat("/").st_dev
    stat = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat")
    sampler = IoSampler(block_stat_path=stat if stat.exists() else None)
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            sampler.sample()
        rounds.append((time.perf_counter() - t0) / 200)
    median = statistics.median(rounds)
    ok = median <= TARGET_S
    print(
        f"sample(): median {median * 1e6:.0f} us"
        f" (target <= {TARGET_S * 1e6:.0f} us) {'ok' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
