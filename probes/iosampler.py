"""Sample the I/O a process really causes, cheaply enough for 10 Hz during a load.

Signals, and where each is blind (see :func:`blind_signals`):

* page faults (``/proc/<pid>/stat``): major faults are reads that waited on storage —
  except on FUSE, where a fault that waits on readahead already in flight counts
  as *minor* (measured 30-40x undercount);
* read syscalls and bytes (``/proc/<pid>/io``): ``read_bytes`` is what reached the
  block layer, 0 on FUSE and NFS; io_uring reads do not show in ``syscr``;
* block requests, sectors, merges and time (``/sys/block/<dev>/stat``): the request
  sizes the kernel really issued — only for block-backed storage, and shared by
  every process on the device;
* NFS per-op counts and bytes (``/proc/self/mountstats``);
* FUSE requests in flight (``/sys/fs/fuse/connections/<n>/waiting``) and the
  connection's ``max_background`` / ``congestion_threshold``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadscope.probes.sysfs import read_int, read_text

SECTOR_BYTES = 512


@dataclass(frozen=True, slots=True)
class BlockStat:
    """Read-side counters of ``/sys/block/<dev>/stat`` (cumulative since boot)."""

    read_ios: int
    read_merges: int
    read_sectors: int
    read_ticks_ms: int
    in_flight: int


def parse_block_stat(text: str) -> BlockStat:
    f = [int(x) for x in text.split()]
    return BlockStat(
        read_ios=f[0], read_merges=f[1], read_sectors=f[2], read_ticks_ms=f[3], in_flight=f[8]
    )


@dataclass(frozen=True, slots=True)
class NfsReadStat:
    ops: int
    bytes_recv: int
    rtt_ms_total: int
    execute_ms_total: int


def parse_mountstats(text: str, mount_point: str) -> NfsReadStat | None:
    """The READ op line of the NFS mount at ``mount_point`` in ``/proc/self/mountstats``."""
    current = None
    for line in text.splitlines():
        if line.startswith("device "):
            parts = line.split()
            current = parts[4] if len(parts) > 4 and parts[3] == "on" else None
            continue
        if current == mount_point and line.strip().startswith("READ:"):
            n = [int(x) for x in line.split(":", 1)[1].split()]
            # ops trans timeouts bytes_sent bytes_recv queue rtt execute [errors]
            return NfsReadStat(ops=n[0], bytes_recv=n[4], rtt_ms_total=n[6], execute_ms_total=n[7])
    return None


@dataclass(frozen=True, slots=True)
class FuseConnStat:
    waiting: int | None
    max_background: int | None
    congestion_threshold: int | None


@dataclass(frozen=True, slots=True)
class IoSample:
    t_s: float  # time.monotonic()
    minflt: int | None = None
    majflt: int | None = None
    rchar: int | None = None
    syscr: int | None = None
    read_bytes: int | None = None
    block: BlockStat | None = None
    nfs: NfsReadStat | None = None
    fuse: FuseConnStat | None = None


@dataclass(frozen=True, slots=True)
class IoDelta:
    seconds: float
    minflt: int | None
    majflt: int | None
    rchar: int | None
    syscr: int | None
    read_bytes: int | None
    block_read_ios: int | None
    block_read_bytes: int | None
    block_read_merges: int | None
    block_read_ticks_ms: int | None
    #: Average size of the read requests the block layer issued (the kernel's real I/O size).
    avg_request_bytes: float | None
    nfs_read_ops: int | None
    nfs_read_bytes: int | None
    nfs_avg_rtt_ms: float | None
    fuse_waiting: int | None  # requests in flight at the end sample


def _sub(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


def delta(start: IoSample, end: IoSample) -> IoDelta:
    block_ios = block_bytes = merges = ticks = None
    avg = None
    if start.block and end.block:
        block_ios = end.block.read_ios - start.block.read_ios
        block_bytes = (end.block.read_sectors - start.block.read_sectors) * SECTOR_BYTES
        merges = end.block.read_merges - start.block.read_merges
        ticks = end.block.read_ticks_ms - start.block.read_ticks_ms
        avg = block_bytes / block_ios if block_ios else None
    nfs_ops = nfs_bytes = None
    nfs_rtt = None
    if start.nfs and end.nfs:
        nfs_ops = end.nfs.ops - start.nfs.ops
        nfs_bytes = end.nfs.bytes_recv - start.nfs.bytes_recv
        nfs_rtt = (end.nfs.rtt_ms_total - start.nfs.rtt_ms_total) / nfs_ops if nfs_ops else None
    return IoDelta(
        seconds=end.t_s - start.t_s,
        minflt=_sub(end.minflt, start.minflt),
        majflt=_sub(end.majflt, start.majflt),
        rchar=_sub(end.rchar, start.rchar),
        syscr=_sub(end.syscr, start.syscr),
        read_bytes=_sub(end.read_bytes, start.read_bytes),
        block_read_ios=block_ios,
        block_read_bytes=block_bytes,
        block_read_merges=merges,
        block_read_ticks_ms=ticks,
        avg_request_bytes=avg,
        nfs_read_ops=nfs_ops,
        nfs_read_bytes=nfs_bytes,
        nfs_avg_rtt_ms=nfs_rtt,
        fuse_waiting=end.fuse.waiting if end.fuse else None,
    )


@dataclass
class IoSampler:
    """Reads the counters of one process and one storage target; ``sample()`` is ~tens of µs."""

    pid: int = field(default_factory=os.getpid)
    block_stat_path: Path | None = None
    nfs_mount_point: str | None = None
    fuse_connection_dir: Path | None = None
    proc_root: Path = Path("/proc")

    def sample(self) -> IoSample:
        minflt = majflt = rchar = syscr = read_bytes = None
        stat = read_text(self.proc_root / str(self.pid) / "stat")
        if stat:
            fields = stat.rsplit(")", 1)[1].split()
            minflt, majflt = int(fields[7]), int(fields[9])
        io = read_text(self.proc_root / str(self.pid) / "io")
        if io:
            values = dict(line.split(": ", 1) for line in io.splitlines() if ": " in line)
            rchar, syscr = int(values["rchar"]), int(values["syscr"])
            read_bytes = int(values["read_bytes"])
        block = None
        if self.block_stat_path is not None:
            text = read_text(self.block_stat_path)
            block = parse_block_stat(text) if text else None
        nfs = None
        if self.nfs_mount_point is not None:
            text = read_text(self.proc_root / "self" / "mountstats")
            nfs = parse_mountstats(text, self.nfs_mount_point) if text else None
        fuse = None
        if self.fuse_connection_dir is not None:
            d = self.fuse_connection_dir
            fuse = FuseConnStat(
                read_int(d / "waiting"),
                read_int(d / "max_background"),
                read_int(d / "congestion_threshold"),
            )
        return IoSample(
            time.monotonic(), minflt, majflt, rchar, syscr, read_bytes, block, nfs, fuse
        )


def blind_signals(storage_class: str) -> dict[str, str]:
    """Which counters cannot see the I/O on this class of storage, and why."""
    blind: dict[str, str] = {}
    if storage_class in ("fuse", "network-fs", "wsl", "memory"):
        blind["block_requests"] = "no block device: /sys/block stats do not see these reads"
        blind["read_bytes"] = "/proc/<pid>/io read_bytes counts block-layer reads only: 0 here"
    if storage_class == "fuse":
        blind["majflt"] = (
            "a fault that waits on FUSE readahead already in flight counts as minor:"
            " major faults undercount stalls 30-40x; use time and fuse_waiting"
        )
    if storage_class == "memory":
        blind["majflt"] = "tmpfs pages are never read from storage: no major faults"
    if storage_class in ("local-block", "network-block", "overlay"):
        blind["block_requests"] = (
            "shared by every process on the device: other I/O on it mixes into the counts"
        )
    blind["syscr"] = "io_uring and mmap page faults issue no read syscalls"
    return blind
