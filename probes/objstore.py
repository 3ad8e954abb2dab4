"""Models in an object store (``s3://``, ``gs://``, ``az://``): the sources, and the probe
that measures the store from this machine.

The probe times what bounds a load from a bucket: each GET's time to its first byte (p50
and p99 of small GETs), one connection's rate by request size (1 to 64 MiB), the rate of
many ranged GETs in flight together (1 to 64) and where it stops rising, a listing's
latency and the objects' sizes. From those it names the bound: request latency (small
requests spend their time waiting for the first byte), one connection's bandwidth (the
rate still rises with every GET added), or the link (it stops rising: the node's network
or the store's own cap for this client).

May import: ``loadscope.base``, ``loadscope.probes`` (its spec, registry and sources, and
the object-store client); ``obstore`` when it runs.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from loadscope.base.units import format_bytes, format_rate
from loadscope.probes.objclient import OBJECT_STORES, SCHEMES, TITLES, call, listing, object_key
from loadscope.probes.objclient import split as split_address
from loadscope.probes.sources import Source, register_source
from loadscope.probes.spec import Lines, ProbeContext, ProbeSpec

#: What a cold trial means in an object store.
COLD_MEANS = "every read is a GET the store serves: there is no cache on this machine to evict"
SOURCES = {
    name: register_source(Source(name, TITLES[name], SCHEMES[name], listing, COLD_MEANS))
    for name in sorted(OBJECT_STORES)
}

MIB = 1 << 20
#: One connection's request sizes.
REQUEST_SIZES = (1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB)
#: GETs in flight together, and the size of each (the streamers' usual chunk).
IN_FLIGHT = (1, 2, 4, 8, 16, 32, 64)
SCAN_REQUEST_BYTES = 8 * MIB
#: Small GETs for the first byte's time, at most.
FIRST_BYTE_GETS = 20
#: The rate counts as still rising while a doubling of the GETs in flight adds this much.
RISING = 1.15


@dataclass(frozen=True, slots=True)
class RatePoint:
    """One connection's rate for GETs of ``request_bytes`` (first byte included)."""

    request_bytes: int
    bytes_per_s: float


@dataclass(frozen=True, slots=True)
class FlightPoint:
    """The rate of ``gets_in_flight`` ranged GETs of ``request_bytes`` kept going together."""

    gets_in_flight: int
    request_bytes: int
    bytes_per_s: float


@dataclass(frozen=True, slots=True)
class ObjectStoreProbe:
    """The store as this machine sees it (see the module's docstring)."""

    address: str
    objects: int
    stored_bytes: int
    largest_bytes: int
    list_s: float
    first_byte_p50_s: float
    first_byte_p99_s: float
    first_byte_gets: int
    per_connection: list[RatePoint]
    flights: list[FlightPoint]
    #: The best rate of the scan, and the fewest GETs in flight within 10% of it.
    ceiling_bytes_per_s: float
    saturates_at: int | None
    #: "request latency", "per-connection bandwidth" or "link", and why, in words.
    bound: str
    bound_reason: str


def _run(ctx: ProbeContext) -> ObjectStoreProbe:
    import obstore

    seconds = max(ctx.seconds, 3.0)
    deadline = time.monotonic() + seconds
    objects = [(address, size) for address, size in ctx.files if size > 0]
    if not objects:
        raise ValueError("the model's objects are empty")
    address, largest = max(objects, key=lambda o: o[1])
    st, key = object_key(address)
    folder = _key(ctx.root)
    if folder.endswith(".safetensors"):  # the address names the one object
        folder = folder.rpartition("/")[0]
    folder = folder.strip("/") + "/" if folder.strip("/") else ""

    def get(key: str, start: int, length: int, where: str = address) -> int:
        return len(call(where, lambda: obstore.get_range(st, key, start=start, length=length)))

    listed = []
    for _ in range(3):
        started = time.perf_counter()
        call(ctx.root, lambda: obstore.list_with_delimiter(st, folder or None))
        listed.append(time.perf_counter() - started)
    waits: list[float] = []
    step = max(1, largest // FIRST_BYTE_GETS)
    while len(waits) < FIRST_BYTE_GETS and time.monotonic() < deadline - 0.8 * seconds:
        started = time.perf_counter()
        get(key, (len(waits) * step) % largest, 1)
        waits.append(time.perf_counter() - started)
    per_connection: list[RatePoint] = []
    for size in REQUEST_SIZES:
        left = deadline - 0.6 * seconds - time.monotonic()
        # A size that would overrun its share at the last size's rate is left out (a
        # store serving a few MB/s would otherwise take minutes on its 64 MiB GET).
        if size > largest or (per_connection and size / per_connection[-1].bytes_per_s > left):
            break
        started = time.perf_counter()
        got = get(key, 0, size)
        per_connection.append(RatePoint(size, got / (time.perf_counter() - started)))
    flights = _scan(get, objects, deadline)
    ceiling = max((p.bytes_per_s for p in flights), default=0.0)
    saturates = next((p.gets_in_flight for p in flights if p.bytes_per_s >= 0.9 * ceiling), None)
    bound, why = _bound(per_connection, flights, statistics.median(waits) if waits else 0.0)
    waits.sort()
    return ObjectStoreProbe(
        ctx.root,
        len(objects),
        sum(size for _, size in objects),
        largest,
        statistics.median(listed),
        statistics.median(waits) if waits else 0.0,
        waits[min(len(waits) - 1, int(0.99 * len(waits)))] if waits else 0.0,
        len(waits),
        per_connection,
        flights,
        ceiling,
        saturates,
        bound,
        why,
    )


def _scan(get: Any, objects: list[tuple[str, int]], deadline: float) -> list[FlightPoint]:
    """The rate at each number of GETs in flight, each level running two GETs per slot
    over the model's objects, until the rate stops rising or the time is out."""
    size = min(SCAN_REQUEST_BYTES, max(s for _, s in objects))
    ranges = [
        (address, _key(address), offset, min(size, total - offset))
        for address, total in objects
        for offset in range(0, total, size)
    ]
    points: list[FlightPoint] = []
    for n in IN_FLIGHT:
        # Each level reads twice the last one's bytes: run it only where the last rate
        # says it ends before the deadline.
        if points and 2 * n * size / points[-1].bytes_per_s > deadline - time.monotonic():
            break
        jobs = [ranges[i % len(ranges)] for i in range(2 * n)]
        started = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            got = sum(pool.map(lambda r: get(r[1], r[2], r[3], r[0]), jobs))
        points.append(FlightPoint(n, size, got / (time.perf_counter() - started)))
        if len(points) >= 3 and all(
            points[-i].bytes_per_s < RISING * points[-i - 1].bytes_per_s for i in (1, 2)
        ):
            break  # two doublings that added little: saturated
    return points


def _key(address: str) -> str:
    return split_address(address)[2]


def _bound(
    per_connection: list[RatePoint], flights: list[FlightPoint], wait: float
) -> tuple[str, str]:
    """The bound the figures name, and why in words."""
    if not flights:
        return "unknown", "the scan of GETs in flight did not run"
    top, one = flights[-1], flights[0]
    rising = len(flights) >= 2 and top.bytes_per_s >= RISING * flights[-2].bytes_per_s
    if rising:
        return (
            "per-connection bandwidth",
            f"the rate still rose at {top.gets_in_flight} GETs in flight"
            f" ({format_rate(top.bytes_per_s)}, {format_rate(one.bytes_per_s)} with one):"
            " more GETs in flight would go faster",
        )
    if per_connection:
        small, big = per_connection[0], per_connection[-1]
        if big.request_bytes > small.request_bytes and small.bytes_per_s < 0.5 * big.bytes_per_s:
            return (
                "request latency",
                f"{format_bytes(small.request_bytes)} GETs reach {format_rate(small.bytes_per_s)}"
                f" and {format_bytes(big.request_bytes)} ones {format_rate(big.bytes_per_s)}:"
                f" each waits {wait * 1e3:.0f} ms for its first byte; requests of 8 MiB or more,"
                " many in flight, hide it",
            )
    return (
        "link",
        f"the rate stops rising at {format_rate(max(p.bytes_per_s for p in flights))}"
        " however many GETs are in flight: the node's network or the store's cap for"
        " this client",
    )


def _lines(block: dict[str, Any]) -> Lines:
    conn = "; ".join(
        f"{format_bytes(p['request_bytes'])} {format_rate(p['bytes_per_s'])}"
        for p in block["per_connection"]
    )
    flights = "; ".join(
        f"{p['gets_in_flight']}: {format_rate(p['bytes_per_s'])}" for p in block["flights"]
    )
    sat = block.get("saturates_at")
    return [
        (
            "objects",
            f"{block['objects']} ({format_bytes(block['stored_bytes'])}; largest"
            f" {format_bytes(block['largest_bytes'])}); listing {block['list_s'] * 1e3:.0f} ms",
        ),
        (
            "first byte",
            f"p50 {block['first_byte_p50_s'] * 1e3:.1f} ms, p99"
            f" {block['first_byte_p99_s'] * 1e3:.1f} ms ({block['first_byte_gets']} GETs)",
        ),
        ("one conn", conn or "not measured"),
        ("in flight", flights or "not measured"),
        (
            "ceiling",
            f"{format_rate(block['ceiling_bytes_per_s'])}"
            + (f" from {sat} GETs in flight" if sat else ""),
        ),
        ("bound", f"{block['bound']}: {block['bound_reason']}"),
    ]


def concurrency_hint(result: Any) -> int | None:
    """The GETs in flight the probe found the rate stops rising at (a probe result), for
    the strategies that take the probe's settings."""
    data = getattr(result, "data", None)
    return getattr(data, "saturates_at", None) if data is not None else None


def _facts(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "store_ceiling_bytes_per_s": block["ceiling_bytes_per_s"],
        "store_saturates_at": block["saturates_at"],
        "store_bound": block["bound"],
        "store_first_byte_s": block["first_byte_p50_s"],
    }


SPEC = ProbeSpec(
    "object_store",
    "the object store",
    ObjectStoreProbe,
    _run,
    _lines,
    budget_share=0.3,
    facts=_facts,
    sources=OBJECT_STORES,
)
