"""A toy source for the tests: a model served from memory, as an object store serves one.

``memory:SIZE[,shards=N][,seed=S]`` names a safetensors model of about SIZE bytes that each
process builds in its own memory, deterministically from the spec (the same bytes in the
parent and in every worker), as objects named like a sharded checkpoint's files. This one
module declares the source (its prefix, its listing, what a cold trial means there) and
the probe that measures it (the rate of copying its objects out by request size); its
strategies are ``toy_memory_strategy``'s. Named in ``$LOADSCOPE_PROBE_MODULES`` (the
strategies' in ``$LOADSCOPE_STRATEGY_MODULES``), that is all loadscope needs to probe it,
run trials on it and report it: the seam another kind of storage (an object store) uses.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from safetensors.numpy import save

from loadscope.base.units import format_bytes, format_rate, parse_size
from loadscope.probes.registry import register_probe
from loadscope.probes.sources import (
    BadAddress,
    Source,
    SourceError,
    SourceObject,
    register_source,
    split_address,
)
from loadscope.probes.spec import Lines, ProbeContext, ProbeSpec

NAME = "memory"
PREFIX = "memory:"
#: Tensors per object: float32, about equal.
TENSORS_PER_OBJECT = 4


def parse(address: str) -> tuple[int, int, int]:
    """``(size, shards, seed)`` of a ``memory:`` address; SourceError for a bad one."""
    body = address[len(PREFIX) :].rstrip("/")
    size_text, *options = body.split(",")
    try:
        size = parse_size(size_text)
        values = dict(o.split("=", 1) for o in options)
        shards, seed = int(values.pop("shards", 1)), int(values.pop("seed", 0))
    except ValueError as exc:
        raise BadAddress(f"bad memory address {address!r}: {exc}") from None
    if values or not 1 <= shards <= 64 or not 4096 <= size <= 1 << 30:
        raise BadAddress(
            f"bad memory address {address!r}: memory:SIZE[,shards=N][,seed=S],"
            " 4 KiB to 1 GiB, 1 to 64 shards"
        )
    return size, shards, seed


@functools.lru_cache(maxsize=2)
def store(address: str) -> dict[str, bytes]:
    """The model's objects at ``address``, by name (built once per process)."""
    size, shards, seed = parse(address)
    rng = np.random.default_rng(seed)
    per_tensor = max(1, size // shards // TENSORS_PER_OBJECT // 4)
    objects = {}
    for i in range(shards):
        tensors = {
            f"model.layers.{i}.w{j}": rng.standard_normal(per_tensor, dtype=np.float32)
            for j in range(TENSORS_PER_OBJECT)
        }
        objects[f"model-{i + 1:05d}-of-{shards:05d}.safetensors"] = save(tensors)
    return objects


def read(path: str, offset: int, size: int) -> memoryview:
    """``size`` bytes at ``offset`` of the object at ``path`` (its address)."""
    address, name = split_address(path)
    try:
        data = store(address)[name]
    except KeyError:
        raise SourceError(f"no object {name!r} at {address}") from None
    return memoryview(data)[offset : offset + size]


def _listing(address: str) -> tuple[SourceObject, ...]:
    return tuple(SourceObject(name, len(data)) for name, data in store(address).items())


SOURCE = register_source(
    Source(
        NAME,
        "a toy store in memory",
        (PREFIX,),
        _listing,
        cold_means="every read is served by the store's memory: no cache here to evict",
    )
)


@dataclass(frozen=True, slots=True)
class CopyPoint:
    block_bytes: int
    bytes_per_s: float


@dataclass(frozen=True, slots=True)
class MemoryStore:
    """The store as measured: its objects, and the rate of copying them out by request size."""

    objects: int
    total_bytes: int
    points: list[CopyPoint]


BLOCKS = (64 << 10, 1 << 20, 16 << 20)


def _run(ctx: ProbeContext) -> MemoryStore:
    points = []
    deadline = time.monotonic() + max(ctx.seconds, 0.3)
    for block in BLOCKS:
        copied, started = 0, time.perf_counter()
        buffer = bytearray(block)
        while time.monotonic() < deadline - (len(BLOCKS) - len(points) - 1) * 0.1:
            for path, size in ctx.files:
                for offset in range(0, size, block):
                    view = read(path, offset, block)
                    buffer[: len(view)] = view
                    copied += len(view)
            if time.perf_counter() - started > 0.05:
                break
        points.append(CopyPoint(block, copied / max(time.perf_counter() - started, 1e-9)))
    return MemoryStore(len(ctx.files), sum(size for _, size in ctx.files), points)


def _lines(block: dict[str, Any]) -> Lines:
    rates = "; ".join(
        f"{format_bytes(p['block_bytes'])} {format_rate(p['bytes_per_s'])}" for p in block["points"]
    )
    return [
        ("objects", f"{block['objects']} ({format_bytes(block['total_bytes'])})"),
        ("copy rate", f"by request size: {rates}"),
    ]


SPEC = register_probe(
    ProbeSpec(
        "memory_store",
        "the memory store",
        MemoryStore,
        _run,
        _lines,
        budget_share=0.2,
        sources=frozenset({NAME}),
    )
)
