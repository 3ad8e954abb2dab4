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
from loadscope.probes.fio_probe import fio_block
from loadscope.probes.gpu import SPEC as GPUS
from loadscope.probes.gpu import GpuFacts
from loadscope.probes.iobench import (
    LatencyResult,
    ThroughputResult,
)
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
        return {
            "schema_version": self.schema_version,
            "target": self.target,
            "budget_s": self.budget_s,
            "elapsed_s": round(self.elapsed_s, 3),
            "system": self.system.to_dict(),
            "files": [f.to_dict() for f in self.files],
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
        found = self.registered.get(GPUS.key)
        return found if found is not None else skipped(GPUS.key)

    def fio_dict(self) -> dict[str, Any]:
        """fio's block: each job beside the probe's own figure (``probes/fio_probe.py``)."""
        return fio_block(self.fio, self.fio_jobs, self.latency, self.throughput)

    def to_json(self) -> str:
        return json.dumps(to_jsonable(self.to_dict()), indent=2)

    @property
    def primary(self) -> FileProbe:
        """The largest file: the one throughput is measured on."""
        return max(self.files, key=lambda f: f.size_bytes)
