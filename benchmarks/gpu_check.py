"""GPU loading on a lent GPU machine, in under 5 minutes: probe, H2D ceiling, every GPU strategy.

1. the GPU probe (sysfs PCIe links, nvidia-smi) — printed as found;
2. the measured host-to-device ceiling (``python -m loadscope.loaders.h2d``: pinned and
   pageable copies of a 256 MiB buffer, median of 5);
3. every GPU strategy (``mmap-cuda``, ``api-cuda`` — ``loadscope.load_file(p,
   device="cuda")``, the staged path users call —, ``read-to-cuda``, ``staged``, ``gds`` when kvikio
   is installed) through ``loadscope bench --device cuda`` on a synthetic checkpoint of
   a few GB, cold and warm, a warm-up round then ``--repeats`` rounds, interleaved, fresh
   worker per trial, every tensor checked against a reference read.

Prints Markdown tables (GB/s is decimal, 1e9 bytes/s) for ``benchmarks/RESULTS.md`` and
checks the targets:

* ``staged`` warm >= 80% of the pinned H2D ceiling, and ``api-cuda`` too;
* ``staged`` faster than ``mmap-cuda``, cold and warm;
* every trial that ran returned the reference tensors.

Exit codes (:class:`CheckExit`): 0 every target met, 1 a target missed, 2 no GPU here
(the reason is printed as "no GPU here: <reason>"; nothing is measured or invented).
Run: ``.venv/bin/python benchmarks/gpu_check.py [--size 4GiB] [--repeats 2] [--device cuda]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from enum import IntEnum
from pathlib import Path
from typing import Any

from loadscope.base.units import format_bytes, parse_size
from loadscope.engine.bench import (
    BenchError,
    BenchEvent,
    BenchOptions,
    BenchReport,
    TrialFinished,
    run_bench,
)
from loadscope.model.targets import resolve
from loadscope.probes.gpu import probe_gpus
from loadscope.tools.synth import synthesize

GPU_STRATEGIES = ("mmap-cuda", "api-cuda", "read-to-cuda", "staged", "gds")
STAGED_SHARE_OF_PINNED = 0.80


class CheckExit(IntEnum):
    MET = 0
    MISSED = 1
    NO_GPU = 2


def gbps(bytes_per_s: float | None) -> str:
    return "-" if bytes_per_s is None else f"{bytes_per_s / 1e9:.2f}"


def h2d_ceiling(device: str) -> dict[str, Any]:
    """The H2D program's answer, run in its own process (the parent never imports torch)."""
    proc = subprocess.run(
        [sys.executable, "-m", "loadscope.loaders.h2d", "--device", device],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if not lines:
        tail = proc.stderr.strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return {"status": "error", "reason": f"the H2D program printed nothing: {tail[0]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def print_probe() -> None:
    result = probe_gpus()
    print("## GPU probe\n")
    if not result.ok or result.data is None:
        print(f"- {result.status.value}: {result.reason}\n")
        return
    facts = result.data
    print("| PCI address | link now | link max | degraded | NUMA |")
    print("|---|---|---|---|---|")
    for g in facts.pci:
        now, top = g.current_link, g.max_link
        print(
            f"| {g.address} | {now.speed or '?'} x{now.width or '?'} | {top.speed or '?'}"
            f" x{top.width or '?'} | {g.link_degraded} | {g.numa_node} |"
        )
    print(f"\nnvidia-smi: {facts.smi_note}")
    for s in facts.smi:
        memory = format_bytes(s.memory_total_bytes) if s.memory_total_bytes else "?"
        print(f"- GPU {s.index}: {s.name}, {memory}, PCIe gen {s.pcie_generation} x{s.pcie_width}")
    print()


def progress(event: BenchEvent) -> None:
    if isinstance(event, TrialFinished):
        t = event.trial
        what = "warm-up" if t.warmup else f"round {t.repeat}"
        rate = gbps(t.bytes_per_s) + " GB/s" if t.status == "ok" else f"{t.status}: {t.reason}"
        print(f"  #{t.id} {t.strategy} {t.cache} {what}: {rate}", file=sys.stderr, flush=True)


def table(report: BenchReport, pinned: float) -> tuple[list[str], dict[tuple[str, str], float]]:
    """Markdown rows and the median GB/s per (strategy, cache) of verified steady trials."""
    rate: dict[tuple[str, str], float] = {}
    secs: dict[tuple[str, str], float] = {}
    for s in report.summary:
        if s.median_bytes_per_s and s.median_seconds:
            rate[(s.strategy, s.cache)] = s.median_bytes_per_s
            secs[(s.strategy, s.cache)] = s.median_seconds
    lines = [
        "| strategy | cold GB/s | warm GB/s | warm % of pinned H2D | warm x mmap-cuda |"
        " peak host staging | slot wait (warm) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in GPU_STRATEGIES:
        if name in report.skipped:
            lines.append(f"| `{name}` | skipped: {report.skipped[name]} | | | | | |")
            continue
        trials = [t for t in report.trials if t.strategy == name]
        if not trials:
            continue
        cells = []
        for cache in ("cold", "warm"):
            if (name, cache) in rate:
                cells.append(gbps(rate[(name, cache)]))
            else:
                why = next((t.reason for t in trials if t.cache == cache and t.reason), None)
                cells.append(f"failed: {why}" if why else "no verified trial")
        warm = rate.get((name, "warm"))
        cells.append(f"{warm / pinned:.0%}" if warm else "-")
        base = secs.get(("mmap-cuda", "warm"))
        mine = secs.get((name, "warm"))
        cells.append(f"{base / mine:.2f}x" if base and mine else "-")
        example = next(
            (t for t in trials if t.status == "ok" and t.cache == "warm" and not t.warmup), None
        )
        detail = example.detail if example else {}
        staging = detail.get("peak_staging_host_bytes")
        cells.append(format_bytes(staging) if staging else "-")
        wait = detail.get("slot_wait_s")
        cells.append(f"{wait:.3f} s" if wait is not None else "-")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    lines.append(f"| pinned H2D ceiling (`loaders/h2d.py`) | | {gbps(pinned)} | 100% | | | |")
    return lines, rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda or cuda:N (default cuda)")
    parser.add_argument("--size", default="4GiB", help="synthetic checkpoint size (default 4GiB)")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="rounds after the warm-up")
    parser.add_argument("--budget-s", type=float, default=270.0, help="hard end for the trials")
    parser.add_argument("--workdir", default="/var/tmp", help="where the checkpoint is written")
    args = parser.parse_args()
    t_start = time.monotonic()
    print_probe()
    ceiling = h2d_ceiling(args.device)
    if ceiling.get("status") != "ok":
        print(f"no GPU here: {ceiling.get('reason')}")
        return CheckExit.NO_GPU
    pinned = float(ceiling["pinned_bytes_per_s"])
    print(f"## host-to-device ceiling, {ceiling['name']} ({ceiling['device']})\n")
    print(
        f"- pinned: {gbps(pinned)} GB/s, pageable: {gbps(ceiling['pageable_bytes_per_s'])} GB/s"
        f" ({format_bytes(ceiling['buffer_bytes'])} buffer, median of {ceiling['repeats']};"
        f" torch {ceiling['torch']}, CUDA {ceiling['cuda']})\n",
        flush=True,
    )
    verdicts: list[tuple[str, bool, str]] = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        ckpt = synthesize(Path(tmp) / "model", parse_size(args.size), shards=args.shards, seed=1)
        target = resolve(str(ckpt.root))
        options = BenchOptions(
            device=args.device,
            cache=("cold", "warm"),
            repeats=args.repeats,
            warmup=True,
            trial_timeout_s=120.0,
            deadline=t_start + args.budget_s,
        )
        try:
            report = run_bench(target, options, listener=progress)
        except BenchError as exc:
            print(f"bench could not run: {exc}")
            return CheckExit.MISSED
    lines, rate = table(report, pinned)
    print(
        f"## GPU strategies, {args.size} synthetic checkpoint in {args.shards} shard(s),"
        f" warm-up + {args.repeats} interleaved rounds, {args.device}\n"
    )
    print("\n".join(lines) + "\n")
    for note in report.notes:
        print(f"- note: {note}")
    unverified = [t for t in report.trials if t.status == "ok" and t.cache_verified is False]
    if unverified:
        print(f"- {len(unverified)} trial(s) had an unverified cache state (kept out of medians)")
    ran = [t for t in report.trials if t.status != "skipped"]
    wrong = [t for t in ran if t.status != "ok" or t.verified is not True]
    verdicts.append(
        (
            "every trial returned the reference tensors",
            bool(ran) and not wrong,
            f"{len(ran) - len(wrong)} of {len(ran)}"
            + (
                f"; first failure: #{wrong[0].id} {wrong[0].strategy}: {wrong[0].reason}"
                if wrong
                else ""
            ),
        )
    )
    staged_warm = rate.get(("staged", "warm"))
    verdicts.append(
        (
            f"staged warm >= {STAGED_SHARE_OF_PINNED:.0%} of the pinned H2D ceiling",
            staged_warm is not None and staged_warm >= STAGED_SHARE_OF_PINNED * pinned,
            f"{staged_warm / pinned:.0%} ({gbps(staged_warm)} of {gbps(pinned)} GB/s)"
            if staged_warm
            else "no verified staged warm trial",
        )
    )
    api_warm = rate.get(("api-cuda", "warm"))
    verdicts.append(
        (
            "loadscope.load_file(device='cuda') (api-cuda) warm >= 80% of the pinned ceiling",
            api_warm is not None and api_warm >= STAGED_SHARE_OF_PINNED * pinned,
            f"{api_warm / pinned:.0%} ({gbps(api_warm)} of {gbps(pinned)} GB/s)"
            if api_warm
            else "no verified api-cuda warm trial",
        )
    )
    for cache in ("cold", "warm"):
        mine, base = rate.get(("staged", cache)), rate.get(("mmap-cuda", cache))
        verdicts.append(
            (
                f"staged faster than mmap-cuda, {cache}",
                mine is not None and base is not None and mine > base,
                f"{mine / base:.2f}x" if mine and base else "a verified trial is missing",
            )
        )
    print("\n## targets\n")
    for name, ok, value in verdicts:
        print(f"- {name}: {value} — {'met' if ok else 'MISSED'}")
    print(f"\n(total {time.monotonic() - t_start:.0f} s)")
    return CheckExit.MET if all(ok for _, ok, _ in verdicts) else CheckExit.MISSED


if __name__ == "__main__":
    sys.exit(main())
