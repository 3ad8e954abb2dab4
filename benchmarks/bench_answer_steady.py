"""The answer in each stack, run after run: every route the one-screen answer can print,
its figure over N identical doctor runs and against its own code loaded whole.

On the emulated slow disk (5 ms per request, readahead 128 KiB), for each model size:
``loadscope doctor`` runs N times at one budget as a user runs it (its JSON kept); the
routes each run's answer prints are, per stack, its best measured route that changes
code and its best that changes nothing (``report/brief.py``'s ``best_routes``). Then each
route's code is loaded whole from a verified-cold cache in a fresh process, interleaved
over rounds (``bench_printed_vs_measured.py``'s loads: ``load_file``, the public API,
``loadscope warm`` then ``load_file``, the readahead raised then ``load_file``,
``from_pretrained`` with its weights touched and the model's code imported inside the
clock, the same after ``loadscope warm``, ``loadscope.from_pretrained``; the peers by their
own library's code), and ``load_file`` from a copy on the local disk (/var/tmp).

Per route: in how many answers it was printed; its figure in every run that measured
it (median, range: a run may measure a route its answer does not print), the spread
(largest distance from the median), the whole-load ratio and the median's difference.
Targets (issue 49): every printed figure within 20% of the median of the runs and the
median within 15% of the whole-load ratio; the routes that must carry a number in every
run (:data:`MUST`: the API for safetensors; readahead and warm-first for vLLM, SGLang
and the shell; for transformers, loadscope.from_pretrained, readahead and warm-first).
Exit 1 when missed.

Run (root, FUSE) on an otherwise idle machine (a type check and unit tests beside it
moved two transformers figures by ±40%): ``.venv/bin/python
benchmarks/bench_answer_steady.py [--sizes 256MiB] [--budget 30] [--runs 5] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_printed_vs_measured import _BASELINE, _timed, doctor, whole_loads

from loadscope.base.units import parse_size
from loadscope.report.brief import best_routes
from loadscope.report.content import fixes
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize

STACKS = ("safetensors", "transformers", "vllm", "sglang", "shell")
RUN_SPREAD = 0.20
TO_WHOLE = 0.15
#: What each stack's answer must carry a number for (issue 49), by the trial's name: the
#: public API; readahead and warm-first for vLLM, SGLang and the shell (safetensors has
#: no readahead line: its users load with load_file); for transformers,
#: loadscope.from_pretrained, readahead and warm-first with from_pretrained itself.
MUST = {
    "safetensors": ("api",),
    "vllm": ("readahead", "prewarm"),
    "sglang": ("readahead", "prewarm"),
    "shell": ("readahead", "prewarm"),
    "transformers": ("hf-load-model", "readahead", "hf-prewarm"),
}


def printed(doc: dict[str, Any]) -> dict[tuple[str, str], float]:
    """The figures the answer prints, per (stack, route's trial)."""
    found = fixes(doc)
    out = {}
    for stack in STACKS:
        for _fix, route in best_routes(found, stack):
            if route.speedup is not None:
                out[(stack, route.strategy)] = route.speedup
    return out


def every_figure(doc: dict[str, Any]) -> dict[tuple[str, str], float]:
    """Every route's figure of a report, per (stack, trial): what MUST is checked on."""
    out = {}
    for fix in fixes(doc):
        for route in fix.routes:
            if route.speedup is not None:
                out.setdefault((route.stack, route.strategy), route.speedup)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256MiB")
    ap.add_argument("--budget", type=float, default=30.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if (why := fuse_unavailable_reason()) is not None:
        print(f"needs the emulated disk: {why}", file=sys.stderr)
        return 2
    missed: list[str] = []
    settings = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
    for size in (parse_size(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            src = synthesize(Path(tmp) / "src", size, seed=37)
            with emulated_disk(src.root, Path(tmp) / "mnt", settings) as disk:
                docs, walls = [], []
                for i in range(args.runs):
                    doc, wall = doctor(disk.path, args.budget, Path(tmp) / f"doctor-{i}.json")
                    docs.append(doc)
                    walls.append(wall)
                whole = whole_loads(disk.path, args.rounds)
                copy = Path(tmp) / "local-copy"
                shutil.copytree(src.root, copy)
                whole["copy"] = statistics.median(
                    _timed("load_file", copy, None) for _ in range(args.rounds)
                )
            missed += report(size, args.budget, docs, walls, whole)
    for line in missed:
        print(f"missed: {line}")
    return 1 if missed else 0


def report(
    size: int,
    budget: float,
    docs: list[dict[str, Any]],
    walls: list[float],
    whole: dict[str, float],
) -> list[str]:
    mib = size >> 20
    print(f"\n#### {mib} MiB, emulated disk 5 ms, budget {budget:g} s, {len(docs)} runs\n")
    print(f"doctor took {', '.join(f'{w:.0f}' for w in walls)} s")
    print("whole cold loads, medians: " + ", ".join(f"{r} {s:.3g} s" for r, s in whole.items()))
    print()
    print("| stack | route | printed in | figure, median (range) | spread | whole | diff |")
    print("|---|---|---|---|---|---|---|")
    missed = []
    shown = [printed(d) for d in docs]
    figures = [every_figure(d) for d in docs]
    # The printed routes, and the ones that must carry a number (measured, even where a
    # better route of the stack is printed instead).
    must = {(stack, route) for stack, routes in MUST.items() for route in routes}
    for key in sorted(
        {k for s in shown for k in s} | {k for k in must if any(k in f for f in figures)}
    ):
        stack, route = key
        got = [f[key] for f in figures if key in f]
        med = statistics.median(got)
        spread = max(abs(g / med - 1) for g in got)
        base = _BASELINE.get(route, "load_file")
        truth = whole[base] / whole[route] if route in whole and base in whole else None
        if route == "readahead":
            # transformers' readahead line is from_pretrained's own (against it as is).
            raised = ("hf-pretrained", "hf-readahead") if stack == "transformers" else None
            pair = raised or ("load_file", "readahead")
            truth = whole[pair[0]] / whole[pair[1]] if pair[1] in whole else None
        diff = f"{med / truth - 1:+.0%}" if truth else "-"
        print(
            f"| {stack} | {route} | {sum(key in s for s in shown)}/{len(docs)} |"
            f" {med:.2f}x ({min(got):.2f}-{max(got):.2f}) | ±{spread:.0%} |"
            f" {'-' if truth is None else f'{truth:.2f}x'} | {diff} |"
        )
        if spread > RUN_SPREAD:
            missed.append(f"{mib} MiB {stack} {route}: runs spread ±{spread:.0%}")
        if truth and abs(med / truth - 1) > TO_WHOLE:
            missed.append(f"{mib} MiB {stack} {route}: {diff} from its code loaded whole")
    for stack, routes in MUST.items():
        for route in routes:
            have = sum((stack, route) in f for f in figures)
            if have < len(docs):
                missed.append(f"{mib} MiB {stack} {route}: a number in {have}/{len(docs)} runs")
                for doc, fig in zip(docs, figures, strict=True):
                    if (stack, route) not in fig:
                        print(f"run without {route}: {_why_not(doc, route)}", file=sys.stderr)
    print(json.dumps({"budget": budget, "walls": walls}), file=sys.stderr)
    return missed


def _why_not(doc: dict[str, Any], route: str) -> str:
    """Why a report has no figure for ``route``: skipped, or its trials' statuses."""
    bench = doc.get("bench") or {}
    if route in (bench.get("skipped") or {}):
        return f"skipped: {bench['skipped'][route]}"
    trials = [t for t in bench.get("trials") or [] if t.get("strategy") == route]
    return (
        "; ".join(f"#{t['id']} {t['status']} {t.get('reason') or ''}" for t in trials) or "no trial"
    )


if __name__ == "__main__":
    sys.exit(main())
