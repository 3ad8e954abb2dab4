"""The three readahead regimes of a network disk, measured on the emulated slow disk.

Which loader wins depends on the storage, not on folklore: this runs mmap
``load_file``, the "full read" fix (``load(open().read())``) and deep-parallel
O_DIRECT reads, each in a fresh process from a verified-cold page cache,
interleaved, and reports medians and ratios to mmap for:

* readahead 0 — page-by-page faults (the Lustre/NFS pathology);
* readahead 128 KiB, 12 background requests — the FUSE default;
* readahead 8 MiB, 64 background requests — a tuned mount.

It also measures the emulator's own overhead at 0 ms (MB/s through it vs the
source). Needs root and FUSE. Prints Markdown for ``benchmarks/RESULTS.md``.

Run: ``.venv/bin/python benchmarks/bench_emulated_regimes.py [--repeats 3]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from loadscope.base.units import format_bytes
from loadscope.probes.pagecache import ColdCache
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize

# Each strategy runs in a fresh interpreter and prints the seconds of the load itself
# (imports excluded), touching every tensor so that lazy mmap pages are really read.
CHILD = r"""
import os, sys, threading, time, mmap
path, strategy = sys.argv[1], sys.argv[2]
from safetensors.torch import load, load_file
t0 = time.perf_counter()
if strategy == "mmap":
    tensors = load_file(path)
    for t in tensors.values():
        t.clone()
elif strategy == "fullread":
    with open(path, "rb") as fh:
        tensors = load(fh.read())
elif strategy == "odirect-8x16M":
    size = os.path.getsize(path)
    block = 16 << 20
    buf = mmap.mmap(-1, (size + block - 1) // block * block)
    view = memoryview(buf)
    nxt = iter(range(0, size, block))
    lock = threading.Lock()
    def worker():
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        try:
            while True:
                with lock:
                    off = next(nxt, None)
                if off is None:
                    return
                os.preadv(fd, [view[off:off + block]], off)
        finally:
            os.close(fd)
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
elif strategy == "readinto-16M":
    # Raw buffered sequential I/O, no tensors: what the storage path itself delivers.
    buf = bytearray(16 << 20)
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass
else:
    raise SystemExit(f"unknown strategy {strategy}")
print(time.perf_counter() - t0)
"""

STRATEGIES = ("mmap", "fullread", "odirect-8x16M")
#: Raw I/O strategies used to measure the emulator's own overhead.
RAW = ("readinto-16M", "odirect-8x16M")


@dataclass(frozen=True)
class Regime:
    name: str
    settings: EmulatorSettings
    size_bytes: int


REGIMES = (
    Regime(
        "readahead 0 (page-by-page faults), 1 ms",
        EmulatorSettings(latency_s=0.001, jitter_s=0.0, readahead_kb=0, max_background=12),
        64 << 20,
    ),
    Regime(
        "readahead 128 KiB, 12 background (FUSE default), 5 ms",
        EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128, max_background=12),
        256 << 20,
    ),
    Regime(
        "readahead 8 MiB, 64 background (tuned), 5 ms",
        EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=8192, max_background=64),
        256 << 20,
    ),
)


def run_child(path: Path, strategy: str, *, also_evict: Path | None = None) -> float:
    for p in (path, also_evict):
        if p is None:
            continue
        ev = ColdCache().evict(p)
        if not ev.verified:
            raise SystemExit(f"could not make {p} cold: {ev.note}")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), strategy],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{strategy} failed: {proc.stderr.strip()[-500:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def measure(path: Path, repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    for _ in range(repeats):  # interleaved: each round runs every strategy once
        for strategy in STRATEGIES:
            times[strategy].append(run_child(path, strategy))
    return {s: statistics.median(v) for s, v in times.items()}


def overhead(src: Path, work: Path, repeats: int) -> dict[str, tuple[float, float]]:
    """Raw read MB/s (no tensors) from the source and through the emulator at 0 ms latency."""
    settings = EmulatorSettings(latency_s=0.0, jitter_s=0.0, readahead_kb=8192, max_background=64)
    out: dict[str, tuple[list[float], list[float]]] = {s: ([], []) for s in RAW}
    with emulated_disk(src.parent, work / "mnt0", settings) as disk:
        mounted = disk.path / src.name
        for _ in range(repeats):
            for strategy in RAW:
                for target, series in zip((src, mounted), out[strategy], strict=True):
                    # Through the emulator, the source file underneath must be cold too.
                    seconds = run_child(target, strategy, also_evict=src)
                    series.append(src.stat().st_size / seconds)
    return {s: (statistics.median(a), statistics.median(b)) for s, (a, b) in out.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only-overhead", action="store_true", help="skip the regimes")
    args = parser.parse_args()
    reason = fuse_unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        work = Path(tmp)
        lines = [
            "| regime | model | " + " | ".join(f"`{s}` s (x mmap)" for s in STRATEGIES) + " |",
            "|---|---|" + "---|" * len(STRATEGIES),
        ]
        for i, regime in enumerate(() if args.only_overhead else REGIMES):
            src = synthesize(work / f"src{i}", regime.size_bytes, seed=i)
            with emulated_disk(src.root, work / f"mnt{i}", regime.settings) as disk:
                medians = measure(disk.path / "model.safetensors", args.repeats)
            base = medians["mmap"]
            cells = [f"{medians[s]:.3g} ({medians[s] / base:.3g}x)" for s in STRATEGIES]
            lines.append(
                f"| {regime.name} | {format_bytes(regime.size_bytes)} | " + " | ".join(cells) + " |"
            )
            print(lines[-1], flush=True)
        src = synthesize(work / "overhead", 256 << 20, seed=9).files[0]
        raw = overhead(src, work, args.repeats)
    print()
    print("\n".join(lines))
    print()
    print("emulator overhead at 0 ms latency (raw reads of 256 MiB, cold, readahead 8 MiB):")
    for strategy, (direct, through) in raw.items():
        print(
            f"- `{strategy}`: source {direct / 1e6:.0f} MB/s, through the emulator"
            f" {through / 1e6:.0f} MB/s ({through / direct:.2f}x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
