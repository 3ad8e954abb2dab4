"""``loadscope probe``: run every storage probe on a target's weight files within a time budget.

The probes themselves live in ``loadscope.probes``; this module decides what to
run on which file, splits the budget, and assembles one typed, versioned
report (:mod:`~loadscope.engine.probe_report`; its terminal summary is
:mod:`loadscope.report.probe_text`'s). Fixed-cost probes (system, mounts, devices,
residency, the registered fixed-cost probes: HF cache, GPUs) run first; the measured ones
share what is left of the budget: 15% cold latency, 45% sequential throughput by block
size, 35% parallel readers (and the best of them again into fresh RAM); fio (when asked)
and the registered probes that run after the reads (the local disks) come last.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from loadscope.base.safeio import StorageStalled, bounded, stall_timeout_s
from loadscope.engine.probe_report import FileProbe, ProbeReport, StorageProbe
from loadscope.engine.trials import target_record
from loadscope.model.targets import Target
from loadscope.probes import mounts
from loadscope.probes.coldreads import LATENCY, LATENCY_SHARE, THROUGHPUT
from loadscope.probes.filestorage import classified, file_probes, mount_and_class
from loadscope.probes.fio_probe import SPEC as FIO
from loadscope.probes.fio_probe import jobs_from
from loadscope.probes.iobench import IoBench, o_direct_support
from loadscope.probes.iosampler import IoSampler
from loadscope.probes.pagecache import ColdCache, keeps_pages
from loadscope.probes.registry import PROBES, measured_share, run_registered
from loadscope.probes.result import ProbeResult, Status, Unavailable, run_probe
from loadscope.probes.sources import supports
from loadscope.probes.spec import ProbeContext, ProbeSpec
from loadscope.probes.system import SPEC as SYSTEM

DEFAULT_BUDGET_S = 15.0
#: Kept back from the budget for assembling the report and closing files.
_MARGIN_S = 0.3
#: A probe read may take this long past its share of the budget before it is a stall.
PROBE_STALL_GRACE_S = 10.0
T = TypeVar("T")

Progress = Callable[[str], None]


def run_probes(
    target: Target,
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    allow_drop_caches: bool = False,
    progress: Progress | None = None,
    local_disks: bool = True,
    run_fio: bool = False,
) -> ProbeReport:
    """Probe the storage under ``target``; never raises for a probe that cannot run. With
    ``run_fio``, the fio jobs that reproduce the latency, sequential and parallel
    measurements run after them (outside the budget: up to ~30 s more) on the largest file."""
    say = progress or (lambda _msg: None)
    start = time.monotonic()
    deadline = start + budget_s - _MARGIN_S
    sizes = tuple((target.address(f), f.size_bytes) for f in target.files)
    say("system")
    system = _core(SYSTEM, ProbeContext(str(target.root), sizes, "unknown", False, 0.0))
    wsl = bool(system.data and system.data.wsl)
    if not target.on_files:  # another source: the machine's probes and its own
        return _source_probes(target, budget_s, start, system, say, local_disks)
    say("mounts and devices")
    table_result = run_probe("mountinfo", mounts.read_mountinfo)
    table = table_result.data or []
    files = file_probes(sizes, table_result, wsl)
    primary = max(files, key=lambda f: f.size_bytes)
    klass = primary.storage.mount.data.storage_class if primary.storage.mount.data else "unknown"
    context = functools.partial(
        ProbeContext,
        str(target.root),
        sizes,
        klass,
        wsl,
        classify=functools.partial(classified, table, wsl),
        mount_of=functools.partial(mount_and_class, table, wsl),
    )
    skip = {} if local_disks else {"local_disks": "not asked for"}
    registered = run_registered(context, 0.0, say, phase="fixed", skip=skip)
    reads = _Reads(primary, files, klass, allow_drop_caches)
    # The registered probes that read take their shares first; the core's reads the rest.
    whole = max(0.0, deadline - time.monotonic())
    remaining = whole * (1.0 - measured_share())
    deadline -= whole - remaining
    say("cold latency")
    latency = _core(LATENCY, context(LATENCY_SHARE * remaining, reads=reads))
    say("throughput")
    headroom = system.data.memory_headroom_bytes if system.data else None
    throughput = _core(
        THROUGHPUT, context(remaining, reads=reads, deadline=deadline, headroom=headroom)
    )
    if klass in MAY_NOT_KEEP_PAGES:
        say("page cache")
        reads.ask_keeps_pages(primary)
    jobs = jobs_from(primary.path, primary.size_bytes, reads.direct, throughput, latency)
    if run_fio:
        say("fio")
        fio_result = _core(FIO, context(0.0, reads=reads, earlier={"fio_jobs": jobs}))
    else:
        fio_result = ProbeResult("fio", Status.SKIPPED, reason="not asked for (--fio)")
    registered |= run_registered(context, whole, say, phase="measured", skip=skip)
    registered |= run_registered(context, 0.0, say, phase="after", skip=skip)
    return ProbeReport(
        target=_target_dict(target),
        budget_s=budget_s,
        elapsed_s=time.monotonic() - start,
        system=system,
        files=files,
        latency=latency,
        throughput=throughput,
        notes=reads.notes,
        registered=registered,
        stalled=reads.stalled[0] if reads.stalled else None,
        fio_jobs=jobs,
        fio=fio_result,
    )


#: The storage whose page cache may not hold what was read (FUSE, network filesystems).
MAY_NOT_KEEP_PAGES = ("fuse", "network-fs")


def _source_probes(
    target: Target,
    budget_s: float,
    start: float,
    system: ProbeResult[Any],
    say: Progress,
    local_disks: bool,
) -> ProbeReport:
    """A model in another source than files (``probes/sources.py``): the machine's probes
    and the ones that declare the source, which share the measured budget; the file
    probes (the mounts under the files, cold latency, throughput, fio) say why not. (The
    mount table is read for the local disks a copy could go to.)"""
    wsl = bool(system.data and system.data.wsl)
    table = run_probe("mountinfo", mounts.read_mountinfo).data or []
    context = functools.partial(
        ProbeContext,
        target.spec,
        tuple((target.address(f), f.size_bytes) for f in target.files),
        target.source,
        wsl,
        classify=functools.partial(classified, table, wsl),
        mount_of=functools.partial(mount_and_class, table, wsl),
        source=target.source,
    )
    skip = {} if local_disks else {"local_disks": "not asked for"}
    registered = run_registered(context, 0.0, say, phase="fixed", skip=skip)
    mine = [
        s for s in PROBES.values() if s.phase == "measured" and supports(s.sources, target.source)
    ]
    # No file reads here: the source's own probes take the whole measured budget.
    whole = max(0.0, start + budget_s - _MARGIN_S - time.monotonic())
    share = sum(s.budget_share for s in mine) or 1.0
    registered |= run_registered(context, whole / share, say, phase="measured", skip=skip)
    registered |= run_registered(context, 0.0, say, phase="after", skip=skip)
    why = f"{target.spec} is in {target.detail or target.source}, not in files on a mount here"

    def not_files(name: str) -> ProbeResult[Any]:
        return ProbeResult(name, Status.SKIPPED, reason=f"reads files; {why}")

    return ProbeReport(
        target=_target_dict(target),
        budget_s=budget_s,
        elapsed_s=time.monotonic() - start,
        system=system,
        files=[],
        latency=not_files("latency"),
        throughput=not_files("throughput"),
        notes=[],
        registered=registered,
        stalled=None,
        fio_jobs=[],
        fio=not_files("fio"),
    )


class _Reads:
    """The measured reads of the model: how they bypass or evict the cache, and their
    guard. Every read may meet storage that never answers: each is bounded (its share of
    the budget plus a grace), and after one stall the rest are skipped."""

    def __init__(
        self, primary: FileProbe, files: list[FileProbe], klass: str, allow_drop_caches: bool
    ) -> None:
        self.remote = ""
        if klass in ("network-fs", "fuse", "wsl"):
            self.remote = (
                "eviction reaches this machine's page cache only;"
                " the server's or daemon's cache may still serve reads"
            )
        cold = ColdCache(allow_drop_caches=allow_drop_caches, remote_note=self.remote)
        self.grace = min(stall_timeout_s(), PROBE_STALL_GRACE_S)
        self.stalled: list[str] = []
        self.notes: list[str] = []
        try:
            self.direct, why = bounded(
                lambda: o_direct_support(primary.path),
                self.grace,
                lambda: f"{primary.path} at offset 0",
            )
        except StorageStalled as exc:
            self.stalled.append(exc.message)
            self.direct, why = False, "O_DIRECT not tried"
        if not self.direct and not self.stalled:
            self.notes.append(f"{why}: measuring with evict-then-read (buffered, readahead on)")
        stat_path = primary.storage.block_stat_path
        self.bench = IoBench(
            [(f.path, f.size_bytes) for f in files],
            cold=cold,
            direct=self.direct,
            sampler_factory=(
                (lambda: IoSampler(block_stat_path=Path(stat_path))) if stat_path else None
            ),
        )

    def ask_keeps_pages(self, primary: FileProbe) -> None:
        """Whether ``primary``'s mount keeps read pages to the next open, asked after the
        other reads (none after a stall; a stall here is the probes' stall)."""
        if self.stalled:
            return
        try:
            primary.storage.keeps_pages = keeps_pages(primary.path, timeout_s=self.grace)
        except StorageStalled as exc:
            self.stalled.append(exc.message)
        except OSError:
            primary.storage.keeps_pages = None

    def guarded(self, fn: Callable[[], T], seconds: float) -> Callable[[], T]:
        """``fn`` bounded by ``seconds`` plus the grace; a stall or an I/O error becomes
        the probe's reason (which file, where), and after one stall nothing more is read."""

        def call() -> T:
            if self.stalled:
                raise Unavailable(f"not measured: {self.stalled[0]}")
            try:
                return bounded(fn, seconds + self.grace, self.bench.where)
            except StorageStalled as exc:
                self.stalled.append(exc.message)
                raise Unavailable(exc.message) from None
            except OSError as exc:  # EIO and friends: which file, where
                reason = exc.strerror or str(exc)
                raise Unavailable(
                    f"read of {self.bench.where()} failed: {reason} (errno {exc.errno})"
                ) from None

        return call


def _target_dict(target: Target) -> dict[str, Any]:
    """The report's target as every runner gives it, and the model's own folder when an
    emulator serves it (the mount is gone after the run)."""
    source = {"source": str(target.served_from)} if target.served_from else {}
    return {**target_record(target), **source}


def _core(spec: ProbeSpec, ctx: ProbeContext) -> ProbeResult[Any]:
    """A core probe's run (``probes/registry.py``'s ``CORE``) in its place among the reads."""
    return run_probe(spec.key, functools.partial(spec.run, ctx))


__all__ = [
    "DEFAULT_BUDGET_S",
    "FileProbe",
    "ProbeReport",
    "StorageProbe",
    "mount_and_class",
    "run_probes",
]
