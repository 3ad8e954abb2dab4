"""``loadscope compare``: one row per doctor report, outliers marked — onboarding a cluster.

A node is an outlier when its best measured cold throughput is under half the
reference, or its cold 4 KiB latency is over twice the reference: the nodes to look
at before a job sits on them. Also the fleet summary's types (``fleet.json``), which the
published schema describes. The reference is the median of all nodes from three
nodes up; with two it is the better node (the median of two is their mean, which no
node can be twice or half of: an 84 us node beside a 3.3 ms one was never flagged).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from loadscope.base.units import format_bytes, format_rate, format_us
from loadscope.probes.filestorage import storage_class_of
from loadscope.probes.iobench import latency_p50


@dataclass(frozen=True, slots=True)
class FleetNode:
    """One node in ``fleet.json``: its rank, name, outcome and report file (None when it
    sent none)."""

    rank: int
    name: str
    status: str  # "ok" | "failed"
    reason: str | None
    report: str | None


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """``fleet.json``: every node, and the outliers by report, with why each is one."""

    nodes: tuple[FleetNode, ...]
    outliers: dict[str, list[str]]
    schema_version: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "nodes": [
                {
                    "rank": n.rank,
                    "name": n.name,
                    "status": n.status,
                    "reason": n.reason,
                    "report": n.report,
                }
                for n in self.nodes
            ],
            "outliers": self.outliers,
        }


@dataclass(slots=True)
class Row:
    source: str
    host: str
    storage_class: str
    latency_p50_us: float | None
    best_strategy: str | None
    best_bytes_per_s: float | None
    verdict: str
    outlier: list[str]
    #: What the node measured: the target as it was named, and its size.
    target: str = "?"
    total_bytes: int | None = None


def _text(value: Any, default: str = "?") -> str:
    """A field a row shows as text: a string as it is, anything else (a hostile or broken
    report's number, list or object) as the default, never an exception in a renderer."""
    return value if isinstance(value, str) and value else default


def _number(value: Any) -> float | None:
    """A field a row computes with: a positive finite number, else None (not measured)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value < float("inf") else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def row_of(source: str, doc: dict[str, Any]) -> Row:
    """One report's row; every field read defensively (a node's report is another
    machine's word: a wrong type shows as "?" or "-", it does not end the comparison)."""
    probe = _object(doc.get("probe"))
    summary = _object(doc.get("bench")).get("summary")
    cold = [
        s
        for s in (summary if isinstance(summary, list) else [])
        if isinstance(s, dict) and s.get("cache") == "cold" and _number(s.get("median_bytes_per_s"))
    ]
    best = max(cold, key=lambda s: float(s["median_bytes_per_s"]), default=None)
    target = _object(doc.get("target"))
    size = target.get("total_bytes")
    return Row(
        source=source,
        host=_text(_object(doc.get("host")).get("hostname")),
        storage_class=_text(storage_class_of(probe)),
        latency_p50_us=latency_p50(_object(probe.get("latency"))),
        best_strategy=_text(best.get("strategy")) if best else None,
        best_bytes_per_s=_number(best.get("median_bytes_per_s")) if best else None,
        verdict=_text(_object(doc.get("verdict")).get("status")),
        outlier=[],
        target=_text(target.get("spec")),
        total_bytes=size if isinstance(size, int) and not isinstance(size, bool) else None,
    )


def labels(rows: list[Row]) -> list[str]:
    """What names each row: its host, or, where two rows share a host (containers, one VM
    run twice), the host and as much of the report's path as tells them apart
    (``vm (before/report.json)``, ``vm (after/report.json)``)."""
    out = []
    for r in rows:
        twins = [t.source for t in rows if t.host == r.host]
        out.append(r.host if len(twins) == 1 else f"{r.host} ({_tail(r.source, twins)})")
    return out


def _tail(source: str, among: list[str]) -> str:
    """The fewest trailing path parts of ``source`` that no other of ``among`` ends with."""
    parts = source.split("/")
    for n in range(1, len(parts) + 1):
        tail = "/".join(parts[-n:])
        if sum(s == tail or s.endswith("/" + tail) for s in among) == 1:
            return tail
    return source


def target_line(rows: list[Row]) -> str:
    """The model every row measured, or, when they differ, each row's."""

    def named(row: Row) -> str:
        return row.target + (f" ({format_bytes(row.total_bytes)})" if row.total_bytes else "")

    if len({(r.target, r.total_bytes) for r in rows}) == 1:
        return f"target: {named(rows[0])}"
    return "targets differ: " + "; ".join(
        f"{label}: {named(r)}" for label, r in zip(labels(rows), rows, strict=True)
    )


def _reference(values: list[float], best: float) -> tuple[float, str]:
    if len(values) >= 3:
        return statistics.median(values), "the median"
    return best, "the better node"


def compare(rows: list[Row]) -> list[Row]:
    rates = [r.best_bytes_per_s for r in rows if r.best_bytes_per_s]
    lats = [r.latency_p50_us for r in rows if r.latency_p50_us]
    if len(rates) >= 2:
        ref, what = _reference(rates, max(rates))
        for r in rows:
            if r.best_bytes_per_s and r.best_bytes_per_s < 0.5 * ref:
                r.outlier.append(f"cold throughput {r.best_bytes_per_s / ref:.0%} of {what}")
    if len(lats) >= 2:
        ref, what = _reference(lats, min(lats))
        for r in rows:
            if r.latency_p50_us and r.latency_p50_us > 2 * ref:
                r.outlier.append(f"4 KiB latency {r.latency_p50_us / ref:.1f}x {what}")
    return rows


def to_text(rows: list[Row]) -> str:
    if not rows:
        return "(no report to compare)"
    names = labels(rows)
    width = max(18, min(40, max(len(n) for n in names) + 1))
    header = (
        f"{'host':<{width}}{'storage':<14}{'p50 4K':>9}  {'best strategy':<16}{'rate':>10}  verdict"
    )
    lines = [target_line(rows), header, "-" * len(header)]
    for name, r in zip(names, rows, strict=True):
        lat = format_us(r.latency_p50_us) if r.latency_p50_us else "-"
        rate = format_rate(r.best_bytes_per_s) if r.best_bytes_per_s else "-"
        mark = "  <- " + "; ".join(r.outlier) if r.outlier else ""
        lines.append(
            f"{name[: width - 1]:<{width}}{r.storage_class:<14}{lat:>9}  "
            f"{r.best_strategy or '-':<16}{rate:>10}  {r.verdict}{mark}"
        )
    return "\n".join(lines)
