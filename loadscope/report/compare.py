"""``loadscope compare``: one row per doctor report, outliers marked — onboarding a cluster.

A node is an outlier when its best measured cold throughput is under half the
reference, or its cold 4 KiB latency is over twice the reference: the nodes to look
at before a job sits on them. The reference is the median of all nodes from three
nodes up; with two it is the better node (the median of two is their mean, which no
node can be twice or half of: an 84 us node beside a 3.3 ms one was never flagged).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from loadscope.base.units import format_bytes, format_rate, format_us


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


def row_of(source: str, doc: dict[str, Any]) -> Row:
    probe = doc.get("probe") or {}
    files = probe.get("files") or [{}]
    mount = files[0].get("mount") or {}
    lat = probe.get("latency") or {}
    cold = [
        s
        for s in (doc.get("bench") or {}).get("summary", [])
        if s.get("cache") == "cold" and s.get("median_bytes_per_s")
    ]
    best = max(cold, key=lambda s: s["median_bytes_per_s"], default=None)
    return Row(
        source=source,
        host=(doc.get("host") or {}).get("hostname", "?"),
        storage_class=mount.get("storage_class", "?"),
        latency_p50_us=lat.get("p50_us"),
        best_strategy=best["strategy"] if best else None,
        best_bytes_per_s=best["median_bytes_per_s"] if best else None,
        verdict=(doc.get("verdict") or {}).get("status", "?"),
        outlier=[],
        target=str((doc.get("target") or {}).get("spec", "?")),
        total_bytes=(doc.get("target") or {}).get("total_bytes"),
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
    header = f"{'host':<18}{'storage':<14}{'p50 4K':>9}  {'best strategy':<16}{'rate':>10}  verdict"
    lines = []
    targets = {(r.target, r.total_bytes) for r in rows}
    if len(targets) == 1:
        ((spec, size),) = targets
        lines.append(f"target: {spec}" + (f" ({format_bytes(size)})" if size else ""))
    else:  # different models: the comparison says so, row by row
        lines.append(
            "targets differ: "
            + "; ".join(
                f"{r.host}: {r.target}"
                + (f" ({format_bytes(r.total_bytes)})" if r.total_bytes else "")
                for r in rows
            )
        )
    lines += [header, "-" * len(header)]
    for r in rows:
        lat = format_us(r.latency_p50_us) if r.latency_p50_us else "-"
        rate = format_rate(r.best_bytes_per_s) if r.best_bytes_per_s else "-"
        mark = "  <- " + "; ".join(r.outlier) if r.outlier else ""
        lines.append(
            f"{r.host[:17]:<18}{r.storage_class:<14}{lat:>9}  {r.best_strategy or '-':<16}"
            f"{rate:>10}  {r.verdict}{mark}"
        )
    return "\n".join(lines)
