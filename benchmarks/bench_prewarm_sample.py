"""Whether a sample of ``loadscope warm``'s fill stands for the whole fill, per byte.

On the emulated slow disk (5 ms per request, readahead 128 KiB), a synthetic one-file
model; each round, after ``drop_caches``, ``PageFill`` (the command's fill: 8 threads) of
the whole file in its 16 MiB blocks, then of spans of it shaped as a sampled ``prewarm``
trial fills them (``sample_fill``'s rule: as many blocks as the whole file, each smaller,
at least 1 MiB), and one span in the command's own 16 MiB blocks. Each span's time scaled
to the file's bytes, over the whole fill's in the same round (the whole fill's place in
the round rotates): medians over the rounds (1.00x: a sample's fill predicts the whole
one).

Run (root, FUSE): ``.venv/bin/python benchmarks/bench_prewarm_sample.py [--size 256MiB]
[--rounds 3]``
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from loadscope.base.units import parse_size
from loadscope.loaders.pagefill import WARM_BLOCK_BYTES, WARM_THREADS, FillRange, PageFill
from loadscope.loaders.strategies.prewarm import MIN_SAMPLE_BLOCK
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize

#: (label, share of the file, where it starts as a share, scaled blocks?)
SPANS = (
    ("a quarter from the start", 0.25, 0.0, True),
    ("a quarter from the middle", 0.25, 0.5, True),
    ("a tenth from 40% in", 0.10, 0.4, True),
    ("a quarter in 16 MiB blocks", 0.25, 0.25, False),
)


def _fill(path: str, start: int, end: int, block: int) -> float:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3")
    began = time.perf_counter()
    PageFill([FillRange(path, start, end)], threads=WARM_THREADS, block_bytes=block).run()
    return time.perf_counter() - began


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="256MiB")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if (why := fuse_unavailable_reason()) is not None:
        print(f"needs the emulated disk: {why}", file=sys.stderr)
        return 2
    settings = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
    ratios: dict[str, list[float]] = {label: [] for label, *_ in SPANS}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        src = synthesize(Path(tmp) / "src", parse_size(args.size), seed=37)
        with emulated_disk(src.root, Path(tmp) / "mnt", settings) as disk:
            path = str(Path(disk.path) / "model.safetensors")
            total = os.path.getsize(path)
            blocks = -(-total // WARM_BLOCK_BYTES)
            for r in range(args.rounds):
                # The whole fill's place in the round rotates: the order moved the
                # ratios by ~15% (a fill right after the whole one ran slower).
                times: dict[str, float] = {}
                order = [("whole", 1.0, 0.0, False), *SPANS]
                order = order[r % len(order) :] + order[: r % len(order)]
                for label, share, at, scaled in order:
                    n = int(total * share) // 4096 * 4096
                    start = int(total * at) // 4096 * 4096
                    block = WARM_BLOCK_BYTES
                    if scaled:
                        per_block = math.ceil(math.ceil(n / blocks) / 4096) * 4096
                        block = min(WARM_BLOCK_BYTES, max(MIN_SAMPLE_BLOCK, per_block))
                    times[label] = _fill(path, start, start + n, block) / n
                for label, got in ratios.items():
                    got.append(times[label] / times["whole"])
    print(f"{args.size}, {args.rounds} rounds: a span's fill per byte over the whole file's")
    for label, got in ratios.items():
        print(f"  {label}: {statistics.median(got):.2f}x ({min(got):.2f}-{max(got):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
