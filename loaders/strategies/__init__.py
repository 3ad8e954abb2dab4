"""Every loader strategy, one module each, and the registry that names them.

CPU strategies for safetensors (``mmap``, ``pread``, ``fullread``, ``prefetch``,
``vllm-prefetch``, ``prewarm``, ``parallel``, ``direct``, ``auto``, ``api``), for
torch checkpoints (``pickle``, ``pickle-mmap``), peers when installed
(``fastsafetensors``, ``runai``), and GPU strategies for ``--device cuda``
(``mmap-cuda``, ``read-to-cuda``, ``staged``, ``gds``). Broadcast strategies register
here too when they arrive.
"""

from __future__ import annotations

from loadscope.loaders.strategies.api import PublicLoadFile
from loadscope.loaders.strategies.auto import Auto
from loadscope.loaders.strategies.direct import Direct
from loadscope.loaders.strategies.fullread import FullRead
from loadscope.loaders.strategies.gds import Gds
from loadscope.loaders.strategies.mmap_cuda import MmapCuda
from loadscope.loaders.strategies.mmap_file import MmapLoadFile
from loadscope.loaders.strategies.parallel import Parallel
from loadscope.loaders.strategies.peers import FastSafetensors, RunAI
from loadscope.loaders.strategies.pickle_load import Pickle, PickleMmap
from loadscope.loaders.strategies.pread import SafetensorsPread
from loadscope.loaders.strategies.prefetch import Prefetch
from loadscope.loaders.strategies.prewarm import Prewarm
from loadscope.loaders.strategies.read_to_cuda import ReadToCuda
from loadscope.loaders.strategies.staged_cuda import Staged
from loadscope.loaders.strategies.transformers_load import (
    FromConfigLoadModel,
    FromPretrained,
    FromPretrainedPrewarmed,
)
from loadscope.loaders.strategies.vllm_prefetch import VllmPrefetch
from loadscope.loaders.strategy import Strategy

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        MmapLoadFile(),
        SafetensorsPread(),
        FullRead(),
        Prefetch(),
        VllmPrefetch(),
        Prewarm(),
        Parallel(),
        Direct(),
        Auto(),
        PublicLoadFile(),
        Pickle(),
        PickleMmap(),
        FastSafetensors(),
        RunAI(),
        FromPretrained(),
        FromPretrainedPrewarmed(),
        FromConfigLoadModel(),
        MmapCuda(),
        ReadToCuda(),
        Staged(),
        Gds(),
    )
}
#: What ``bench`` runs when no --strategies are given (peers join when installed; the GPU
#: strategies run instead of the CPU ones under ``--device cuda``).
DEFAULT_ORDER = tuple(STRATEGIES)


def get(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KeyError(f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})") from None
