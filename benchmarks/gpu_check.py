"""GPU loading on a lent GPU machine, in about 4 minutes: one table for issue 38.

1. the GPU probe (sysfs PCIe links, nvidia-smi), printed as found;
2. the measured host-to-device ceiling (``python -m loadscope.loaders.h2d``: pinned and
   pageable copies of a 256 MiB buffer, median of 5);
3. every GPU strategy on safetensors through ``bench --device cuda`` (``mmap-cuda``:
   safetensors' ``load_file(device="cuda:N")``; ``api-cuda``: ``loadscope.load_file(p,
   device="cuda")``, the staged path users call; ``read-to-cuda``; ``staged``; ``gds``
   when kvikio is installed; the peers' GPU modes ``fastsafetensors-cuda``,
   ``fastsafetensors-gds``, ``runai-cuda`` when installed), cold and warm, a warm-up
   round then ``--repeats`` rounds, interleaved, a fresh worker per trial, every tensor
   checked against a reference read;
4. ``torch.load(map_location="cuda:N")`` (``pickle-cuda``) on the same model saved as a
   torch checkpoint, cold and warm;
5. an NCCL broadcast round (``bench --ranks N --device cuda``) when the machine has two
   GPUs or more (NCCL refuses two ranks on one device: one GPU says "not run");
6. the doctor's GPU plan end to end (``loadscope doctor --device cuda``) on a 1 GiB
   synthetic model: its verdict, its GPU trials, and each GPU snippet's trial.

Prints Markdown for ``benchmarks/RESULTS.md`` (GB/s is decimal, 1e9 bytes/s) and checks:

* ``staged`` warm >= 80% of the pinned H2D ceiling, and ``api-cuda`` too;
* ``staged`` faster than ``mmap-cuda``, cold and warm;
* every trial that ran returned the reference tensors;
* the doctor ran GPU trials, and every GPU snippet with a number names its own trial.

Exit codes (:class:`CheckExit`): 0 every target met, 1 a target missed, 2 no GPU here
(the reason is printed as "no GPU here: <reason>"; nothing is measured or invented).

The machine starts bare, reaches nothing outside and has no FUSE (nothing here needs a
mount). Its python3 (3.12) holds torch and safetensors; ``benchmarks/gpu_wheels.sh``
puts the rest in ``.whl/`` here (loadscope's own wheel, jsonschema and its helpers,
python-hostlist, fastsafetensors, runai-model-streamer: about 4.5 MB). Then, carrying
``.whl``::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 &&
    python3 benchmarks/gpu_check.py

Here: ``.venv/bin/python benchmarks/gpu_check.py [--size 2GiB] [--repeats 1]
[--device cuda]`` (exit 2 without a GPU, after the parts that need none).
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
    GPU_STRATEGIES,
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


Verdict = tuple[str, bool, str]


def bench_section(root: Path, options: BenchOptions) -> tuple[BenchReport | None, str | None]:
    try:
        return run_bench(resolve(str(root)), options, listener=progress), None
    except BenchError as exc:
        return None, str(exc)


def torch_to_gpu(args: argparse.Namespace, workdir: Path, deadline: float) -> list[Verdict]:
    """``torch.load(map_location="cuda:N")`` on a torch checkpoint, cold and warm."""
    size = parse_size(args.size) // 2
    ckpt = synthesize(workdir / "torch", size, fmt="torch", seed=2)
    print(f"## torch.load(map_location='{args.device}'), {format_bytes(size)} torch checkpoint\n")
    report, error = bench_section(
        ckpt.root,
        BenchOptions(
            strategies=("pickle-cuda",),
            device=args.device,
            cache=("cold", "warm"),
            repeats=args.repeats,
            warmup=False,
            trial_timeout_s=120.0,
            deadline=deadline,
        ),
    )
    if report is None:
        print(f"- not run: {error}\n")
        return [("torch.load to the GPU ran", False, str(error))]
    rows = {(s.strategy, s.cache): s for s in report.summary if s.median_bytes_per_s}
    for cache in ("cold", "warm"):
        got = rows.get(("pickle-cuda", cache))
        rate = f"{gbps(got.median_bytes_per_s)} GB/s" if got else "no verified trial"
        print(f"- `pickle-cuda` {cache}: {rate}")
    print()
    ran = [t for t in report.trials if t.status != "skipped"]
    bad = [t for t in ran if t.status != "ok" or t.verified is not True]
    return [
        (
            "torch.load(map_location=cuda) returned the reference tensors",
            bool(ran) and not bad,
            f"{len(ran) - len(bad)} of {len(ran)}"
            + (f"; #{bad[0].id}: {bad[0].reason}" if bad else ""),
        )
    ]


def gpu_count() -> int:
    result = probe_gpus()
    if not result.ok or result.data is None:
        return 0
    return len(result.data.smi) or len(result.data.pci)


def nccl_round(args: argparse.Namespace, model: Path) -> list[Verdict]:
    """The multi-rank round on NCCL, one rank per GPU: only with two GPUs or more."""
    gpus = gpu_count()
    print("## NCCL broadcast (`bench --ranks N --device cuda`)\n")
    if gpus < 2:
        print(f"- not run: {gpus} GPU here (NCCL refuses two ranks on one device)\n")
        return []
    command = [sys.executable, "-m", "loadscope", "bench", str(model), "--ranks", str(gpus)]
    command += ["--device", args.device, "--repeats", "1"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=150, check=False)
    except subprocess.TimeoutExpired:
        print("- timed out after 150 s\n")
        return [("NCCL round finished", False, "timed out after 150 s")]
    print("```\n" + proc.stdout.strip() + "\n```\n")
    tail = (proc.stderr.strip().splitlines() or [""])[-1]
    return [("NCCL round finished", proc.returncode == 0, f"exit {proc.returncode} {tail}")]


def doctor_gpu(args: argparse.Namespace, workdir: Path) -> list[Verdict]:
    """``loadscope doctor --device cuda`` end to end on a 1 GiB model: the plan on a GPU
    box runs GPU trials, and each GPU snippet's number names its own strategy's trial."""
    ckpt = synthesize(workdir / "doctor", parse_size(args.doctor_size), seed=3)
    out = workdir / "doctor.json"
    command = [sys.executable, "-m", "loadscope", "doctor", str(ckpt.root)]
    command += ["--device", args.device, "--budget", "60", "--json", str(out)]
    print(f"## doctor's GPU plan end to end ({args.doctor_size}, `--budget 60`)\n")
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    except subprocess.TimeoutExpired:
        return [("doctor --device cuda finished", False, "timed out after 180 s")]
    if not out.exists():
        tail = (proc.stderr.strip().splitlines() or [""])[-1]
        return [("doctor --device cuda wrote its report", False, f"exit {proc.returncode} {tail}")]
    report = json.loads(out.read_text())
    print(f"- verdict ({report['verdict']['status']}): {report['verdict']['headline']}")
    trials = report["bench"]["trials"]
    gpu_ok = sorted({t["strategy"] for t in trials if t["status"] == "ok"} & set(GPU_STRATEGIES))
    print(f"- GPU strategies with a verified trial: {', '.join(gpu_ok) or 'none'}")
    by_id = {t["id"]: t["strategy"] for t in trials}
    mismatched = []
    for rec in report["recommendations"]:
        print(f"- {rec['id']}: {rec['title']}")
        for snip in rec.get("snippets") or []:
            if snip.get("strategy") in GPU_STRATEGIES and snip.get("speedup") is not None:
                own = {by_id.get(i) for i in snip.get("trial_ids") or []}
                print(f"  - {snip['stack']}: {snip['what']} {snip['speedup']:.2f}x ({snip['how']})")
                if own != {snip["strategy"]}:
                    mismatched.append(
                        f"{snip['stack']} {snip['strategy']} <- {sorted(map(str, own))}"
                    )
    for failure in report.get("failures") or []:
        print(f"- failure: {failure}")
    print()
    return [
        ("doctor --device cuda ran GPU trials", bool(gpu_ok), ", ".join(gpu_ok) or "none"),
        (
            "every GPU snippet's number is its own code's trial",
            not mismatched,
            "; ".join(mismatched) or "all",
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda or cuda:N (default cuda)")
    parser.add_argument("--size", default="2GiB", help="synthetic checkpoint size (default 2GiB)")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1, help="rounds after the warm-up")
    parser.add_argument("--budget-s", type=float, default=120.0, help="hard end for part 3")
    parser.add_argument("--doctor-size", default="1GiB", help="the doctor's model (part 6)")
    parser.add_argument("--workdir", default="/var/tmp", help="where the checkpoints are written")
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
    verdicts: list[Verdict] = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        ckpt = synthesize(Path(tmp) / "model", parse_size(args.size), shards=args.shards, seed=1)
        options = BenchOptions(
            device=args.device,
            cache=("cold", "warm"),
            repeats=args.repeats,
            warmup=True,
            trial_timeout_s=120.0,
            deadline=t_start + args.budget_s,
        )
        report, error = bench_section(ckpt.root, options)
        if report is None:
            print(f"bench could not run: {error}")
            return CheckExit.MISSED
        lines, rate = table(report, pinned)
        print(
            f"## GPU strategies, {args.size} synthetic checkpoint in {args.shards} shard(s),"
            f" warm-up + {args.repeats} interleaved rounds, {args.device}\n"
        )
        print("\n".join(lines) + "\n")
        for note in report.notes:
            print(f"- note: {note}")
        verdicts += strategy_verdicts(report, rate, pinned)
        verdicts += torch_to_gpu(args, Path(tmp), time.monotonic() + 60.0)
        verdicts += nccl_round(args, ckpt.root)
        verdicts += doctor_gpu(args, Path(tmp))
    print("\n## targets\n")
    for name, ok, value in verdicts:
        print(f"- {name}: {value} — {'met' if ok else 'MISSED'}")
    print(f"\n(total {time.monotonic() - t_start:.0f} s)")
    return CheckExit.MET if all(ok for _, ok, _ in verdicts) else CheckExit.MISSED


def strategy_verdicts(
    report: BenchReport, rate: dict[tuple[str, str], float], pinned: float
) -> list[Verdict]:
    verdicts: list[Verdict] = []
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
    for name in ("staged", "api-cuda"):
        warm = rate.get((name, "warm"))
        verdicts.append(
            (
                f"{name} warm >= {STAGED_SHARE_OF_PINNED:.0%} of the pinned H2D ceiling",
                warm is not None and warm >= STAGED_SHARE_OF_PINNED * pinned,
                f"{warm / pinned:.0%} ({gbps(warm)} of {gbps(pinned)} GB/s)"
                if warm
                else f"no verified {name} warm trial",
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
    return verdicts


if __name__ == "__main__":
    sys.exit(main())
