"""The fleet report: each node's result as rank 0 reads it, and the comparison it writes.

Owns :class:`NodeResult` (one node's report or failure, as it travels through the store
and is checked against the published schema on arrival), :class:`Fleet`, and what rank
0 writes to ``--out``: one JSON report per node plus ``fleet.json``, ``fleet.md`` and
``fleet.html`` with outliers marked, and the terminal table.

May import: ``loadscope.report``, ``loadscope.base``, and
:mod:`~loadscope.diagnosis.doctor_report` (the size a report can be).
"""

from __future__ import annotations

import contextlib
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadscope.base.errors import ExitCode
from loadscope.base.units import format_bytes
from loadscope.diagnosis.doctor_report import MAX_REPORT_BYTES
from loadscope.report.compare import (
    FleetNode,
    FleetSummary,
    Row,
    compare,
    row_of,
    target_line,
    to_text,
)
from loadscope.report.schema import SchemaError
from loadscope.report.schema import check as check_schema


@dataclass(slots=True)
class NodeResult:
    rank: int
    host: str
    status: str  # "ok" | "failed"
    reason: str | None = None
    report: dict[str, Any] | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "rank": self.rank,
                "host": self.host,
                "status": self.status,
                "reason": self.reason,
                "report": self.report,
            },
            default=str,
        )

    @classmethod
    def from_json(cls, text: str, rank: int) -> NodeResult:
        """Rank ``rank``'s result as it sent it, checked against the published schema: a
        node whose result is not one (truncated, hostile, another version) is a failed
        node saying why, never the end of the fleet report for the others."""
        if len(text) > MAX_REPORT_BYTES:
            return cls(
                rank,
                "?",
                "failed",
                reason=f"its result is {format_bytes(len(text))}, over the"
                f" {format_bytes(MAX_REPORT_BYTES)} a report can be",
            )
        try:
            d = json.loads(text)
            check_schema(d, "node")
            report = d.get("report")
            if report is not None:
                check_schema(report, "doctor")
        except RecursionError:
            return cls(rank, "?", "failed", reason="its result is JSON nested too deeply")
        except (ValueError, SchemaError) as exc:
            return cls(rank, "?", "failed", reason=f"its result is not a loadscope report: {exc}")
        if d["rank"] != rank:
            return cls(rank, d["host"], "failed", reason=f"its result says it is rank {d['rank']}")
        return cls(rank, d["host"], d["status"], d.get("reason"), report)


@dataclass(slots=True)
class Fleet:
    nodes: list[NodeResult]
    rows: list[Row] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)


def node_name(node: NodeResult) -> str:
    return f"node-{node.rank}" + (f" ({node.host})" if node.host and node.host != "?" else "")


def fleet_rows(nodes: list[NodeResult]) -> list[Row]:
    rows = []
    for n in nodes:
        if n.status == "ok" and n.report:
            row = row_of(node_name(n), n.report)
            row.host = node_name(n)  # two nodes may share a hostname (containers, one VM)
            rows.append(row)
    return compare(rows)


def _clear_previous_run(out_dir: Path) -> None:
    """Remove the node reports an earlier run listed in its fleet.json (and only those):
    a node that fails this time must not be compared from last time's file."""
    try:
        previous = json.loads((out_dir / "fleet.json").read_text(encoding="utf-8"))
        check_schema(previous, "fleet")  # not a fleet.json of ours: remove nothing
    except (OSError, ValueError, RecursionError):
        return
    for node in previous["nodes"]:
        name = node.get("report")
        if isinstance(name, str) and re.fullmatch(r"node-\d+\.json", name):
            with contextlib.suppress(OSError):
                (out_dir / name).unlink()


def write_fleet(nodes: list[NodeResult], out_dir: Path) -> Fleet:
    out_dir.mkdir(parents=True, exist_ok=True)
    _clear_previous_run(out_dir)
    fleet = Fleet(nodes, fleet_rows(nodes))
    for n in nodes:
        if n.report is not None:
            path = out_dir / f"node-{n.rank}.json"
            path.write_text(json.dumps(n.report, indent=2, default=str) + "\n")
            fleet.written.append(path)
    summary = FleetSummary(
        nodes=tuple(
            FleetNode(
                n.rank,
                node_name(n),
                n.status,
                n.reason,
                f"node-{n.rank}.json" if n.report is not None else None,
            )
            for n in nodes
        ),
        outliers={r.source: r.outlier for r in fleet.rows if r.outlier},
    )
    for name, text in (
        ("fleet.json", json.dumps(summary.to_dict(), indent=2)),
        ("fleet.md", fleet_markdown(fleet)),
        ("fleet.html", fleet_html(fleet)),
    ):
        path = out_dir / name
        path.write_text(text + "\n")
        fleet.written.append(path)
    return fleet


def _findings(fleet: Fleet) -> list[str]:
    lines = [f"{r.source}: {'; '.join(r.outlier)}" for r in fleet.rows if r.outlier]
    lines += [f"{node_name(n)}: failed: {n.reason}" for n in fleet.nodes if n.status != "ok"]
    return lines


def fleet_text(fleet: Fleet) -> str:
    body = to_text(fleet.rows) if fleet.rows else "(no node reported)"
    findings = _findings(fleet)
    return body + ("\n\n" + "\n".join(findings) if findings else "\n\nno outliers, no failures")


def fleet_markdown(fleet: Fleet) -> str:
    ok = sum(n.status == "ok" for n in fleet.nodes)
    lines = [
        "# loadscope fleet report",
        "",
        f"{ok} of {len(fleet.nodes)} nodes reported."
        + (f" {_capital(target_line(fleet.rows))}." if fleet.rows else ""),
        "",
        "| node | storage | p50 4 KiB | best cold strategy | rate | verdict | outlier |",
        "|---|---|---|---|---|---|---|",
    ]
    by_source = {r.source: r for r in fleet.rows}
    for n in fleet.nodes:
        r = by_source.get(node_name(n))
        if r is None:
            lines.append(f"| {node_name(n)} | - | - | - | - | **failed**: {n.reason} | |")
            continue
        lat = f"{r.latency_p50_us:.0f} µs" if r.latency_p50_us else "-"
        rate = f"{r.best_bytes_per_s / 1e6:.0f} MB/s" if r.best_bytes_per_s else "-"
        mark = "**" + "; ".join(r.outlier) + "**" if r.outlier else ""
        lines.append(
            f"| {r.source} | {r.storage_class} | {lat} | {r.best_strategy or '-'} | {rate}"
            f" | {r.verdict} | {mark} |"
        )
    findings = _findings(fleet)
    if findings:
        lines += ["", "## Findings", "", *(f"- {f}" for f in findings)]
    return "\n".join(lines)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def fleet_html(fleet: Fleet) -> str:
    e = html.escape
    rows = []
    by_source = {r.source: r for r in fleet.rows}
    for n in fleet.nodes:
        r = by_source.get(node_name(n))
        if r is None:
            rows.append(
                f'<tr class="failed"><td>{e(node_name(n))}</td>'
                f'<td colspan="5">failed: {e(n.reason or "")}</td><td></td></tr>'
            )
            continue
        lat = f"{r.latency_p50_us:.0f} µs" if r.latency_p50_us else "-"
        rate = f"{r.best_bytes_per_s / 1e6:.0f} MB/s" if r.best_bytes_per_s else "-"
        cls = ' class="outlier"' if r.outlier else ""
        rows.append(
            f"<tr{cls}><td>{e(r.source)}</td><td>{e(r.storage_class)}</td><td>{lat}</td>"
            f"<td>{e(r.best_strategy or '-')}</td><td>{rate}</td><td>{e(r.verdict)}</td>"
            f"<td>{e('; '.join(r.outlier))}</td></tr>"
        )
    findings = "".join(f"<li>{e(f)}</li>" for f in _findings(fleet))
    ok = sum(n.status == "ok" for n in fleet.nodes)
    target = f" {e(_capital(target_line(fleet.rows)))}." if fleet.rows else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>loadscope fleet report</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; }}
tr.outlier td {{ background: #fff3cd; }} tr.failed td {{ background: #f8d7da; }}
</style></head><body>
<h1>loadscope fleet report</h1>
<p>{ok} of {len(fleet.nodes)} nodes reported.{target}</p>
<table><thead><tr><th>node</th><th>storage</th><th>p50 4 KiB</th><th>best cold strategy</th>
<th>rate</th><th>verdict</th><th>outlier</th></tr></thead>
<tbody>{"".join(rows)}</tbody></table>
{f"<h2>Findings</h2><ul>{findings}</ul>" if findings else "<p>No outliers, no failures.</p>"}
</body></html>"""


def exit_code(fleet: Fleet | None) -> ExitCode:
    """On rank 0, 1 when a node failed (the fleet report is written and names it; torchrun
    then prints its own ChildFailedError). Exiting 0 there would also leave torchrun's agent
    waiting out its 300 s exit barrier for the dead node's agent."""
    if fleet is not None and any(n.status != "ok" for n in fleet.nodes):
        return ExitCode.FAILURE
    return ExitCode.OK
