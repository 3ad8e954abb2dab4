"""Where the doctor's trials land and what ``auto`` is told: the device a run loads to
(``--device auto`` resolved from the probe's GPUs and a worker's answer), the reader
count and request size the probe found best, and the multi-rank round (what it loads,
its modes, about how long it takes).

May import: ``loadscope.engine.bench`` (asking a worker), ``loadscope.engine.probing``
(the probe report), ``loadscope.engine.broadcast`` (the rank modes),
``loadscope.loaders.strategies``, ``loadscope.model.targets``,
``loadscope.diagnosis.trial_costs`` (the rates), ``loadscope.probes.objstore`` (its
concurrency), ``loadscope.base``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadscope.base.errors import LoadscopeError
from loadscope.diagnosis.trial_costs import WARM_RATE, direct_rate, estimate_rates
from loadscope.engine.bench import BenchError, describe_strategies
from loadscope.engine.broadcast import MODES, Mode
from loadscope.engine.probing import ProbeReport
from loadscope.loaders.strategies import GPU_DEFAULT
from loadscope.model.targets import Target, resolve_path
from loadscope.probes.objstore import SPEC as OBJECT_STORE
from loadscope.probes.objstore import concurrency_hint

#: The rank modes worth a doctor's time: all but the synchronous broadcast (its async
#: twin reads the same and overlaps): loadscope's, and what the stacks do with N ranks
#: (their routes say how often the node reads the model).
RANK_MODES: tuple[Mode, ...] = tuple(m for m in MODES if m != "broadcast")


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
    """What ``auto`` should use for cold files: the reader count the parallel probe found
    best; for a model in an object store, the GETs in flight its probe found the rate
    stops rising at."""
    concurrency = concurrency_hint(probe.registered.get(OBJECT_STORE.key))
    if concurrency:
        return {"concurrency": concurrency}
    thr = probe.throughput.data
    if thr is None or not thr.parallel:
        return {}
    best = max(thr.parallel, key=lambda p: p.bytes_per_s)
    return {"threads": max(4, best.readers), "block_bytes": best.block_bytes}


def rank_target(target: Target) -> Target | None:
    """What the multi-rank round loads: a safetensors model itself, a torch model's
    safetensors twins (by their index, or the one file), else None."""
    if target.formats == {"safetensors"}:
        return target
    if target.formats != {"torch"} or not target.alternates:
        return None
    try:
        if target.alternates_index is not None:
            return resolve_path(target.alternates_index)
        if len(target.alternates) == 1:
            return resolve_path(Path(target.alternates[0].path))
    except LoadscopeError:  # gone or changed since the target was resolved
        return None
    return None


#: A rank round's start-up per mode: N ranks' interpreters, torch and a process group.
RANK_START_S = 4.0


def rank_round_s(probe: ProbeReport, ranks: int) -> float:
    """About what the doctor's rank round takes (its three modes, one cold round each):
    each mode's start-up and the model read at the probe's parallel rate, with the copies
    ranks exchange at memory speed; with room for the slower modes (x1.5)."""
    _buffered, parallel = estimate_rates(probe)
    rate = direct_rate(probe) or parallel
    model = float(probe.target["total_bytes"])
    per_mode = RANK_START_S + model / rate + ranks * model / WARM_RATE
    return 1.5 * len(RANK_MODES) * per_mode
