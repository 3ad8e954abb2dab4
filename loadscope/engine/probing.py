"""``loadscope probe``: run every storage probe on a target's weight files within a time budget.

The probes themselves live in ``loadscope.probes``; this module decides what to
run on which file, splits the budget, and assembles one typed, versioned
report. Fixed-cost probes (system, mounts, devices, residency, HF cache) run
first; the measured ones share what is left of the budget: 15% cold latency,
45% sequential throughput by block size, 35% parallel readers.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from loadscope.base.safeio import StorageStalled, bounded, stall_timeout_s
from loadscope.base.units import format_bytes, format_rate, format_us
from loadscope.model.targets import Target
from loadscope.probes import blockdev, fio, mounts
from loadscope.probes.fio import FioJob
from loadscope.probes.gpu import GpuFacts, probe_gpus
from loadscope.probes.hfcache import HubCacheLocation, hub_cache_location
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
from loadscope.probes.localdisk import DiskSpeed, free_bytes, measure_dir
from loadscope.probes.pagecache import ColdCache, Residency, residency
from loadscope.probes.result import ProbeResult, Status, Unavailable, run_probe, to_jsonable
from loadscope.probes.system import SystemInfo, probe_system

SCHEMA_VERSION = 1
DEFAULT_BUDGET_S = 15.0
#: Kept back from the budget for assembling the report and closing files.
_MARGIN_S = 0.3
#: A probe read may take this long past its share of the budget before it is a stall.
PROBE_STALL_GRACE_S = 10.0
T = TypeVar("T")

Progress = Callable[[str], None]


@dataclass(slots=True)
class StorageProbe:
    """Mount, device chain and bdi of one filesystem (shared by the files on it)."""

    mount: ProbeResult[mounts.MountReport]
    device: ProbeResult[blockdev.DeviceReport]
    bdi: ProbeResult[blockdev.BdiSettings]
    fuse: ProbeResult[blockdev.FuseConnection]
    block_stat_path: str | None = None
    blind_signals: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class FileProbe:
    path: str
    size_bytes: int
    storage: StorageProbe
    residency: ProbeResult[Residency]


@dataclass(slots=True)
class HubCacheProbe:
    location: HubCacheLocation
    storage_class: str | None
    reason: str | None


@dataclass(slots=True)
class LocalDisk:
    """A local directory a copy of the model could go to, with its measured speed."""

    directory: str
    mount_point: str
    storage_class: str
    free_bytes: int
    speed: DiskSpeed | None
    reason: str = ""


@dataclass(slots=True)
class ProbeReport:
    target: dict[str, Any]
    budget_s: float
    elapsed_s: float
    system: ProbeResult[SystemInfo]
    files: list[FileProbe]
    latency: ProbeResult[LatencyResult]
    throughput: ProbeResult[ThroughputResult]
    hf_cache: ProbeResult[HubCacheProbe]
    notes: list[str] = field(default_factory=list)
    local_disks: ProbeResult[list[LocalDisk]] = field(
        default_factory=lambda: ProbeResult("local_disks", Status.SKIPPED, reason="not probed")
    )
    gpus: ProbeResult[GpuFacts] = field(
        default_factory=lambda: ProbeResult("gpu", Status.SKIPPED, reason="not probed")
    )
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
            "hf_cache": self.hf_cache.to_dict(),
            "local_disks": _local_dict(self.local_disks),
            "gpus": self.gpus.to_dict(),
            "notes": self.notes,
            **({"stalled": self.stalled} if self.stalled else {}),
            "fio": self.fio_dict(),
        }

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


def _local_dict(r: ProbeResult[list[LocalDisk]]) -> dict[str, Any]:
    out: dict[str, Any] = {"status": r.status.value, "reason": r.reason}
    out["disks"] = [to_jsonable(d) for d in r.data] if r.data is not None else []
    return out


def _residency_dict(r: ProbeResult[Residency]) -> dict[str, Any]:
    out = r.to_dict()
    if r.data is not None:
        out["fraction"] = r.data.fraction
        out["resident_bytes"] = r.data.resident_bytes
    return out


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
    """Probe the storage under ``target``; never raises for a probe that cannot run.

    With ``run_fio``, the fio jobs that reproduce the latency, sequential and parallel
    measurements run after them (outside the budget: up to ~30 s more) on the largest file."""
    say = progress or (lambda _msg: None)
    start = time.monotonic()
    deadline = start + budget_s - _MARGIN_S
    say("system")
    system = run_probe("system", probe_system)
    wsl = bool(system.data and system.data.wsl)
    say("mounts and devices")
    table_result = run_probe("mountinfo", mounts.read_mountinfo)
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
    say("Hugging Face cache")
    hf = run_probe("hf_cache", lambda: _hf_cache(table, wsl))
    say("GPUs")
    gpus = probe_gpus()

    primary = max(files, key=lambda f: f.size_bytes)
    klass = primary.storage.mount.data.storage_class if primary.storage.mount.data else "unknown"
    remote = ""
    if klass in ("network-fs", "fuse", "wsl"):
        remote = (
            "eviction reaches this machine's page cache only;"
            " the server's or daemon's cache may still serve reads"
        )
    cold = ColdCache(allow_drop_caches=allow_drop_caches, remote_note=remote)
    # Every read of the model below may meet storage that never answers: each is bounded
    # (its share of the budget plus a grace), and after one stall the rest are skipped.
    grace = min(stall_timeout_s(), PROBE_STALL_GRACE_S)
    stalled: list[str] = []
    notes: list[str] = []
    try:
        direct, why = bounded(
            lambda: o_direct_support(primary.path), grace, lambda: f"{primary.path} at offset 0"
        )
    except StorageStalled as exc:
        stalled.append(exc.message)
        direct, why = False, "O_DIRECT not tried"
    if not direct and not stalled:
        notes.append(f"{why}: measuring with evict-then-read (buffered, readahead on)")
    stat_path = primary.storage.block_stat_path
    bench = IoBench(
        [(f.path, f.size_bytes) for f in files],
        cold=cold,
        direct=direct,
        sampler_factory=(lambda: IoSampler(block_stat_path=Path(stat_path))) if stat_path else None,
    )

    def guarded(fn: Callable[[], T], seconds: float) -> Callable[[], T]:
        def call() -> T:
            if stalled:
                raise Unavailable(f"not measured: {stalled[0]}")
            try:
                return bounded(fn, seconds + grace, bench.where)
            except StorageStalled as exc:
                stalled.append(exc.message)
                raise Unavailable(exc.message) from None
            except OSError as exc:  # EIO and friends: which file, where
                reason = exc.strerror or str(exc)
                raise Unavailable(
                    f"read of {bench.where()} failed: {reason} (errno {exc.errno})"
                ) from None

        return call

    remaining = max(0.0, deadline - time.monotonic())
    say("cold latency")
    latency = run_probe(
        "latency",
        guarded(lambda: bench.latency(time.monotonic() + 0.15 * remaining), 0.15 * remaining),
    )
    say("throughput")
    throughput = run_probe(
        "throughput",
        guarded(
            lambda: _throughput(
                bench,
                deadline,
                remaining,
                primary.path,
                remote,
                system.data.memory_headroom_bytes if system.data else None,
            ),
            max(0.0, deadline - time.monotonic()),
        ),
    )
    jobs: list[fio.FioJob] = []
    if throughput.data is not None and throughput.data.sequential:
        thr = throughput.data
        best = max(thr.parallel or thr.sequential, key=lambda p: p.bytes_per_s)
        jobs = fio.jobs_for(
            primary.path,
            primary.size_bytes,
            direct=direct,
            seq_blocks=[p.block_bytes for p in thr.sequential],
            readers=best.readers,
            par_block=best.block_bytes,
            latency_samples=latency.data.samples if latency.data else 256,
        )
    fio_result: ProbeResult[list[fio.FioMeasure]] = ProbeResult(
        "fio", Status.SKIPPED, reason="not asked for (--fio)"
    )
    if run_fio:
        say("fio")
        fio_result = run_probe("fio", lambda: _run_fio(jobs, stalled, notes))
    local: ProbeResult[list[LocalDisk]]
    if not local_disks:
        local = ProbeResult("local_disks", Status.SKIPPED, reason="not asked for")
    elif klass in ("local-block", "memory"):
        local = ProbeResult("local_disks", Status.SKIPPED, reason=f"the model is on {klass}")
    else:
        say("local disks")
        local = run_probe(
            "local_disks",
            lambda: local_candidates(table, wsl, target.total_bytes, os.stat(primary.path).st_dev),
        )
    return ProbeReport(
        target={
            "spec": target.report_spec,
            "kind": target.kind,
            "root": target.report_root,
            "files": len(target.files),
            "total_bytes": target.total_bytes,
            **({"source": str(target.served_from)} if target.served_from else {}),
        },
        budget_s=budget_s,
        elapsed_s=time.monotonic() - start,
        system=system,
        files=files,
        latency=latency,
        throughput=throughput,
        hf_cache=hf,
        notes=notes,
        local_disks=local,
        gpus=gpus,
        stalled=stalled[0] if stalled else None,
        fio_jobs=jobs,
        fio=fio_result,
    )


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


def _gpu_lines(result: ProbeResult[GpuFacts]) -> list[str]:
    if result.data is None:
        return [_status_line("gpus", result)]
    lines = []
    for g in result.data.smi:
        mem = format_bytes(g.memory_total_bytes) if g.memory_total_bytes else "memory ?"
        link = f"PCIe gen {g.pcie_generation} x{g.pcie_width}" if g.pcie_width else "link ?"
        lines.append(_wrap("gpu", f"{g.index}: {g.name}, {mem}, {link} (nvidia-smi)"))
    for pci in result.data.pci:
        cur = pci.current_link
        rate = cur.data_rate_bytes_per_s
        text = f"{pci.address}: link {cur.speed or '?'} x{cur.width or '?'}"
        text += f" ({format_rate(rate)})" if rate else ""
        text += " — DEGRADED vs its max link" if pci.link_degraded else ""
        lines.append(_wrap("gpu pci", text))
    return lines


#: Where a copy of a model conventionally goes, besides $LOADSCOPE_LOCAL_DIRS.
CONVENTIONAL_LOCAL_DIRS = ("/local", "/scratch", "/mnt/local", "/nvme", "/mnt/nvme", "/raid")
#: Room kept free on the destination beyond the model itself.
COPY_MARGIN = 1.1


def candidate_dirs() -> list[str]:
    env = os.environ.get("LOADSCOPE_LOCAL_DIRS")
    if env:
        return [d for d in env.split(os.pathsep) if d]
    import tempfile

    return [tempfile.gettempdir(), *CONVENTIONAL_LOCAL_DIRS, os.path.expanduser("~")]


def local_candidates(
    table: list[mounts.Mount], wsl: bool, model_bytes: int, model_dev: int
) -> list[LocalDisk]:
    """Local-disk directories (one per filesystem, not the model's) with room for a copy."""
    if not table:
        raise Unavailable("mount table unavailable")
    found: list[LocalDisk] = []
    seen = {model_dev}
    for directory in candidate_dirs():
        try:
            st = os.stat(directory)
        except OSError:
            continue
        if st.st_dev in seen:
            continue
        seen.add(st.st_dev)
        storage = _storage(Path(directory), table, wsl)
        m = storage.mount.data
        klass = (m.resolved_class or m.storage_class) if m else "unknown"
        if klass != "local-block" or m is None:
            continue
        free = free_bytes(directory)
        if free < COPY_MARGIN * model_bytes:
            found.append(
                LocalDisk(directory, m.mount_point, klass, free, None, "not enough free space")
            )
            continue
        try:
            speed = measure_dir(directory)
        except (Unavailable, OSError) as exc:
            found.append(LocalDisk(directory, m.mount_point, klass, free, None, str(exc)))
            continue
        found.append(LocalDisk(directory, m.mount_point, klass, free, speed))
    return found


def _throughput(
    bench: IoBench, deadline: float, remaining: float, path: str, note: str, headroom: int | None
) -> ThroughputResult:
    seq_slice = 0.45 * remaining / len(SEQUENTIAL_BLOCKS)
    # The parallel scan's points, then one more: the best of them into fresh memory.
    par_slice = 0.35 * remaining / (len(PARALLEL_READERS) + 1)
    sequential = []
    for block in SEQUENTIAL_BLOCKS:
        budget = min(seq_slice, deadline - time.monotonic())
        if budget <= 0:
            break
        sequential.append(bench.sequential(block, budget))
    parallel = []
    for readers in PARALLEL_READERS:
        budget = min(par_slice, deadline - time.monotonic())
        if budget <= 0:
            break
        parallel.append(bench.parallel(readers, budget))
    if not sequential:
        raise Unavailable("no time left in the budget for throughput")
    into_ram, why = _into_ram(
        bench, parallel, min(par_slice, deadline - time.monotonic()), headroom
    )
    return ThroughputResult(
        bench.method, path, tuple(sequential), tuple(parallel), note, into_ram, why
    )


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
    return bench.into_ram(best.readers, seconds, best.block_bytes, cap), ""


def _hf_cache(table: list[mounts.Mount], wsl: bool) -> HubCacheProbe:
    location = hub_cache_location()
    if not table:
        return HubCacheProbe(location, None, "mount table unavailable")
    storage = _storage(Path(location.existing_parent), table, wsl)
    if storage.mount.data is None:
        return HubCacheProbe(location, None, storage.mount.reason)
    return HubCacheProbe(location, storage.mount.data.storage_class, storage.mount.data.reason)


# -- the human summary ------------------------------------------------------------------------


def _bar(value: float, biggest: float, width: int = 20) -> str:
    return "#" * (max(1, round(width * value / biggest)) if biggest > 0 and value > 0 else 0)


_WIDTH = 80
_LABEL = 11


def _wrap(label: str, text: str) -> str:
    """``label`` in an 11-column gutter, ``text`` wrapped to 80 columns beside it."""
    return textwrap.fill(
        text,
        width=_WIDTH,
        initial_indent=f"{label:<{_LABEL}}",
        subsequent_indent=" " * _LABEL,
        break_on_hyphens=False,
    )


def _status_line(name: str, result: ProbeResult[Any]) -> str:
    return _wrap(name, f"{result.status.value}: {result.reason}")


def _storage_lines(f: FileProbe) -> list[str]:
    m = f.storage.mount
    if m.data is None:
        return [_status_line("storage", m)]
    lines = [_wrap("storage", f"{m.data.storage_class}: {m.data.reason}")]
    if m.data.resolved_class:
        lines.append(
            _wrap("", f"under the overlay: {m.data.resolved_class} ({m.data.resolved_reason})")
        )
    lines.append(_wrap("", f"mount {m.data.mount_point} ({m.data.fstype}, {m.data.source})"))
    if f.storage.device.data is not None:
        for disk in f.storage.device.data.disks:
            bits = [disk.transport, disk.model or "no model string"]
            if disk.rotational:
                bits.append("rotational")
            if disk.scheduler:
                bits.append(f"scheduler {disk.scheduler}")
            if disk.max_sectors_kb:
                bits.append(f"max_sectors_kb {disk.max_sectors_kb}")
            lines.append(_wrap("", f"disk {disk.name}: {', '.join(bits)}"))
    bdi = f.storage.bdi.data
    if bdi is not None and bdi.read_ahead_kb is not None:
        lines.append(_wrap("", f"read_ahead_kb {bdi.read_ahead_kb} ({bdi.path})"))
    fuse = f.storage.fuse.data
    if fuse is not None:
        conn = f"max_background {fuse.max_background}, congestion {fuse.congestion_threshold}"
        lines.append(_wrap("", f"fuse connection: {conn}"))
    return lines


def _system_lines(report: ProbeReport) -> list[str]:
    sysr = report.system
    if sysr.data is None:
        return [_status_line("system", sysr)]
    s = sysr.data
    model = report.target["total_bytes"]
    limit = s.cgroup.limit_bytes if s.cgroup else None
    fits = "fits" if s.memory_headroom_bytes >= model else "does NOT fit"
    memory = (
        f"{format_bytes(s.ram_available_bytes)} available of {format_bytes(s.ram_total_bytes)};"
        f" cgroup limit {format_bytes(limit) if limit else 'none'};"
        f" model {format_bytes(model)} ({fits} in RAM)"
    )
    where = s.virtualization or "bare metal?"
    system = (
        f"{s.cpus_usable} CPUs ({s.cpu_model or '?'}), kernel {s.kernel},"
        f" {where}{', ' + s.container if s.container else ''}"
    )
    return [_wrap("memory", memory), _wrap("system", system)]


def _throughput_lines(thr: ProbeResult[ThroughputResult]) -> list[str]:
    if thr.data is None:
        return [_status_line("throughput", thr)]
    points = list(thr.data.sequential) + list(thr.data.parallel)
    biggest = max(p.bytes_per_s for p in points)
    lines = [f"{'throughput':<{_LABEL}}cold, {thr.data.method}; one reader, by request size:"]
    for p in thr.data.sequential:
        rate, bar = format_rate(p.bytes_per_s), _bar(p.bytes_per_s, biggest)
        kernel = f"  kernel {format_bytes(p.avg_request_bytes)}/req" if p.avg_request_bytes else ""
        lines.append(f"  {format_bytes(p.block_bytes):>10}   {rate:>10}  {bar:<20}{kernel}")
    if thr.data.parallel:
        lines.append(" " * _LABEL + "parallel readers, 1 MiB requests:")
    for p in thr.data.parallel:
        label = f"{p.readers} reader{'s' if p.readers > 1 else ''}"
        rate, bar = format_rate(p.bytes_per_s), _bar(p.bytes_per_s, biggest)
        lines.append(f"  {label:>10}   {rate:>10}  {bar}")
    if (ram := thr.data.into_ram) is not None:
        best = max(p.bytes_per_s for p in thr.data.parallel)
        share = f"  {ram.bytes_per_s / best:.2f}x" if best > 0 else ""
        landed = format_bytes(ram.bytes_read)
        lines.append(" " * _LABEL + f"into fresh RAM, where a loader lands it ({landed}):")
        label = f"{ram.readers} reader{'s' if ram.readers > 1 else ''}"
        rate, bar = format_rate(ram.bytes_per_s), _bar(ram.bytes_per_s, biggest)
        lines.append(f"  {label:>10}   {rate:>10}  {bar:<20}{share}")
    elif thr.data.parallel and thr.data.into_ram_reason:
        lines.append(_wrap("into RAM", thr.data.into_ram_reason))
    return lines


def _local_lines(local: ProbeResult[list[LocalDisk]]) -> list[str]:
    if local.status is Status.SKIPPED:
        return []
    if local.data is None:
        return [_status_line("local disk", local)]
    if not local.data:
        return [_wrap("local disk", "no local-disk directory with room for a copy was found")]
    lines = []
    for d in local.data:
        if d.speed is None:
            text = f"{d.directory} ({format_bytes(d.free_bytes)} free): {d.reason}"
        else:
            cold = "" if d.speed.cold_verified else " (cold not verified)"
            text = (
                f"{d.directory} ({format_bytes(d.free_bytes)} free): writes"
                f" {format_rate(d.speed.write_bytes_per_s)}, reads"
                f" {format_rate(d.speed.cold_read_bytes_per_s)} cold{cold}"
            )
        lines.append(_wrap("local disk", text))
    return lines


def to_text(report: ProbeReport) -> str:
    """A short summary that fits 80 columns; the JSON has everything."""
    t = report.target
    lines = [
        _wrap("target", f"{t['spec']} ({t['files']} file(s), {format_bytes(t['total_bytes'])})")
    ]
    seen: set[int] = set()
    for f in report.files:
        if id(f.storage) not in seen:
            seen.add(id(f.storage))
            lines += _storage_lines(f)
    lines += _system_lines(report)
    known = [
        fraction
        for f in report.files
        if f.residency.data is not None and (fraction := f.residency.data.fraction) is not None
    ]
    if known:
        mean = sum(known) / len(known)
        lines.append(
            _wrap("page cache", f"{mean:.0%} resident before probing ({len(known)} file(s))")
        )
    elif report.files:
        first = report.files[0].residency
        why = first.reason or (first.data.note if first.data else "")
        lines.append(_wrap("page cache", f"unknown: {why}"))
    lat = report.latency
    if lat.data is not None:
        d = lat.data
        latency = (
            f"cold 4 KiB reads ({d.method}, {d.samples} samples):"
            f" p50 {format_us(d.p50_us)}, p90 {format_us(d.p90_us)}, p99 {format_us(d.p99_us)}"
        )
        lines.append(_wrap("latency", latency))
    else:
        lines.append(_status_line("latency", lat))
    lines += _throughput_lines(report.throughput)
    lines += _fio_lines(report)
    hf = report.hf_cache
    if hf.data is not None:
        where = hf.data.location.path + ("" if hf.data.location.exists else " (not created yet)")
        src = hf.data.location.source
        lines.append(_wrap("hf cache", f"{where} [{src}] on {hf.data.storage_class}"))
    else:
        lines.append(_status_line("hf cache", hf))
    lines += _local_lines(report.local_disks)
    lines += _gpu_lines(report.gpus)
    for note in report.notes:
        lines.append(_wrap("note", note))
    lines.append(_wrap("took", f"{report.elapsed_s:.1f} s of a {report.budget_s:g} s budget"))
    return "\n".join(lines)


def _fio_lines(report: ProbeReport) -> list[str]:
    """fio's figures beside the probe's (with --fio), else how to reproduce with fio."""
    if not report.fio_jobs:
        return []
    doc = report.fio_dict()
    lines = []
    if report.fio.status is not Status.OK:
        if report.fio.status is not Status.SKIPPED:
            lines.append(_status_line("fio", report.fio))
        lines.append(
            _wrap(
                "fio",
                "loadscope probe --fio runs the fio jobs that reproduce these numbers"
                " (their command lines: fio.jobs[].command in --json)",
            )
        )
        return lines
    for job in doc["jobs"]:
        if job["fio"] is None:
            continue
        if job["metric"] == "p50_us":
            mine = format_us(job["probe"]) if job["probe"] else "-"
            text = f"{job['label']}: p50 {format_us(job['fio'])} (probe {mine})"
        else:
            mine = format_rate(job["probe"]) if job["probe"] else "-"
            text = f"{job['label']}: {format_rate(job['fio'])} (probe {mine})"
        ratio = job["fio_over_probe"]
        lines.append(_wrap("fio", text + (f", fio/probe {ratio:.2f}x" if ratio else "")))
    lines.append(_wrap("fio", "the jobs (read-only):"))
    for job in doc["jobs"]:
        lines += _shell_lines(job["command"])
    return lines


def _shell_lines(command: str, width: int = 80) -> list[str]:
    """A long shell command as lines continued with a backslash, broken between words."""
    words = shlex.split(command)
    lines, line = [], " "
    for word in (shlex.quote(w) for w in words):
        if len(line) + 1 + len(word) > width - 2 and line.strip():
            lines.append(line + " \\")
            line = "    "
        line += " " + word
    return [*lines, line]
