"""``auto`` against the ceiling the probe itself measures, and against the peers.

Per storage regime — the emulated FUSE disk (5 ms, readahead 128 KiB), the emulated
network block volume (ext4 on a loop device over that disk, ``emulate --block``) and
the local disk — on one synthetic model (default 2 GiB, 4 shards):

1. the probe's best parallel-reader throughput on the mount (its ceiling), the probe's
   own into-RAM point (those readers and request size landing in one fresh buffer of up
   to 1 GiB), and the same reads landing the largest shard, cold, in a fresh buffer of
   its size, once per round: the ceiling for any loader that must hold the bytes in RAM;
2. rounds of cold trials, interleaved in one bench run: ``auto`` (its read buffers
   private memory in 4 KiB pages) and the installed peers; ``auto`` with
   ``huge_pages=yes`` (``MADV_HUGEPAGE``) is a second run in the same round (order
   swapped every round);
3. warm: ``auto`` against ``mmap`` (``load_file``) from the page cache.

Ratios, medians over the rounds: auto cold / probe ceiling (target >= 0.9),
auto / best peer on the slow regimes (target >= 1.5), auto warm / mmap warm
(target >= 1.0, time ratio mmap/auto), and the huge-page gain (yes/no).

Prints a Markdown table for ``benchmarks/RESULTS.md``; exit 1 when a target is missed.
Run: ``.venv/bin/python benchmarks/bench_auto_ceiling.py [--size 2GiB] [--rounds 3]``
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench_args import emulated_parser

from loadscope.base.memory import fresh_memory
from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.bench import BenchOptions, BenchReport, run_bench
from loadscope.engine.probing import run_probes
from loadscope.loaders.buffers import o_direct_ok
from loadscope.loaders.parallelread import parallel_read
from loadscope.model.targets import resolve
from loadscope.probes.pagecache import ColdCache
from loadscope.tools.blockemu import block_unavailable_reason, emulated_block_disk
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize

PEERS = [
    n
    for n, mod in (("fastsafetensors", "fastsafetensors"), ("runai", "runai_model_streamer"))
    if importlib.util.find_spec(mod)
]


def _cold(report: BenchReport) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for t in report.trials:
        if t.status != "ok":
            sys.exit(f"trial #{t.id} {t.strategy} {t.cache}: {t.reason}")
        if t.cache_verified and not t.warmup and t.seconds:
            out.setdefault(f"{t.strategy} {t.cache}", []).append(t.seconds)
    return out


def into_ram(path: str, size: int, threads: int, block: int) -> float:
    """Bytes/s of one cold parallel read of ``path`` into a fresh ``size``-byte buffer."""
    ev = ColdCache().evict(path)
    if not ev.verified:
        sys.exit(f"{path}: not verified cold ({ev.note})")
    direct = o_direct_ok(path)
    buf = fresh_memory(size + 4096)
    view = memoryview(buf)
    t0 = time.perf_counter()
    parallel_read(
        path,
        view,
        [(0, size)],
        threads=threads,
        block_bytes=block,
        flags=os.O_DIRECT if direct else 0,
        align=4096 if direct else 1,
    )
    secs = time.perf_counter() - t0
    view.release()
    buf.close()
    return size / secs


def measure(model: Path, rounds: int, slow: bool) -> dict[str, float]:
    target = resolve(str(model))
    probe = run_probes(target, budget_s=30)
    thr = probe.throughput.data
    ceiling = max((p.bytes_per_s for p in thr.parallel), default=0.0) if thr else 0.0
    # The probe's own into-RAM point (one read, up to a quarter of the memory headroom).
    probe_ram = thr.into_ram.bytes_per_s if thr and thr.into_ram else 0.0
    hints = {}
    if thr and thr.parallel:
        best = max(thr.parallel, key=lambda p: p.bytes_per_s)
        hints = {"threads": max(4, best.readers), "block_bytes": best.block_bytes}
    times: dict[str, list[float]] = {}
    biggest = max(target.files, key=lambda f: f.size_bytes)
    ram_rates: list[float] = []
    for r in range(rounds):
        ram_rates.append(
            into_ram(
                str(biggest.path),
                biggest.size_bytes,
                hints.get("threads", 16),
                hints.get("block_bytes", 1 << 20),
            )
        )
        runs = [("auto", {}), ("auto-huge", {"auto": {"huge_pages": "yes"}})]
        for label, knobs in runs if r % 2 == 0 else runs[::-1]:
            names = ("auto", *PEERS) if label == "auto" and slow else ("auto",)
            report = run_bench(
                target,
                BenchOptions(
                    strategies=names,
                    cache=("cold", "warm") if label == "auto" else ("cold",),
                    warm_strategies=("auto",),
                    repeats=1,
                    warmup=False,
                    hints=hints,
                    knobs=knobs,
                ),
            )
            for key, secs in _cold(report).items():
                times.setdefault(key.replace("auto", label, 1), []).extend(secs)
        warm = run_bench(
            target,
            BenchOptions(strategies=("mmap", "auto"), cache=("warm",), repeats=1, warmup=False),
        )
        for key, secs in _cold(warm).items():
            times.setdefault(f"{key} (vs mmap)", []).extend(secs)
    med = {k: statistics.median(v) for k, v in times.items()}
    total = target.total_bytes
    out = {
        "ceiling": ceiling,
        "into_ram": statistics.median(ram_rates),
        "probe_ram": probe_ram,
        "auto": total / med["auto cold"],
        "auto_huge": total / med["auto-huge cold"],
        "warm_x": med["mmap warm (vs mmap)"] / med["auto warm (vs mmap)"],
    }
    peers = [total / med[f"{p} cold"] for p in PEERS if f"{p} cold" in med]
    out["peer"] = max(peers) if peers else 0.0
    return out


def regimes(src: Path, tmp: Path, latency_s: float) -> Iterator[tuple[str, Path, bool]]:
    slow = EmulatorSettings(latency_s=latency_s, jitter_s=0.0, readahead_kb=128)
    yield "local disk", src, False
    if fuse_unavailable_reason() is None:
        with emulated_disk(src, tmp / "fuse", slow) as disk:
            yield f"emulated FUSE, {latency_s * 1e3:g} ms", disk.path, True
    if block_unavailable_reason() is None:
        with emulated_block_disk(src, tmp / "block", slow) as vol:
            yield f"emulated block volume, {latency_s * 1e3:g} ms", vol.path, True


def main() -> int:
    ap = emulated_parser(__doc__, rounds=3, size="2GiB")
    ap.add_argument("--only", default="", help="comma-separated regime prefixes to run")
    args = ap.parse_args()
    lines = [
        "| storage | model | probe ceiling | probe into RAM | into RAM | `auto` cold"
        " | auto / ceiling | auto / probe into RAM | auto / into RAM | 2 MiB pages"
        " | huge-page gain | best peer | auto / peer | warm auto vs mmap |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    missed = False
    # The model on the local disk (its own regime), served from there by the emulators.
    with tempfile.TemporaryDirectory(prefix="bench-ceiling-", dir="/var/tmp") as tmp:
        src = synthesize(Path(tmp) / "src", args.size, shards=4, seed=23).root
        with contextlib.closing(regimes(src, Path(tmp), args.latency_ms / 1e3)) as gen:
            for name, path, slow in gen:
                if args.only and not any(name.startswith(p) for p in args.only.split(",")):
                    continue
                print(f"{name} ...", file=sys.stderr)
                m = measure(path, args.rounds, slow)
                vs_ceiling = m["auto"] / m["ceiling"] if m["ceiling"] else 0.0
                vs_peer = m["auto"] / m["peer"] if m["peer"] else 0.0
                vs_probe_ram = m["auto"] / m["probe_ram"] if m["probe_ram"] else 0.0
                missed |= vs_ceiling < 0.9 or m["warm_x"] < 1.0 or (slow and 0 < vs_peer < 1.5)
                lines.append(
                    f"| {name} | {format_bytes(args.size)} | {format_rate(m['ceiling'])}"
                    f" | {format_rate(m['probe_ram']) if m['probe_ram'] else '-'}"
                    f" | {format_rate(m['into_ram'])} | {format_rate(m['auto'])}"
                    f" | {vs_ceiling:.2f}x"
                    f" | {f'{vs_probe_ram:.2f}x' if vs_probe_ram else '-'}"
                    f" | {m['auto'] / m['into_ram']:.2f}x | {format_rate(m['auto_huge'])}"
                    f" | {m['auto_huge'] / m['auto']:.2f}x"
                    f" | {format_rate(m['peer']) if m['peer'] else '-'}"
                    f" | {f'{vs_peer:.2f}x' if vs_peer else '-'} | {m['warm_x']:.2f}x |"
                )
                print("\n".join(lines), file=sys.stderr)
        shutil.rmtree(src, ignore_errors=True)
    print("\n".join(lines))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
