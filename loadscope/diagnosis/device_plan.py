"""Where the doctor's trials land and what ``auto`` is told: the device a run loads to
(``--device auto`` resolved from the probe's GPUs and a worker's answer), and the reader
count and request size the probe found best.

May import: ``loadscope.engine.bench`` (asking a worker), ``loadscope.engine.probing``
(the probe report), ``loadscope.loaders.strategies``.
"""

from __future__ import annotations

from typing import Any

from loadscope.engine.bench import BenchError, describe_strategies
from loadscope.engine.probing import ProbeReport
from loadscope.loaders.strategies import GPU_DEFAULT


def gpu_count(probe: ProbeReport) -> int:
    """NVIDIA GPUs the probe saw (nvidia-smi rows, else PCI functions)."""
    g = probe.gpus.data
    return max(len(g.smi), len(g.pci)) if g else 0


def resolve_device(device: str, probe: ProbeReport) -> tuple[str, str | None]:
    """``auto``: cuda when the probe saw a GPU and a worker can use it; else cpu, and why."""
    if device != "auto":
        return device, None
    if gpu_count(probe) == 0:
        return "cpu", None
    try:
        info = describe_strategies().get(GPU_DEFAULT) or {}
    except BenchError as exc:
        return "cpu", f"GPU trials not run: {exc}"
    if info.get("unavailable"):
        return "cpu", f"a GPU is present but not usable from torch: {info['unavailable']}"
    return "cuda", None


def hints_from(probe: ProbeReport) -> dict[str, Any]:
    """What ``auto`` should use for cold files: the reader count the parallel probe found best."""
    thr = probe.throughput.data
    if thr is None or not thr.parallel:
        return {}
    best = max(thr.parallel, key=lambda p: p.bytes_per_s)
    return {"threads": max(4, best.readers), "block_bytes": best.block_bytes}
