"""``parallel``'s reads into private against shared memory, whole model, cold.

The 2 GiB, 4-shard synthetic model served by the emulated FUSE disk (5 ms, readahead
128 KiB): every shard read with ``parallel``'s own reader (8 threads x 16 MiB buffered
``pread``) into the buffer it allocates, once as private memory (``base.memory``, what
it uses) and once as ``mmap.mmap(-1, n)`` (shared, what it used before 2026-12-05);
in-process, rounds interleaved, order swapped every round, every shard evicted and
verified cold first. Medians and the ratio shared / private.
Run: ``.venv/bin/python benchmarks/bench_parallel_memory.py [--rounds 4]``
"""

from __future__ import annotations

import mmap
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_args import emulated_parser

from loadscope.base.memory import fresh_memory
from loadscope.loaders import parallelread as parallel
from loadscope.loaders.strategy import FileRequest
from loadscope.model.targets import resolve
from loadscope.probes.pagecache import ColdCache
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize


def _shared(nbytes: int, *, huge_pages: bool = False) -> mmap.mmap:
    return mmap.mmap(-1, nbytes)


KINDS = {"private": fresh_memory, "shared": _shared}


def main() -> int:
    args = emulated_parser(__doc__, rounds=4, size="2GiB").parse_args()
    if (why := fuse_unavailable_reason()) is not None:
        sys.exit(f"the emulated disk is unavailable: {why}")
    times: dict[str, list[float]] = {k: [] for k in KINDS}
    slow = EmulatorSettings(latency_s=args.latency_ms / 1e3, jitter_s=0.0, readahead_kb=128)
    with tempfile.TemporaryDirectory(prefix="bench-parmem-", dir="/var/tmp") as tmp:
        src = synthesize(Path(tmp) / "src", args.size, shards=4, seed=23).root
        with emulated_disk(src, Path(tmp) / "mnt", slow) as disk:
            files = resolve(str(disk.path)).files
            for r in range(args.rounds):
                for kind in KINDS if r % 2 == 0 else list(KINDS)[::-1]:
                    for f in files:
                        ev = ColdCache().evict(str(f.path))
                        if not ev.verified:
                            sys.exit(f"{f.path}: not verified cold ({ev.note})")
                    parallel.fresh_memory = KINDS[kind]  # type: ignore[assignment]
                    t0 = time.perf_counter()
                    held = []
                    for f in files:
                        req = FileRequest(str(f.path), f.size_bytes, "safetensors")
                        held.extend(
                            parallel.read_file_parallel(req, threads=8, block_bytes=16 << 20)
                        )
                    times[kind].append(time.perf_counter() - t0)
                    del held
    parallel.fresh_memory = fresh_memory  # type: ignore[assignment]
    print("| memory | median s | rounds |")
    print("|---|---|---|")
    for kind, secs in times.items():
        runs = ", ".join(f"{x:.2f}" for x in secs)
        print(f"| {kind} | {statistics.median(secs):.2f} | {runs} |")
    ratio = statistics.median(times["shared"]) / statistics.median(times["private"])
    print(f"\nshared / private: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
