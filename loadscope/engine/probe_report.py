"""The probe's report (``loadscope.engine.probe_report``): one typed, versioned record of
every probe run on a target's files, and its JSON.

Owns :class:`ProbeReport` and the records it holds (:class:`StorageProbe`,
:class:`FileProbe`; the registered probes' results by key: the HF cache's, the GPUs', the
local disks').
May import: ``loadscope.probes``, ``loadscope.base``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from loadscope.probes import fio
from loadscope.probes.filestorage import FileProbe as FileProbe  # noqa: PLC0414
from loadscope.probes.filestorage import StorageProbe as StorageProbe  # noqa: PLC0414
from loadscope.probes.fio import FioJob
from loadscope.probes.gpu import GpuFacts
from loadscope.probes.iobench import (
    LatencyResult,
    ThroughputResult,
)
from loadscope.probes.pagecache import Residency
from loadscope.probes.registry import skipped
from loadscope.probes.result import ProbeResult, Status, to_jsonable
from loadscope.probes.system import SystemInfo

SCHEMA_VERSION = 1


@dataclass(slots=True)
class ProbeReport:
    target: dict[str, Any]
    budget_s: float
    elapsed_s: float
    system: ProbeResult[SystemInfo]
    files: list[FileProbe]
    latency: ProbeResult[LatencyResult]
    throughput: ProbeResult[ThroughputResult]
    notes: list[str] = field(default_factory=list)
    #: The registered probes' results, by key (``probes/registry.py``): the HF cache's,
    #: the GPUs', the local disks' and any a plugin module added.
    registered: dict[str, ProbeResult[Any]] = field(default_factory=dict)
    #: Set when a read of the model got no answer: what was read and for how long.
    stalled: str | None = None
    #: The fio jobs that reproduce the measurements (always, once they were measured),
    #: and fio's figures beside the probe's when ``--fio`` ran them.
    fio_jobs: list[fio.FioJob] = field(default_factory=list)
    fio: ProbeResult[list[fio.FioMeasure]] = field(
        default_factory=lambda: ProbeResult("fio", Status.SKIPPED, reason="not asked for (--fio)")
    )
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        files = []
        for f in self.files:
            files.append(
                {
                    "path": f.path,
                    "size_bytes": f.size_bytes,
                    "mount": f.storage.mount.to_dict(),
                    "device": f.storage.device.to_dict(),
                    "bdi": f.storage.bdi.to_dict(),
                    "fuse_connection": f.storage.fuse.to_dict(),
                    "block_stat_path": f.storage.block_stat_path,
                    "blind_signals": f.storage.blind_signals,
                    "residency": _residency_dict(f.residency),
                }
            )
        return {
            "schema_version": self.schema_version,
            "target": self.target,
            "budget_s": self.budget_s,
            "elapsed_s": round(self.elapsed_s, 3),
            "system": self.system.to_dict(),
            "files": files,
            "latency": self.latency.to_dict(),
            "throughput": self.throughput.to_dict(),
            **{key: r.to_dict() for key, r in self.registered.items()},
            "notes": self.notes,
            **({"stalled": self.stalled} if self.stalled else {}),
            "fio": self.fio_dict(),
        }

    @property
    def gpus(self) -> ProbeResult[GpuFacts]:
        """The GPU probe's result (registered as ``gpus``)."""
        found = self.registered.get("gpus")
        return found if found is not None else skipped("gpus")

    def probe_value(self, job: FioJob) -> float | None:
        """The probe's own figure ``job`` stands beside."""
        if job.measures == "latency":
            return self.latency.data.p50_us if self.latency.data else None
        thr = self.throughput.data
        if thr is None:
            return None
        if job.measures == "sequential":
            same = [p for p in thr.sequential if p.block_bytes == job.block_bytes]
            return same[0].bytes_per_s if same else None
        best = max(thr.parallel, key=lambda p: p.bytes_per_s, default=None)
        return best.bytes_per_s if best else None

    def fio_dict(self) -> dict[str, Any]:
        measured = {m.job: m for m in self.fio.data or []}
        jobs = []
        for job in self.fio_jobs:
            mine = self.probe_value(job)
            got = measured.get(job)
            jobs.append(
                {
                    "measures": job.measures,
                    "label": job.label,
                    **({"block_bytes": job.block_bytes} if job.block_bytes else {}),
                    "metric": job.metric,
                    "command": fio.command_line(job),
                    "probe": mine,
                    "fio": got.value if got else None,
                    "fio_over_probe": got.value / mine if got and mine else None,
                    "detail": got.detail if got else None,
                }
            )
        return {"status": self.fio.status.value, "reason": self.fio.reason, "jobs": jobs}

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self.to_dict()), indent=2)

    @property
    def primary(self) -> FileProbe:
        """The largest file: the one throughput is measured on."""
        return max(self.files, key=lambda f: f.size_bytes)


def _residency_dict(r: ProbeResult[Residency]) -> dict[str, Any]:
    out = r.to_dict()
    if r.data is not None:
        out["fraction"] = r.data.fraction
        out["resident_bytes"] = r.data.resident_bytes
    return out
