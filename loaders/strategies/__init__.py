"""Every loader strategy, one module each, and the registry that names them.

CPU strategies for safetensors (``mmap``, ``pread``, ``fullread``, ``prefetch``,
``vllm-prefetch``, ``prewarm``, ``parallel``, ``direct``, ``auto``, ``api``), for
torch checkpoints (``pickle``, ``pickle-mmap``; ``pickle-cuda`` on the GPU), peers when installed
(``fastsafetensors``, ``runai``), and GPU strategies for ``--device cuda``
(``mmap-cuda``, ``api-cuda``, ``read-to-cuda``, ``staged``, ``gds``, and the peers'
``fastsafetensors-cuda``, ``fastsafetensors-gds``, ``runai-cuda``), and for a model in
an object store ``store-ranged`` and ``store-get``. Broadcast strategies register
here too when they arrive.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from loadscope.base.plugins import STRATEGY_MODULES, import_named
from loadscope.loaders.strategies.api import PublicLoadFile
from loadscope.loaders.strategies.api_cuda import PublicLoadFileCuda
from loadscope.loaders.strategies.auto import Auto
from loadscope.loaders.strategies.direct import Direct
from loadscope.loaders.strategies.fullread import FullRead
from loadscope.loaders.strategies.gds import Gds
from loadscope.loaders.strategies.mmap_cuda import MmapCuda
from loadscope.loaders.strategies.mmap_file import MmapLoadFile
from loadscope.loaders.strategies.objstore import (
    RunAIStore,
    RunAIStoreTuned,
    StoreGet,
    StoreRanged,
)
from loadscope.loaders.strategies.parallel import Parallel
from loadscope.loaders.strategies.peers import (
    FastSafetensors,
    FastSafetensorsCuda,
    FastSafetensorsGds,
    RunAI,
    RunAICuda,
)
from loadscope.loaders.strategies.pickle_load import Pickle, PickleCuda, PickleMmap
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
from loadscope.loaders.strategy import StackRoute, Strategy
from loadscope.probes.sources import ONLY_FILES

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
        PickleCuda(),
        FastSafetensors(),
        RunAI(),
        FromPretrained(),
        FromPretrainedPrewarmed(),
        FromConfigLoadModel(),
        MmapCuda(),
        PublicLoadFileCuda(),
        ReadToCuda(),
        Staged(),
        Gds(),
        FastSafetensorsCuda(),
        FastSafetensorsGds(),
        RunAICuda(),
        StoreRanged(),
        StoreGet(),
        RunAIStore(),
        RunAIStoreTuned(),
    )
}


def register(strategy: Strategy) -> Strategy:
    """Add ``strategy`` to the registry (a plugin module's one call, ``base/plugins.py``):
    everything read from the declarations (the doctor's plan, the routes, the tables)
    takes it in. Raises ValueError for a name already taken or one without a summary."""
    if _SEALED:
        raise RuntimeError(
            f"strategy {strategy.name!r} registered after the registry's lists were made:"
            f" name its module in ${STRATEGY_MODULES} instead of importing it first"
        )
    if not strategy.name or strategy.name in STRATEGIES:
        raise ValueError(f"strategy name {strategy.name!r} is empty or already registered")
    if not strategy.summary:
        raise ValueError(f"strategy {strategy.name!r} has no summary")
    STRATEGIES[strategy.name] = strategy
    return strategy


# The user's own strategies, before anything is read from the declarations; after them
# the registry is sealed (a later register() would miss the lists below).
_SEALED = False
import_named(STRATEGY_MODULES)

#: What ``bench`` runs when no --strategies are given (peers join when installed; the GPU
#: strategies run instead of the CPU ones under ``--device cuda``).
DEFAULT_ORDER = tuple(STRATEGIES)
#: The strategies that land safetensors on a GPU (what the doctor runs with --device
#: cuda), read from their declarations: safetensors' own device load first, the public
#: API's staging, the common read-then-.to(), gds when kvikio is there, and the peers'
#: GPU modes. None holds the whole model in host RAM.
GPU_STRATEGIES = tuple(
    n for n, s in STRATEGIES.items() if s.requires.gpu and "safetensors" in s.requires.formats
)


def default_load(gpu: bool = False, fmt: str = "safetensors") -> str:
    """The default load of a device and format (``load_file``, ``torch.load``; to the GPU
    with ``gpu``): the strategy declared ``default_load`` for them."""
    return next(
        n
        for n, s in STRATEGIES.items()
        if s.default_load and s.requires.gpu == gpu and fmt in s.requires.formats
    )


#: The default loads every speed-up is taken against (CPU and GPU, safetensors and torch).
DEFAULT_LOADS = tuple(n for n, s in STRATEGIES.items() if s.default_load)
#: ``load_file`` on the CPU and to the GPU: the baselines most figures are against.
DEFAULT = default_load()
GPU_DEFAULT = default_load(gpu=True)
#: ``torch.load``, on the CPU and to the GPU.
TORCH_DEFAULT = default_load(fmt="torch")
GPU_TORCH_DEFAULT = default_load(gpu=True, fmt="torch")
#: The strategies the advice names for what they stand for.
WHOLE_FILE_READ = FullRead.name  # the folklore fix: each file read whole, then load()ed
TORCH_MMAP = PickleMmap.name
HF_DEFAULT = FromPretrained.name  # transformers' from_pretrained as users call it
#: loadscope's own tuned readers of files, on the CPU and to the GPU: evidence that deep
#: reads pay, never a route a user pastes (a bucket's tuned Run:ai trial is a route, and
#: reads no file: it once led this list, and so a torch model's safetensors twins, for
#: lack of a doctor order).
INTERNAL_READERS = tuple(
    sorted(
        (
            n
            for n, s in STRATEGIES.items()
            if s.tuned and not s.requires.gpu and s.requires.sources == ONLY_FILES
        ),
        key=lambda n: STRATEGIES[n].doctor_order or 0,
    )
)
GPU_INTERNAL_READER = next(n for n, s in STRATEGIES.items() if s.tuned and s.requires.gpu)


def reads_torch(name: str) -> bool:
    """``name`` loads torch checkpoints (``torch.load`` in one of its ways)."""
    known = STRATEGIES.get(name)
    return known is not None and known.requires.formats == {"torch"}


def _resolved(name: str, route: StackRoute) -> StackRoute:
    """A declared route with its strategy and baseline filled in (the device's default
    load where the declaration names none)."""
    baseline = route.baseline or default_load(gpu=STRATEGIES[name].requires.gpu)
    return dataclasses.replace(route, strategy=name, baseline=baseline)


#: Every stack route of every strategy, resolved, in the registry's order.
ROUTES: tuple[StackRoute, ...] = tuple(
    _resolved(n, r) for n, s in STRATEGIES.items() for r in s.routes
)
#: Which strategies' routes each kind of fix shows.
FIX_STRATEGIES: dict[str, frozenset[str]] = {
    fix: frozenset(n for n, s in STRATEGIES.items() if fix in s.fixes)
    for fix in sorted({f for s in STRATEGIES.values() for f in s.fixes})
}
_SEALED = True


def get(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KeyError(f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})") from None


def check_knobs(knobs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{strategy: {knob: value}}`` checked against the strategies' declared knobs.

    Returns the values converted (``"16MiB"`` -> 16777216); raises ValueError naming an
    unknown strategy, a knob the strategy does not have (with the ones it has), or a
    value outside what the knob takes.
    """
    checked: dict[str, dict[str, Any]] = {}
    for strategy, values in knobs.items():
        declared = {k.name: k for k in get(strategy).knobs} if strategy in STRATEGIES else None
        if declared is None:
            raise ValueError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
        for name, value in values.items():
            knob = declared.get(name)
            if knob is None:
                has = ", ".join(declared) or "none"
                raise ValueError(f"{strategy} has no knob {name!r} (its knobs: {has})")
            try:
                checked.setdefault(strategy, {})[name] = knob.parse(value)
            except ValueError as exc:
                raise ValueError(f"{strategy}.{exc}") from None
    return checked
