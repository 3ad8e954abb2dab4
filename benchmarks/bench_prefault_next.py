"""``auto``'s shards read one after another into fresh buffers, against the same with the
next shard's buffer faulted in by a thread while the current shard is read.

A model of 4 shards (default 2 GiB) served by the emulated FUSE disk (5 ms, readahead
128 KiB); each shard read cold with 16 readers x 1 MiB, O_DIRECT, into a fresh
private buffer of its size (what ``auto`` does per file). ``pipelined`` touches
one byte per 4 KiB of shard k+1's buffer from a second thread while shard k is read,
taking the first touch of fresh memory off the readers' path. Rounds interleave the two
(order swapped every round); every shard is evicted and verified cold first. Medians and
the per-round ratio.

Run: ``.venv/bin/python benchmarks/bench_prefault_next.py [--rounds 4] [--size 2GiB]``
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from loadscope.base.memory import fresh_memory
from loadscope.base.units import parse_size
from loadscope.loaders.parallelread import parallel_read
from loadscope.probes.pagecache import ColdCache
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize

READERS, BLOCK = 16, 1 << 20


def _touch(buf: mmap.mmap, size: int) -> None:
    import torch

    torch.frombuffer(buf, dtype=torch.uint8, count=size)[::4096].zero_()


def _read_all(shards: list[Path], pipelined: bool) -> float:
    """Bytes per second for reading every shard into a fresh buffer of its own."""
    sizes = [s.stat().st_size // 4096 * 4096 for s in shards]
    kept: list[mmap.mmap] = []
    t0 = time.perf_counter()
    nxt = fresh_memory(sizes[0] + 4096)
    for i, (shard, size) in enumerate(zip(shards, sizes, strict=True)):
        buf, helper = nxt, None
        if i + 1 < len(shards):
            nxt = fresh_memory(sizes[i + 1] + 4096)
            if pipelined:
                helper = threading.Thread(target=_touch, args=(nxt, sizes[i + 1]))
                helper.start()
        view = memoryview(buf)
        parallel_read(
            str(shard), view, [(0, size)], threads=READERS, block_bytes=BLOCK,
            flags=os.O_DIRECT, align=4096,
        )  # fmt: skip
        view.release()
        if helper is not None:
            helper.join()
        kept.append(buf)
    secs = time.perf_counter() - t0
    for b in kept:
        b.close()
    return sum(sizes) / secs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--size", default="2GiB")
    args = ap.parse_args()
    if (why := fuse_unavailable_reason()) is not None:
        sys.exit(f"the emulated disk is unavailable: {why}")
    rates: dict[str, list[float]] = {"serial": [], "pipelined": []}
    slow = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
    with tempfile.TemporaryDirectory(prefix="bench-prefault-", dir="/var/tmp") as tmp:
        src = synthesize(Path(tmp) / "src", parse_size(args.size), shards=4, seed=23).root
        with emulated_disk(src, Path(tmp) / "mnt", slow) as disk:
            shards = sorted(Path(disk.path).glob("*.safetensors"))
            for r in range(args.rounds):
                for v in ("serial", "pipelined") if r % 2 == 0 else ("pipelined", "serial"):
                    for s in shards:
                        if not ColdCache().evict(str(s)).verified:
                            sys.exit(f"{s}: not verified cold")
                    rates[v].append(_read_all(shards, v == "pipelined"))
    pairs = [p / s for p, s in zip(rates["pipelined"], rates["serial"], strict=True)]
    print("| variant | median | rounds |")
    print("|---|---|---|")
    for v, xs in rates.items():
        runs = ", ".join(f"{x / 1e9:.2f}" for x in xs)
        print(f"| {v} | {statistics.median(xs) / 1e9:.2f} GB/s | {runs} |")
    print(f"\npipelined / serial per round: {', '.join(f'{x:.2f}' for x in pairs)}"
          f" (median {statistics.median(pairs):.2f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
