"""``loadscope demo``: see the slow-network-disk pathology (and its fix) without owning a slow disk.

It builds a synthetic checkpoint on local disk, serves it through the emulated
slow disk when FUSE is available (else says why and uses the local disk), and
runs the diagnosis on it. Everything it creates is removed afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from loadscope.bench import BenchOptions, BenchReport, run_bench
from loadscope.bench import to_text as bench_text
from loadscope.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.probing import ProbeReport, run_probes, to_text
from loadscope.synth import synthesize
from loadscope.targets import resolve
from loadscope.units import format_bytes, format_rate


@dataclass(frozen=True, slots=True)
class DemoOptions:
    size_bytes: int = 512 << 20
    settings: EmulatorSettings = field(
        default_factory=lambda: EmulatorSettings(latency_s=0.005, readahead_kb=128)
    )
    budget_s: float = 15.0
    work_dir: str | None = None
    #: Loaded cold after probing: the default, the folklore fix, and our fast path.
    strategies: tuple[str, ...] = ("mmap", "fullread", "auto")


@contextlib.contextmanager
def _model_dir(options: DemoOptions, out: TextIO) -> Iterator[Path]:
    parent = options.work_dir or (
        "/var/tmp" if Path("/var/tmp").is_dir() else tempfile.gettempdir()
    )
    work = Path(tempfile.mkdtemp(prefix="loadscope-demo-", dir=parent))
    try:
        out.write(
            f"building a {format_bytes(options.size_bytes)} synthetic checkpoint in {work} ...\n"
        )
        synthesize(work / "model", options.size_bytes)
        reason = fuse_unavailable_reason()
        if reason is not None:
            out.write(
                f"no emulated slow disk here ({reason});\n"
                "diagnosing the local copy instead: expect the 'nothing is wrong here' picture.\n\n"
            )
            yield work / "model"
            return
        s = options.settings
        out.write(
            f"serving it through an emulated network disk: {s.latency_s * 1e3:g} ms per read"
            f" request, readahead {s.readahead_kb} KiB, {s.max_background} background requests\n"
            "(a FUSE passthrough; on a real cloud volume or NFS mount the same numbers come"
            " from the network).\n\n"
        )
        with emulated_disk(work / "model", work / "mnt", s) as disk:
            yield disk.path
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_demo(options: DemoOptions, out: TextIO) -> tuple[ProbeReport, BenchReport | None]:
    with _model_dir(options, out) as model:
        target = resolve(str(model))
        out.write("1. the storage, probed (read-only, cold):\n\n")
        report = run_probes(target, budget_s=options.budget_s)
        out.write(to_text(report) + "\n\n")
        out.write(takeaways(report) + "\n\n")
        bench = None
        if options.strategies:
            out.write(
                "2. loading it, cold, each way in a fresh process"
                f" ({', '.join(options.strategies)}):\n\n"
            )
            bench = run_bench(
                target,
                BenchOptions(strategies=options.strategies, repeats=1, warmup=False),
            )
            out.write(bench_text(bench) + "\n")
    return report, bench


def takeaways(report: ProbeReport) -> str:
    """What the numbers say, in plain words (the full advice engine comes with ``doctor``)."""
    thr = report.throughput.data
    if thr is None or not thr.sequential:
        return "no throughput measurement fit in the budget; run again with --budget 30"
    small = thr.sequential[0]
    large = max(thr.sequential, key=lambda p: p.bytes_per_s)
    best_par = max(thr.parallel, key=lambda p: p.bytes_per_s) if thr.parallel else None
    gain = large.bytes_per_s / max(small.bytes_per_s, 1)
    lines = [
        f"page-sized requests ({format_bytes(small.block_bytes)}) move"
        f" {format_rate(small.bytes_per_s)}; {format_bytes(large.block_bytes)} requests move"
        f" {format_rate(large.bytes_per_s)} ({gain:.0f}x)."
    ]
    if best_par is not None:
        par_gain = best_par.bytes_per_s / max(thr.parallel[0].bytes_per_s, 1)
        lines.append(
            f"{best_par.readers} parallel readers of 1 MiB reach"
            f" {format_rate(best_par.bytes_per_s)} ({par_gain:.1f}x one reader)."
        )
    lines.append(
        "A memory-mapped load faults pages in a few at a time, so on high-latency storage it"
        " pays the latency per small request; large and parallel reads pay it once per MiB."
    )
    return "what this shows:\n" + "\n".join(
        textwrap.fill(line, 80, initial_indent="  ", subsequent_indent="  ") for line in lines
    )
