"""What a doctor's trial costs before any has run: its fixed overhead and its load at
the rates the probe measured (:func:`cost_model`, the planner's prices).

A buffered load is priced at one reader's rate at the readahead's request size, the
parallel family at the 1 MiB rate, the deep O_DIRECT readers at the probe's parallel
read into fresh memory; a warm trial at memory speed. How each strategy reads is read
from its declaration in ``loaders/strategies``.

May import: ``loadscope.engine.planning`` (the cost model's type),
``loadscope.engine.probing`` (the probe report), ``loadscope.loaders.strategies``,
``loadscope.advice.storage_rules`` (where the readahead check runs).
"""

from __future__ import annotations

import os

from loadscope.advice.storage_rules import small_readahead
from loadscope.engine.planning import CostModel
from loadscope.engine.probing import ProbeReport
from loadscope.loaders.strategies import STRATEGIES

#: The strategies that build a transformers model (their trials cost more: see below).
_BUILDS_MODEL = tuple(n for n, s in STRATEGIES.items() if s.builds_model)

#: A trial's fixed cost beyond its load: the worker's fork, the cache put in the asked
#: state and verified (eviction, mincore), the digest check. Measured 0.2-0.5 s per
#: trial on this project's 2-core VM (a doctor of an 8 MiB model without a config.json:
#: 14 trials and the probes in 3.0 s of wall time).
TRIAL_OVERHEAD_S = 0.4
#: More for the trials that build a transformers model (the fork server imports
#: transformers and the model's code once, ~3.3 s here; each trial's time includes that
#: import of the model's code as measured there, as a user's fresh process pays it).
HF_TRIAL_OVERHEAD_S = 2.0
#: Once per run: the fork server starting (an interpreter importing torch, ~3 s here).
SERVER_START_S = 3.0

#: Strategies that read through the page cache in the mount's readahead windows.
BUFFERED_STRATEGIES = tuple(n for n, s in STRATEGIES.items() if s.reads == "buffered")
#: Warm trials are memory copies; a deliberately slow figure for one.
WARM_RATE = 1e9


def estimate_rates(probe: ProbeReport) -> tuple[float, float]:
    """Slow-side cold rates (buffered, parallel) for planning, from the probe.

    A buffered load streams in readahead-sized requests, so its rate is the probe's
    single-reader rate at a block the size of the readahead (interpolated between the
    block sizes the probe measured; 4 KiB when readahead is off); the parallel family
    is planned at the 1 MiB single-reader rate, which it beats.
    """
    thr = probe.throughput.data
    if thr is None or not thr.sequential:
        return 50e6, 50e6
    bdi = probe.primary.storage.bdi.data
    ra = (bdi.read_ahead_kb or 0) * 1024 if bdi and bdi.read_ahead_kb is not None else 128 << 10
    window = max(4096, ra)
    points = sorted(thr.sequential, key=lambda p: p.block_bytes)
    under = [p for p in points if p.block_bytes <= window] or points[:1]
    over = [p for p in points if p.block_bytes > window]
    low = under[-1]
    buffered = low.bytes_per_s
    if over and low.block_bytes < window:
        # Latency-bound between two measured sizes: the rate grows with the request,
        # no faster than in proportion to it.
        high = over[0]
        step = (window - low.block_bytes) / (high.block_bytes - low.block_bytes)
        buffered = min(
            low.bytes_per_s * window / low.block_bytes,
            low.bytes_per_s + step * (high.bytes_per_s - low.bytes_per_s),
        )
    mib = [p.bytes_per_s for p in points if p.block_bytes >= 1 << 20] or [points[-1].bytes_per_s]
    return max(buffered, 1.0), max(min(mib), 1.0)


#: Strategies that read cold files with many large O_DIRECT requests in flight where the
#: filesystem takes them: priced at the probe's parallel read into fresh RAM, the rate
#: they reach (0.9-1.0x of it on the emulated disk), not at one reader's. Priced at one
#: reader's 1 MiB rate they were given 10 MiB samples of a 256 MiB model, whose fixed
#: cost swamped the fit (±227%), where whole loads of 0.15 s fitted the budget.
DIRECT_STRATEGIES = tuple(n for n, s in STRATEGIES.items() if s.reads == "deep")


def direct_rate(probe: ProbeReport) -> float | None:
    """The rate deep O_DIRECT readers reach here (the into-RAM point, else the best
    parallel read), or None where the probe did not read with O_DIRECT."""
    thr = probe.throughput.data
    if thr is None or thr.method != "o_direct" or not thr.parallel:
        return None
    if thr.into_ram is not None and thr.into_ram.bytes_per_s > 0:
        return thr.into_ram.bytes_per_s
    return max(p.bytes_per_s for p in thr.parallel)


def cost_model(probe: ProbeReport, trials: list[tuple[str, str]]) -> CostModel:
    """The planner's cost model before any trial has run: rates from the probe."""
    buffered, parallel = estimate_rates(probe)
    deep = direct_rate(probe) or parallel

    def rate(strategy: str, cache: str) -> float:
        if cache == "warm":
            return WARM_RATE
        if strategy in DIRECT_STRATEGIES:
            return max(deep, parallel)
        return buffered if strategy in BUFFERED_STRATEGIES else parallel

    return CostModel(
        seconds_per_byte={(s, c): 1.0 / rate(s, c) for s, c in trials},
        fixed_s=TRIAL_OVERHEAD_S,
        fixed_s_for=dict.fromkeys(_BUILDS_MODEL, HF_TRIAL_OVERHEAD_S),
        # Warm trials' page cache is filled as `loadscope warm` fills it: parallel reads.
        fill_s_per_byte=1.0 / parallel,
        start_s=SERVER_START_S,
    )


def builds_with_transformers(probe: ProbeReport) -> bool:
    """transformers is installed (found, not imported) and the model has a config.json."""
    import importlib.util

    root = str(probe.target.get("root", ""))
    return (
        bool(root)
        and os.path.isfile(os.path.join(root, "config.json"))
        and (importlib.util.find_spec("transformers") is not None)
    )


def readahead_reserve_s(probe: ProbeReport, allowed: bool, with_hf: bool = True) -> float:
    """The time the readahead check after the trials takes, where it will run (``allowed``
    to write the setting, on storage whose readahead is small): its fork server, two whole
    loads at the parallel rate the raised readahead approaches, and where the model builds
    with transformers (and its trials are run: ``with_hf``) ``from_pretrained`` once
    more. Kept out of the trials' time: at 1 GiB
    it ran after their deadline and the doctor took 13% over its budget."""
    mount = probe.primary.storage.mount.data
    bdi = probe.primary.storage.bdi.data
    if not allowed or mount is None or bdi is None:
        return 0.0
    if not small_readahead(mount.storage_class, bdi.read_ahead_kb):
        return 0.0
    # A raised readahead streams with many requests in flight: near the parallel read's
    # rate (1 GiB in 1.2 s where the probe's best parallel read was 1.6 GB/s).
    _buffered, parallel = estimate_rates(probe)
    load = float(probe.target["total_bytes"]) / (direct_rate(probe) or parallel)
    reserve = SERVER_START_S + 2 * (TRIAL_OVERHEAD_S + load)
    if with_hf and builds_with_transformers(probe):
        reserve += SERVER_START_S + HF_TRIAL_OVERHEAD_S + load
    return reserve
