"""The cold reads of the model, as the core declares them: the latency of single 4 KiB
reads (``latency``) and the throughput by request size, by parallel readers and into
fresh memory (``throughput``), both on the largest file, within their share of the
measured budget.

Owns the two probes' declarations and how the throughput scan spends its time
(:func:`throughput`: 45% of the measured budget on one reader by request size, 35% on
parallel readers and the best of them again into fresh RAM). The reads themselves are
:mod:`loadscope.probes.iobench`'s; the engine hands them in (``ProbeContext.reads``:
the reader, and the guard that bounds each read and stops after a stall).
May import: ``loadscope.probes.iobench``, ``loadscope.probes.result``,
``loadscope.probes.spec``, ``loadscope.base``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from loadscope.base.units import format_bytes
from loadscope.probes.iobench import (
    PARALLEL_CAP,
    PARALLEL_READERS,
    SEQUENTIAL_BLOCKS,
    IoBench,
    LatencyResult,
    ThroughputPoint,
    ThroughputResult,
    latency_lines,
    throughput_shown,
)
from loadscope.probes.result import Unavailable
from loadscope.probes.spec import ProbeContext, ProbeSpec, Reads, Shown, block_of

#: Shares of the core's measured reads: the latency's; the throughput takes the rest
#: (45 points by request size, 35 by readers and into RAM).
LATENCY_SHARE = 0.15
SEQUENTIAL_SHARE = 0.45
PARALLEL_SHARE = 0.35
#: The into-RAM point may take at most this share of the memory headroom.
INTO_RAM_HEADROOM_SHARE = 4


def _reads(ctx: ProbeContext) -> Reads:
    if ctx.reads is None:
        raise Unavailable("the model's reads were not set up (no file to read)")
    return ctx.reads


def _primary(ctx: ProbeContext) -> str:
    return max(ctx.files, key=lambda f: f[1])[0]


def _latency(ctx: ProbeContext) -> LatencyResult:
    reads = _reads(ctx)
    # ``ctx.seconds``: this probe's share of what the registered probes left.
    until = time.monotonic() + ctx.seconds
    result: LatencyResult = reads.guarded(lambda: reads.bench.latency(until), ctx.seconds)()
    return result


def _throughput(ctx: ProbeContext) -> ThroughputResult:
    reads = _reads(ctx)
    path, deadline, remaining = _primary(ctx), ctx.deadline, ctx.seconds
    result: ThroughputResult = reads.guarded(
        lambda: throughput(reads.bench, deadline, remaining, path, reads.remote, ctx.headroom),
        max(0.0, deadline - time.monotonic()),
    )()
    return result


def throughput(
    bench: IoBench, deadline: float, remaining: float, path: str, note: str, headroom: int | None
) -> ThroughputResult:
    """One reader by request size, parallel readers, and the best of them into fresh
    memory, each setting its slice of ``remaining`` seconds (none past ``deadline``)."""
    seq_slice = SEQUENTIAL_SHARE * remaining / len(SEQUENTIAL_BLOCKS)
    # The parallel scan's points, then one more: the best of them into fresh memory.
    par_slice = PARALLEL_SHARE * remaining / (len(PARALLEL_READERS) + 1)
    sequential = _sweep(SEQUENTIAL_BLOCKS, bench.sequential, seq_slice, deadline)
    parallel = _sweep(PARALLEL_READERS, bench.parallel, par_slice, deadline)
    if not sequential:
        raise Unavailable("no time left in the budget for throughput")
    into_ram, why = _into_ram(
        bench, parallel, min(par_slice, deadline - time.monotonic()), headroom
    )
    return ThroughputResult(
        bench.method, path, tuple(sequential), tuple(parallel), note, into_ram, why
    )


def _sweep(
    settings: Sequence[int],
    measure: Callable[[int, float], ThroughputPoint],
    slice_s: float,
    deadline: float,
) -> list[ThroughputPoint]:
    """``measure(setting, seconds)`` for each setting in turn, each given ``slice_s`` or
    what is left before ``deadline``; the settings left when nothing is are not measured."""
    points = []
    for setting in settings:
        budget = min(slice_s, deadline - time.monotonic())
        if budget <= 0:
            break
        points.append(measure(setting, budget))
    return points


def _into_ram(
    bench: IoBench, parallel: list[ThroughputPoint], seconds: float, headroom: int | None
) -> tuple[ThroughputPoint | None, str]:
    """The best parallel point again, landing in a fresh buffer (or why not)."""
    if not parallel:
        return None, "not measured: the parallel scan did not run"
    if seconds <= 0:
        return None, "not measured: no time left in the budget"
    if headroom is None:
        return None, "not measured: the memory headroom is unknown"
    best = max(parallel, key=lambda p: p.bytes_per_s)
    cap = min(PARALLEL_CAP, headroom // INTO_RAM_HEADROOM_SHARE)
    if cap < 16 * best.block_bytes:
        return None, (
            f"not measured: a quarter of the memory headroom ({format_bytes(headroom)}) is"
            f" under 16 requests of {format_bytes(best.block_bytes)}"
        )
    try:
        return bench.into_ram(best.readers, seconds, best.block_bytes, cap), ""
    except (OSError, MemoryError, BufferError) as exc:  # the scan's points still stand
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return None, f"not measured: {why or type(exc).__name__} ({bench.where()})"


def _latency_shown(doc: Mapping[str, Any]) -> Shown:
    return list(latency_lines(block_of(doc.get("latency"))))


def _throughput_shown(doc: Mapping[str, Any]) -> Shown:
    return throughput_shown(block_of(doc.get("throughput")))


LATENCY = ProbeSpec(
    "latency",
    "cold latency",
    LatencyResult,
    _latency,
    lambda _block: [],
    core=True,
    part="head",
    shown=_latency_shown,
)
THROUGHPUT = ProbeSpec(
    "throughput",
    "throughput",
    ThroughputResult,
    _throughput,
    lambda _block: [],
    core=True,
    part="middle",
    shown=_throughput_shown,
)
