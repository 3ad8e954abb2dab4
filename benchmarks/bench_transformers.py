"""The user's own load: ``from_pretrained`` cold, against the same load after each fix.

On the emulated slow disk (5 ms per request, readahead 128 KiB) and on the local disk,
one interleaved run: each round times ``AutoModelForCausalLM.from_pretrained(path)``
to a usable CPU model cold (``hf-pretrained``), then cold after ``loadscope warm``
(``hf-prewarm``, the fix that changes no code), then built from its config with
``model.load_state_dict(loadscope.load_model(path))`` (``hf-load-model``), each in a
fresh worker from a verified-cold page cache, every parameter checked against the
checkpoint. The ratios (baseline / fix, > 1 is faster) are taken round by round.

Prints a Markdown table for ``benchmarks/RESULTS.md``.
Run: ``.venv/bin/python benchmarks/bench_transformers.py [--rounds 3] [--size 1GiB]``
"""

from __future__ import annotations

import importlib.util
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

STRATEGIES = ("hf-pretrained", "hf-prewarm", "hf-load-model")


def per_round(model: Path, rounds: int) -> dict[str, list[float]]:
    report = run_bench(
        resolve(str(model)),
        BenchOptions(strategies=STRATEGIES, cache=("cold",), repeats=rounds, warmup=True),
    )
    out: dict[str, list[float]] = {s: [] for s in STRATEGIES}
    for t in report.trials:
        if t.status != "ok":
            sys.exit(f"trial #{t.id} {t.strategy} failed: {t.reason}")
        if not t.warmup and t.cache_verified and t.seconds:
            out[t.strategy].append(t.seconds)
    return out


def rows(storage: str, size: int, times: dict[str, list[float]]) -> list[str]:
    base = times["hf-pretrained"]
    out = []
    for name in STRATEGIES[1:]:
        ratios = [b / t for b, t in zip(base, times[name], strict=False)]
        out.append(
            f"| {storage} | {format_bytes(size)} | {len(ratios)} | {statistics.median(base):.3g}"
            f" | `{name}` {statistics.median(times[name]):.3g}"
            f" | {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )
    return out


def main() -> int:
    if importlib.util.find_spec("transformers") is None:
        print("transformers is not installed (pip install 'loadscope[transformers]')")
        return 1
    ap = emulated_parser(__doc__, rounds=3, size="1GiB")
    args = ap.parse_args()
    lines = [
        "| storage | model | rounds | `hf-pretrained` cold s | fix, cold s"
        " | speed-up, median (min-max) |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-hf-", dir="/var/tmp") as tmp:
        src = synthesize(Path(tmp) / "src", args.size, shards=2, seed=22)
        why = fuse_unavailable_reason()
        if why is None:
            settings = EmulatorSettings(latency_s=args.latency_ms / 1e3, jitter_s=0.0)
            with emulated_disk(src.root, Path(tmp) / "mnt", settings) as disk:
                lines += rows(
                    f"emulated, {args.latency_ms:g} ms",
                    args.size,
                    per_round(disk.path, args.rounds),
                )
        else:
            lines.append(f"| emulated | - | - | - | - | not run: {why} |")
        lines += rows("local disk", args.size, per_round(src.root, args.rounds))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
