"""``loadscope.load_file`` (the public API, the ``api`` strategy) against ``auto``, cold.

The public call must cost what the strategy it fronts costs: the header check, the
residency sample, the choice record and the error mapping are inside its trial.
One interleaved run per storage (local disk; the emulated slow disk at 5 ms,
readahead 128 KiB): each round loads the model cold with ``api`` then ``auto`` in
fresh workers (verified cold, digests checked), and the ratio is taken round by
round, with the order of the two swapped for half the rounds. Target: the median
ratio api/auto <= 1.10 on both storages.

Prints a Markdown table for ``benchmarks/RESULTS.md``; exit 1 when the target is missed.
Run: ``.venv/bin/python benchmarks/bench_api.py [--rounds 5] [--size 1GiB]``
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from bench_args import emulated_parser

from loadscope.base.units import format_bytes
from loadscope.engine.bench import BenchOptions, run_bench
from loadscope.model.targets import resolve
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize

TARGET = 1.10


def paired(model: Path, rounds: int) -> tuple[list[float], list[float]]:
    """Per round: the api and auto cold seconds (the bench interleaves them), half the
    rounds with api first and half with auto first (the first of a round measured up to
    7% slower here, whichever it was)."""
    by: dict[str, list[float]] = {"api": [], "auto": []}
    for order in (("api", "auto"), ("auto", "api")):
        report = run_bench(
            resolve(str(model)),
            BenchOptions(strategies=order, cache=("cold",), repeats=rounds, warmup=True),
        )
        for t in report.trials:
            if t.status == "ok" and not t.warmup and t.cache_verified and t.seconds:
                by[t.strategy].append(t.seconds)
            elif t.status != "ok":
                sys.exit(f"trial #{t.id} {t.strategy} failed: {t.reason}")
    return by["api"], by["auto"]


def row(storage: str, size: int, api: list[float], auto: list[float]) -> tuple[str, float]:
    ratios = [a / b for a, b in zip(api, auto, strict=True)]
    med = statistics.median(ratios)
    line = (
        f"| {storage} | {format_bytes(size)} | {len(ratios) // 2} x2 | {statistics.median(api):.3g}"
        f" | {statistics.median(auto):.3g} | {med:.3f} ({min(ratios):.2f}-{max(ratios):.2f}) |"
    )
    return line, med


def main() -> int:
    ap = emulated_parser(__doc__, rounds=5, size="1GiB")
    args = ap.parse_args()
    lines = [
        "| storage | model | rounds | `api` cold s | `auto` cold s | api/auto, median (min-max) |",
        "|---|---|---|---|---|---|",
    ]
    missed = False
    with tempfile.TemporaryDirectory(prefix="bench-api-", dir="/var/tmp") as tmp:
        src = synthesize(Path(tmp) / "src", args.size, shards=2, seed=21)
        api, auto = paired(src.root, args.rounds)
        line, med = row("local disk", args.size, api, auto)
        lines.append(line)
        missed |= med > TARGET
        why = fuse_unavailable_reason()
        if why is None:
            settings = EmulatorSettings(latency_s=args.latency_ms / 1e3, jitter_s=0.0)
            with emulated_disk(src.root, Path(tmp) / "mnt", settings) as disk:
                api, auto = paired(disk.path, args.rounds)
            line, med = row(f"emulated, {args.latency_ms:g} ms", args.size, api, auto)
            lines.append(line)
            missed |= med > TARGET
        else:
            lines.append(f"| emulated | - | - | - | - | not run: {why} |")
    print("\n".join(lines))
    print(f"\ntarget: api/auto <= {TARGET:.2f} -> {'MISSED' if missed else 'met'}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
