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
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from loadscope.base.safeio import StorageStalled, bounded, stall_timeout_s
from loadscope.base.units import format_bytes
from loadscope.engine.probe_report import (
    FileProbe,
    ProbeReport,
    StorageProbe,
)
from loadscope.engine.trials import target_record
from loadscope.model.targets import Target
from loadscope.probes import blockdev, fio, mounts
from loadscope.probes.iobench import (
    PARALLEL_CAP,
    PARALLEL_READERS,
    SEQUENTIAL_BLOCKS,
    IoBench,
    LatencyResult,
    ThroughputPoint,
    ThroughputResult,
    o_direct_support,
)
from loadscope.probes.iosampler import IoSampler, blind_signals
from loadscope.probes.pagecache import ColdCache, residency
from loadscope.probes.registry import PROBES, measured_share, run_registered
from loadscope.probes.result import ProbeResult, Status, Unavailable, run_probe
from loadscope.probes.sources import supports
from loadscope.probes.spec import ProbeContext
from loadscope.probes.system import probe_system

DEFAULT_BUDGET_S = 15.0
#: Kept back from the budget for assembling the report and closing files.
_MARGIN_S = 0.3
#: A probe read may take this long past its share of the budget before it is a stall.
PROBE_STALL_GRACE_S = 10.0
T = TypeVar("T")

Progress = Callable[[str], None]


#: Where a loop device's image lives decides what its reads wait on: these are remote.
_REMOTE_CLASSES = ("network-fs", "fuse", "network-block", "wsl")


def _loop_verdict(
    device: blockdev.DeviceReport, table: list[mounts.Mount], wsl: bool
) -> tuple[bool, str] | None:
    """A loop device's verdict from the mount under its image file: an image on FUSE,
    NFS or Lustre (container images on HPC clusters often are) is slow storage that
    looks like a local disk. None when the image's mount cannot be found."""
    for backing in device.backing_files:
        try:
            under = mounts.mount_of(backing, table)
        except Unavailable:
            continue
        cls, why = mounts.classify(under, wsl=wsl)
        where = f"{device.name}: a loop device over {backing!r}, which is on {under.mount_point}"
        if cls in _REMOTE_CLASSES:
            return True, f"{where} ({why}): every request the loop device sends goes there"
        return False, f"{where} ({why})"
    return None


def _storage(path: Path, table: list[mounts.Mount], wsl: bool) -> StorageProbe:
    mount = mounts.mount_of(str(path), table)
    dev = mounts.block_device_of(mount)
    device: ProbeResult[blockdev.DeviceReport]
    if dev is None:
        device = ProbeResult(
            "device", Status.UNAVAILABLE, reason=f"{mount.fstype} has no block device"
        )
    else:
        device = run_probe("device", lambda: blockdev.device_chain(*dev))
    verdict = None
    if device.data is not None:
        is_network, evidence = blockdev.network_verdict(device.data)
        verdict = (bool(is_network), evidence) if is_network is not None else (False, evidence)
        if device.data.backing_files and is_network is not True:
            verdict = _loop_verdict(device.data, table, wsl) or verdict
    report = run_probe(
        "mount", lambda: mounts.describe_mount(mount, table, wsl=wsl, device_network=verdict)
    )
    bdi = run_probe("bdi", lambda: blockdev.bdi_settings(*(dev or (mount.major, mount.minor))))
    fuse: ProbeResult[blockdev.FuseConnection]
    if mount.fstype in ("fuse", "fuseblk"):
        conn = blockdev.fuse_connection_id(mount.major, mount.minor)

        def _fuse() -> blockdev.FuseConnection:
            found = blockdev.fuse_connection(conn)
            if found is None:
                raise Unavailable(
                    f"/sys/fs/fuse/connections/{conn} not readable (fusectl not mounted?)"
                )
            return found

        fuse = run_probe("fuse_connection", _fuse)
    else:
        fuse = ProbeResult("fuse_connection", Status.UNAVAILABLE, reason="not a FUSE mount")
    stat_path = None
    if device.data is not None:
        candidate = Path("/sys/class/block") / device.data.name / "stat"
        stat_path = str(candidate) if candidate.exists() else None
    klass = report.data.storage_class if report.data is not None else "unknown"
    return StorageProbe(report, device, bdi, fuse, stat_path, blind_signals(klass))


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
    say("system")
    system = run_probe("system", probe_system)
    wsl = bool(system.data and system.data.wsl)
    if not target.on_files:  # another source: the machine's probes and its own
        return _source_probes(target, budget_s, start, system, say, local_disks)
    say("mounts and devices")
    table_result = run_probe("mountinfo", mounts.read_mountinfo)
    table = table_result.data or []
    files = _file_probes(target, table_result, wsl)
    primary = max(files, key=lambda f: f.size_bytes)
    klass = primary.storage.mount.data.storage_class if primary.storage.mount.data else "unknown"
    sizes = tuple((f.path, f.size_bytes) for f in files)
    classify = functools.partial(_classified, table, wsl)
    context = functools.partial(
        ProbeContext,
        str(target.root),
        sizes,
        klass,
        wsl,
        classify=classify,
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
    latency = run_probe(
        "latency",
        reads.guarded(
            lambda: reads.bench.latency(time.monotonic() + 0.15 * remaining), 0.15 * remaining
        ),
    )
    say("throughput")
    headroom = system.data.memory_headroom_bytes if system.data else None
    throughput = run_probe(
        "throughput",
        reads.guarded(
            lambda: _throughput(
                reads.bench, deadline, remaining, primary.path, reads.remote, headroom
            ),
            max(0.0, deadline - time.monotonic()),
        ),
    )
    jobs = _fio_jobs(primary, reads.direct, throughput, latency)
    fio_result = _fio_step(run_fio, jobs, reads, say)
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
        classify=functools.partial(_classified, table, wsl),
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


def _file_probes(
    target: Target, table_result: ProbeResult[list[mounts.Mount]], wsl: bool
) -> list[FileProbe]:
    """Each weight file with its storage (probed once per filesystem) and residency."""
    table = table_result.data or []
    storages: dict[str, StorageProbe] = {}
    files: list[FileProbe] = []
    for wf in target.files:
        key = str(os.stat(wf.path).st_dev)
        if key not in storages:
            if table_result.data is None:
                failed = ProbeResult[Any]("mount", table_result.status, reason=table_result.reason)
                storages[key] = StorageProbe(failed, failed, failed, failed)
            else:
                storages[key] = _storage(wf.path, table, wsl)
        files.append(
            FileProbe(
                str(wf.path),
                wf.size_bytes,
                storages[key],
                run_probe("residency", functools.partial(residency, wf.path)),
            )
        )
    return files


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


def _fio_step(
    wanted: bool, jobs: list[fio.FioJob], reads: _Reads, say: Progress
) -> ProbeResult[list[fio.FioMeasure]]:
    """fio's runs of ``jobs`` when asked for (``--fio``), else a result saying it was not."""
    if not wanted:
        return ProbeResult("fio", Status.SKIPPED, reason="not asked for (--fio)")
    say("fio")
    return run_probe("fio", lambda: _run_fio(jobs, reads.stalled, reads.notes))


def _fio_jobs(
    primary: FileProbe,
    direct: bool,
    throughput: ProbeResult[ThroughputResult],
    latency: ProbeResult[LatencyResult],
) -> list[fio.FioJob]:
    """The fio jobs that reproduce what was measured (none when throughput was not)."""
    if throughput.data is None or not throughput.data.sequential:
        return []
    thr = throughput.data
    best = max(thr.parallel or thr.sequential, key=lambda p: p.bytes_per_s)
    return fio.jobs_for(
        primary.path,
        primary.size_bytes,
        direct=direct,
        seq_blocks=[p.block_bytes for p in thr.sequential],
        readers=best.readers,
        par_block=best.block_bytes,
        latency_samples=latency.data.samples if latency.data else 256,
    )


def _target_dict(target: Target) -> dict[str, Any]:
    """The report's target as every runner gives it, and the model's own folder when an
    emulator serves it (the mount is gone after the run)."""
    source = {"source": str(target.served_from)} if target.served_from else {}
    return {**target_record(target), **source}


def _run_fio(jobs: list[fio.FioJob], stalled: list[str], notes: list[str]) -> list[fio.FioMeasure]:
    if why := fio.unavailable_reason():
        raise Unavailable(why)
    if stalled:
        raise Unavailable(f"not run: {stalled[0]}")
    if not jobs:
        raise Unavailable("the probe's own throughput was not measured: nothing to set beside")
    measured, failed = [], []
    for job in jobs:  # one job that fails does not take the others' figures with it
        try:
            measured.append(fio.run_job(job))
        except Unavailable as exc:
            failed.append(str(exc))
    if not measured:
        raise Unavailable("; ".join(failed))
    notes.extend(failed)
    return measured


def _throughput(
    bench: IoBench, deadline: float, remaining: float, path: str, note: str, headroom: int | None
) -> ThroughputResult:
    seq_slice = 0.45 * remaining / len(SEQUENTIAL_BLOCKS)
    # The parallel scan's points, then one more: the best of them into fresh memory.
    par_slice = 0.35 * remaining / (len(PARALLEL_READERS) + 1)
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


#: The into-RAM point may take at most this share of the memory headroom.
INTO_RAM_HEADROOM_SHARE = 4


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


def mount_and_class(table: list[mounts.Mount], wsl: bool, path: str) -> tuple[str, str] | None:
    """``path``'s mount point and storage class (resolved: the class a FUSE or overlay
    mount stands for), as a registered probe's ``ProbeContext.mount_of``."""
    if not table:
        return None
    m = _storage(Path(path), table, wsl).mount.data
    if m is None:
        return None
    return m.mount_point, m.resolved_class or m.storage_class


def _classified(table: list[mounts.Mount], wsl: bool, path: str) -> tuple[str | None, str | None]:
    """The storage class of ``path``'s mount and why, as the model's own is classified
    (a registered probe's ``ProbeContext.classify``)."""
    if not table:
        return None, "mount table unavailable"
    storage = _storage(Path(path), table, wsl)
    if storage.mount.data is None:
        return None, storage.mount.reason
    return storage.mount.data.storage_class, storage.mount.data.reason


__all__ = [
    "DEFAULT_BUDGET_S",
    "FileProbe",
    "ProbeReport",
    "StorageProbe",
    "mount_and_class",
    "run_probes",
]
