"""Memory a load may take: available RAM (/proc/meminfo), this process's cgroup limit and
usage (v2 ``memory.max``, v1 ``memory.limit_in_bytes``, the tightest over the ancestors)
and the OOM killer's counters.

Apart from the rest of the system probe: the public API's memory guard reads it on a
user's first call, which then imports no psutil and none of the probe's records.

May import: ``loadscope.probes.sysfs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadscope.probes.sysfs import read_int, read_text

#: cgroup v1 writes "no limit" as a huge number (2^63 rounded down to a page).
_V1_UNLIMITED = 1 << 60


@dataclass(frozen=True, slots=True)
class CgroupMemory:
    version: int  # 1 or 2
    path: str
    #: The tightest limit over this cgroup and its ancestors; None means unlimited.
    limit_bytes: int | None
    usage_bytes: int | None
    limit_file: str | None
    #: Page cache the kernel reclaims first (``inactive_file`` in ``memory.stat``): counted in
    #: the usage, but not in the way of a new allocation (the kubelet's "working set" rule).
    reclaimable_bytes: int | None = None

    @property
    def working_set_bytes(self) -> int | None:
        if self.usage_bytes is None:
            return None
        return max(0, self.usage_bytes - (self.reclaimable_bytes or 0))


def headroom_bytes(available: int, cgroup: CgroupMemory | None) -> int:
    """Memory a new allocation may take: available RAM, capped by the cgroup's room."""
    if cgroup is not None and cgroup.limit_bytes is not None:
        return min(available, max(0, cgroup.limit_bytes - (cgroup.working_set_bytes or 0)))
    return available


def memory_headroom(root: Path = Path("/")) -> int:
    """min(available RAM, cgroup limit - usage), without the rest of the system probe
    (which asks torch about GPUs): what a guard checks before holding a model in RAM.
    Read from /proc/meminfo's MemAvailable, as psutil reads it on Linux, without
    importing psutil: 11 ms of a first ``load_file``'s set-up here."""
    available = meminfo_bytes("MemAvailable", root)
    if available is None:  # a kernel before 3.14, or no /proc: psutil's estimate
        import psutil

        available = int(psutil.virtual_memory().available)
    return headroom_bytes(available, cgroup_memory(root))


def meminfo_bytes(field: str, root: Path = Path("/")) -> int | None:
    """One /proc/meminfo field in bytes (its kB are KiB), or None where it is absent."""
    try:
        text = (root / "proc" / "meminfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name == field:
            parts = rest.split()
            if parts and parts[0].isdigit():
                return int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return None


def page_cache_room(root: Path = Path("/")) -> tuple[int, str]:
    """The most file data the page cache can hold for us, and what sets it.

    The page cache is charged to the memory cgroup (v1 and v2), so a limit smaller
    than the model means a warm cache can never be reached, however often it is read.
    """
    import psutil

    total = int(psutil.virtual_memory().total)
    cgroup = cgroup_memory(root)
    if cgroup is not None and cgroup.limit_bytes is not None and cgroup.limit_bytes < total:
        return cgroup.limit_bytes, f"the memory cgroup limit ({cgroup.limit_bytes >> 20} MiB)"
    return total, f"the machine's RAM ({total >> 20} MiB)"


def cgroup_memory(root: Path = Path("/")) -> CgroupMemory | None:
    """This process's cgroup memory limit, v2 first, then v1; None when neither is visible."""
    lines = (read_text(root / "proc/self/cgroup") or "").splitlines()
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and controllers == "":
            found = _walk_limits(root / "sys/fs/cgroup", path, "memory.max", "memory.current")
            if found is not None:
                return CgroupMemory(2, path, *found[:3], _stat_value(found[3], "inactive_file"))
    for line in lines:
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            base = root / "sys/fs/cgroup/memory"
            found = _walk_limits(base, path, "memory.limit_in_bytes", "memory.usage_in_bytes")
            if found is not None:
                reclaimable = _stat_value(found[3], "total_inactive_file")
                return CgroupMemory(1, path, *found[:3], reclaimable)
    return None


def _stat_value(level: Path | None, key: str, name: str = "memory.stat") -> int | None:
    """One ``key value`` line of a cgroup's flat-keyed file (memory.stat, memory.events)."""
    if level is None:
        return None
    for line in (read_text(level / name) or "").splitlines():
        k, _, v = line.partition(" ")
        if k == key and v.strip().isdigit():
            return int(v)
    return None


def oom_kills(root: Path = Path("/")) -> int | None:
    """OOM kills so far in this process's memory cgroup plus the whole machine; None if unknown.

    A worker killed by SIGKILL was OOM-killed when this number moved during its run:
    v2 ``memory.events`` and v1 ``memory.oom_control`` count kills in our cgroup (a
    worker lives in it), ``/proc/vmstat`` counts the global OOM killer's.
    """
    counts: list[int] = []
    vmstat = _stat_value(root / "proc", "oom_kill", "vmstat")
    if vmstat is not None:
        counts.append(vmstat)
    for line in (read_text(root / "proc/self/cgroup") or "").splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        rel = path.strip("/")
        if hier == "0" and controllers == "":
            n = _stat_value(root / "sys/fs/cgroup" / rel, "oom_kill", "memory.events")
        elif "memory" in controllers.split(","):
            n = _stat_value(root / "sys/fs/cgroup/memory" / rel, "oom_kill", "memory.oom_control")
        else:
            continue
        if n is not None:
            counts.append(n)
    return sum(counts) if counts else None


def describe_death(signal_name: str, oom_before: int | None, root: Path = Path("/")) -> str:
    """Why a child died of ``signal_name``, asking the OOM counters read before it started."""
    if signal_name == "SIGBUS":
        return (
            "killed by SIGBUS: a read through a memory mapping failed (the storage"
            " returned an I/O error, or the file shrank while mapped)"
        )
    if signal_name != "SIGKILL":
        return f"killed by {signal_name}"
    after = oom_kills(root)
    if oom_before is None or after is None:
        return "killed by SIGKILL (the OOM killer? its counters are not readable here; see dmesg)"
    if after <= oom_before:
        return "killed by SIGKILL (not the OOM killer: its counters did not move)"
    cgroup = cgroup_memory(root)
    where = (
        f"the memory cgroup limit is {cgroup.limit_bytes >> 20} MiB"
        if cgroup is not None and cgroup.limit_bytes is not None
        else "the machine ran out of memory"
    )
    return f"killed by the OOM killer: out of memory ({where})"


def _walk_limits(
    base: Path, path: str, limit_name: str, usage_name: str
) -> tuple[int | None, int | None, str | None, Path | None] | None:
    """The tightest limit from ``base/path`` up to ``base``; None if no level has the file.

    Inside a container the cgroup path may not exist under the mount (cgroup
    namespaces make the mount root the container's own cgroup), so levels that
    are missing are skipped rather than taken as "unlimited".
    """
    parts = [p for p in path.strip("/").split("/") if p]
    limit: int | None = None
    limit_file: str | None = None
    usage: int | None = None
    usage_level: Path | None = None
    seen = False
    for depth in range(len(parts), -1, -1):
        level = base.joinpath(*parts[:depth])
        raw = read_text(level / limit_name)
        if raw is None:
            continue
        if not seen:
            usage, usage_level = read_int(level / usage_name), level
        seen = True
        value = None if raw == "max" else int(raw) if raw.isdigit() else None
        if value is not None and value >= _V1_UNLIMITED:
            value = None
        if value is not None and (limit is None or value < limit):
            limit, limit_file = value, str(level / limit_name)
    return (limit, usage, limit_file, usage_level) if seen else None
