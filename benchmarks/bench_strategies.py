"""Every loader strategy, cold and warm, on local disk beside ``dd`` and on the emulated slow disk.

One interleaved run per storage: each round runs ``dd iflag=direct bs=16M`` (the
raw disk limit, local only) and then every strategy once cold and once warm
through ``loadscope bench`` (fresh worker per trial, verified cache state,
digests checked); medians over the rounds. Then it checks the targets for
``auto``:

* cold on local disk >= 90% of the dd figure;
* warm >= 1.0x ``load_file`` (mmap);
* on the emulated disk at 5 ms (readahead 128 KiB) >= 15x ``load_file`` and
  >= 1.5x the best installed peer.

Prints Markdown tables for ``benchmarks/RESULTS.md``; exit 1 when a target is missed.
Run: ``.venv/bin/python benchmarks/bench_strategies.py [--rounds 3] [--size 1GiB]``
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from loadscope.base.units import format_rate, parse_size
from loadscope.engine.bench import BenchOptions, Trial, run_bench
from loadscope.model.targets import resolve
from loadscope.probes.pagecache import ColdCache
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize

PEERS = ("fastsafetensors", "runai")


def dd_direct(path: Path) -> float:
    ColdCache().evict(path)
    proc = subprocess.run(
        ["dd", f"if={path}", "of=/dev/null", "bs=16M", "iflag=direct"],
        capture_output=True,
        text=True,
        check=True,
    )
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", proc.stderr)
    assert m, proc.stderr
    return int(m.group(1)) / float(m.group(2))


def rounds(
    model: Path, n: int, *, with_dd: bool
) -> tuple[dict[tuple[str, str], list[Trial]], list[float]]:
    trials: dict[tuple[str, str], list[Trial]] = defaultdict(list)
    dd: list[float] = []
    target = resolve(str(model))
    for _ in range(n):
        if with_dd:
            dd.append(dd_direct(target.files[0].path))
        report = run_bench(target, BenchOptions(cache=("cold", "warm"), repeats=1, warmup=False))
        for t in report.trials:
            trials[(t.strategy, t.cache)].append(t)
    return trials, dd


Key = tuple[str, str]


def table(
    trials: dict[Key, list[Trial]], dd: list[float]
) -> tuple[list[str], dict[Key, float], dict[Key, float]]:
    """Markdown rows, median bytes/s and median seconds per (strategy, cache)."""
    med: dict[tuple[str, str], float] = {}
    rate: dict[tuple[str, str], float] = {}
    for key, ts in trials.items():
        ok = [t for t in ts if t.status == "ok" and t.cache_verified and t.seconds]
        if ok:
            med[key] = statistics.median(t.seconds for t in ok if t.seconds)
            rate[key] = statistics.median(t.bytes_per_s for t in ok if t.bytes_per_s)
    lines = [
        "| strategy | cold s | cold rate | cold x mmap | warm s | warm x mmap |",
        "|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(k[0] for k in trials):
        cells = []
        for cache in ("cold", "warm"):
            key = (name, cache)
            if key not in med:
                reason = next(
                    (t.reason for t in trials.get(key, []) if t.reason), "no verified trial"
                )
                cells.append(f"failed: {reason}" if cache == "cold" else "-")
                continue
            x = med[("mmap", cache)] / med[key] if ("mmap", cache) in med else float("nan")
            if cache == "cold":
                cells += [f"{med[key]:.3g}", format_rate(rate[key]), f"{x:.2f}x"]
            else:
                cells += [f"{med[key]:.3g}", f"{x:.2f}x"]
        while len(cells) < 5:
            cells.append("-")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    if dd:
        lines.append(f"| `dd iflag=direct bs=16M` | | {format_rate(statistics.median(dd))} | | | |")
    return lines, rate, med


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="1GiB", help="local model size (default 1GiB)")
    parser.add_argument("--emulated-size", default="256MiB")
    args = parser.parse_args()
    verdicts: list[tuple[str, bool, str]] = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        work = Path(tmp)
        local = synthesize(work / "local", parse_size(args.size), seed=1)
        trials, dd = rounds(local.root, args.rounds, with_dd=True)
        lines, rate, secs = table(trials, dd)
        print(f"## local disk, {args.size}, {args.rounds} interleaved rounds\n")
        print("\n".join(lines) + "\n", flush=True)
        dd_rate = statistics.median(dd)
        auto_cold = rate.get(("auto", "cold"), 0.0)
        verdicts.append(
            (
                "auto cold >= 90% of dd",
                auto_cold >= 0.9 * dd_rate,
                f"{auto_cold / dd_rate:.0%} of dd",
            )
        )
        if ("auto", "warm") in secs and ("mmap", "warm") in secs:
            x = secs[("mmap", "warm")] / secs[("auto", "warm")]
            verdicts.append(("auto warm >= 1.0x mmap", x >= 1.0, f"{x:.2f}x"))
        reason = fuse_unavailable_reason()
        if reason:
            print(f"emulated disk skipped: {reason}")
        else:
            src = synthesize(work / "slow-src", parse_size(args.emulated_size), seed=2)
            settings = EmulatorSettings(latency_s=0.005, jitter_s=0.0005, readahead_kb=128)
            with emulated_disk(src.root, work / "slow", settings) as disk:
                trials, _ = rounds(disk.path, args.rounds, with_dd=False)
            lines, _, secs = table(trials, [])
            print(f"## emulated slow disk, 5 ms, readahead 128 KiB, {args.emulated_size}\n")
            print("\n".join(lines) + "\n", flush=True)
            auto_s, mmap_s = secs.get(("auto", "cold")), secs.get(("mmap", "cold"))
            if auto_s and mmap_s:
                verdicts.append(
                    ("auto >= 15x mmap at 5 ms", mmap_s / auto_s >= 15, f"{mmap_s / auto_s:.1f}x")
                )
            peers = [secs[(p, "cold")] for p in PEERS if (p, "cold") in secs]
            if auto_s and peers:
                x = min(peers) / auto_s
                verdicts.append(("auto >= 1.5x best peer at 5 ms", x >= 1.5, f"{x:.2f}x"))
    print("## targets\n")
    for name, ok, value in verdicts:
        print(f"- {name}: {value} — {'met' if ok else 'MISSED'}")
    return 0 if all(ok for _, ok, _ in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
