"""The local-disk probe: where a copy of the model could go, and how fast that disk is.

The copy-to-local-disk advice needs two numbers the model's own storage cannot
give: the candidate's write rate (the copy's cost) and its cold read rate (what
each later load would run at). Both are measured on a small temporary file in
that directory (never a user file): written in 4 MiB blocks, fsynced, evicted
and *verified* cold, then read back in 1 MiB blocks. The file is removed in
every case. The candidates are ``$LOADSCOPE_LOCAL_DIRS`` (``:``-separated) or the
temp dir, the conventional scratch folders and the home folder: one per local
filesystem, not the model's. A registered probe (:data:`SPEC`): it runs after the
measured reads, when the model is not on a local disk or in memory already.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadscope.base.units import format_bytes, format_rate
from loadscope.probes.pagecache import ColdCache
from loadscope.probes.result import Skipped, Unavailable
from loadscope.probes.sources import EVERY_SOURCE, FILES
from loadscope.probes.spec import Lines, ProbeContext, ProbeSpec

#: Big enough to get past the first readahead windows, small enough to cost < 1 s locally.
SAMPLE_BYTES = 64 << 20
_WRITE_BLOCK = 4 << 20
_READ_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class DiskSpeed:
    directory: str
    free_bytes: int
    sample_bytes: int
    write_bytes_per_s: float
    cold_read_bytes_per_s: float
    cold_verified: bool
    note: str = ""


def free_bytes(directory: str) -> int:
    return shutil.disk_usage(directory).free


def measure_dir(directory: str, sample_bytes: int = SAMPLE_BYTES) -> DiskSpeed:
    """Write, fsync, evict, verify and read back a temporary file in ``directory``."""
    if not os.path.isdir(directory):
        raise Unavailable(f"{directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise Unavailable(f"{directory} is not writable by this user")
    free = free_bytes(directory)
    if free < 2 * sample_bytes:
        raise Unavailable(f"{directory} has only {free} bytes free")
    fd, path = tempfile.mkstemp(prefix=".loadscope-probe-", dir=directory)
    try:
        block = os.urandom(_WRITE_BLOCK)  # incompressible, so no filesystem shortcut
        start = time.perf_counter()
        written = 0
        while written < sample_bytes:
            written += os.write(fd, block[: min(_WRITE_BLOCK, sample_bytes - written)])
        os.fsync(fd)
        write_s = time.perf_counter() - start
        os.close(fd)
        fd = -1
        eviction = ColdCache().evict(path)
        rfd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        buf = mmap.mmap(-1, _READ_BLOCK)
        try:
            done = 0
            start = time.perf_counter()
            while done < sample_bytes:
                n = os.preadv(rfd, [buf], done)
                if n <= 0:
                    break
                done += n
            read_s = time.perf_counter() - start
        finally:
            buf.close()
            os.close(rfd)
    finally:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
    return DiskSpeed(
        directory=directory,
        free_bytes=free,
        sample_bytes=sample_bytes,
        write_bytes_per_s=written / max(write_s, 1e-9),
        cold_read_bytes_per_s=done / max(read_s, 1e-9),
        cold_verified=eviction.verified,
        note=eviction.note,
    )


#: Where a copy of a model conventionally goes, besides $LOADSCOPE_LOCAL_DIRS.
CONVENTIONAL_LOCAL_DIRS = ("/local", "/scratch", "/mnt/local", "/nvme", "/mnt/nvme", "/raid")
#: Room kept free on the destination beyond the model itself.
COPY_MARGIN = 1.1


@dataclass(frozen=True, slots=True)
class LocalDisk:
    """A local directory a copy of the model could go to, with its measured speed."""

    directory: str
    mount_point: str
    storage_class: str
    free_bytes: int
    speed: DiskSpeed | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LocalDisks:
    """The candidates found (none: no local disk with room for a copy)."""

    disks: list[LocalDisk]


@dataclass(frozen=True, slots=True)
class LocalDiskFacts:
    """The fastest candidate, as the copy advice weighs it."""

    directory: str
    free_bytes: int
    write_bytes_per_s: float
    cold_read_bytes_per_s: float
    cold_verified: bool


def candidate_dirs() -> list[str]:
    env = os.environ.get("LOADSCOPE_LOCAL_DIRS")
    if env:
        return [d for d in env.split(os.pathsep) if d]
    return [tempfile.gettempdir(), *CONVENTIONAL_LOCAL_DIRS, os.path.expanduser("~")]


def local_candidates(
    mount_of: Callable[[str], tuple[str, str] | None], model_bytes: int, model_dev: int | None
) -> list[LocalDisk]:
    """Local-disk directories (one per filesystem, not the model's) with room for a copy;
    ``mount_of`` gives a path's mount point and storage class; ``model_dev`` None: the
    model is not on a file system here (another source)."""
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
        mount = mount_of(directory)
        if mount is None or mount[1] != "local-block":
            continue
        point, klass = mount
        free = free_bytes(directory)
        if free < COPY_MARGIN * model_bytes:
            found.append(LocalDisk(directory, point, klass, free, None, "not enough free space"))
            continue
        try:
            speed = measure_dir(directory)
        except (Unavailable, OSError) as exc:
            found.append(LocalDisk(directory, point, klass, free, None, str(exc)))
            continue
        found.append(LocalDisk(directory, point, klass, free, speed))
    return found


def _run(ctx: ProbeContext) -> LocalDisks:
    total = sum(size for _, size in ctx.files)
    if ctx.source != FILES:  # a model in another source: any local disk is a copy's place
        if ctx.mount_of(tempfile.gettempdir()) is None:
            raise Unavailable("mount table unavailable")
        return LocalDisks(local_candidates(ctx.mount_of, total, None))
    if ctx.storage_class in ("local-block", "memory"):
        raise Skipped(f"the model is on {ctx.storage_class}")
    if ctx.mount_of(ctx.root) is None:
        raise Unavailable("mount table unavailable")
    largest = max(ctx.files, key=lambda f: f[1])[0]
    return LocalDisks(local_candidates(ctx.mount_of, total, os.stat(largest).st_dev))


def _lines(block: dict[str, Any]) -> Lines:
    disks = block.get("disks") or []
    if not disks:
        return [("local disk", "no local-disk directory with room for a copy was found")]
    out = []
    for d in disks:
        where = f"{d['directory']} ({format_bytes(d['free_bytes'])} free)"
        speed = d.get("speed")
        if not speed:
            out.append(("local disk", f"{where}: {d.get('reason') or 'not measured'}"))
            continue
        cold = "" if speed.get("cold_verified") else " (cold not verified)"
        out.append(
            (
                "local disk",
                f"{where}: writes {format_rate(speed['write_bytes_per_s'])}, reads"
                f" {format_rate(speed['cold_read_bytes_per_s'])} cold{cold}",
            )
        )
    return out


def _facts(block: dict[str, Any]) -> dict[str, Any]:
    """The fastest candidate the probe timed (a copy's destination), if any."""
    timed = [d for d in block.get("disks") or [] if d.get("speed")]
    if not timed:
        return {}
    best = max(timed, key=lambda d: float(d["speed"]["cold_read_bytes_per_s"]))
    speed = best["speed"]
    return {
        "local_disk": LocalDiskFacts(
            best["directory"],
            int(best["free_bytes"]),
            float(speed["write_bytes_per_s"]),
            float(speed["cold_read_bytes_per_s"]),
            bool(speed["cold_verified"]),
        )
    }


SPEC = ProbeSpec(
    "local_disks",
    "local disks",
    LocalDisks,
    _run,
    _lines,
    facts=_facts,
    after_reads=True,
    label="local disk",
    sources=EVERY_SOURCE,
)


def fastest_disk(block: Any) -> tuple[str, float] | None:
    """``(directory, cold read rate)`` of the fastest measured local disk in the local
    disks' block of the probe report's JSON, or None."""
    measured = [
        (str(d.get("directory")), float(rate))
        for d in (block.get("disks") or [] if isinstance(block, dict) else [])
        if isinstance(d, dict) and isinstance(d.get("speed"), dict)
        if isinstance(rate := d["speed"].get("cold_read_bytes_per_s"), int | float)
    ]
    return max(measured, key=lambda pair: pair[1], default=None)


def disk_directories(block: Any) -> list[str]:
    """The local disks' folders in their block of the probe report's JSON."""
    disks = block.get("disks") or [] if isinstance(block, dict) else []
    return [
        d["directory"] for d in disks if isinstance(d, dict) and isinstance(d.get("directory"), str)
    ]
