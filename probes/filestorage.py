"""The storage under each weight file, and the files' page-cache residency: the core
probes that run first, before any read of the model (``files`` and ``page_cache``).

Owns :class:`StorageProbe` (the mount, device chain, bdi and FUSE connection of one
filesystem, probed once for the files on it), :class:`FileProbe` (a file with its
storage and residency), :func:`file_probes`, and how any path's mount is classified
for the other probes (:func:`mount_and_class`, :func:`classified`). A loop device's
verdict follows the mount under its image (an image on FUSE or NFS is slow storage that
looks like a local disk).
May import: ``loadscope.probes.blockdev``, ``loadscope.probes.iosampler``,
``loadscope.probes.mounts``, ``loadscope.probes.pagecache``, ``loadscope.probes.result``,
``loadscope.probes.spec``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadscope.probes import blockdev, mounts
from loadscope.probes.iosampler import blind_signals
from loadscope.probes.pagecache import Residency, residency, residency_lines
from loadscope.probes.result import ProbeResult, Status, Unavailable, run_probe
from loadscope.probes.spec import ProbeContext, ProbeSpec, Shown, block_of, blocks_of


@dataclass(slots=True)
class StorageProbe:
    """Mount, device chain and bdi of one filesystem (shared by the files on it)."""

    mount: ProbeResult[mounts.MountReport]
    device: ProbeResult[blockdev.DeviceReport]
    bdi: ProbeResult[blockdev.BdiSettings]
    fuse: ProbeResult[blockdev.FuseConnection]
    block_stat_path: str | None = None
    blind_signals: dict[str, str] = field(default_factory=dict)
    #: Whether pages read from its files stay cached to the next open (FUSE and network
    #: filesystems are asked after the reads' probes,
    #: :func:`~loadscope.probes.pagecache.keeps_pages`; None: not asked, or no answer).
    keeps_pages: bool | None = None


@dataclass(slots=True)
class FileProbe:
    path: str
    size_bytes: int
    storage: StorageProbe
    residency: ProbeResult[Residency]

    def to_dict(self) -> dict[str, Any]:
        """The file's block in the probe report's JSON: its storage and its residency."""
        residency = self.residency.to_dict()
        if self.residency.data is not None:
            residency["fraction"] = self.residency.data.fraction
            residency["resident_bytes"] = self.residency.data.resident_bytes
        return {
            "path": self.path,
            "size_bytes": self.size_bytes,
            "mount": self.storage.mount.to_dict(),
            "device": self.storage.device.to_dict(),
            "bdi": self.storage.bdi.to_dict(),
            "fuse_connection": self.storage.fuse.to_dict(),
            "block_stat_path": self.storage.block_stat_path,
            "blind_signals": self.storage.blind_signals,
            "keeps_pages": self.storage.keeps_pages,
            "residency": residency,
        }


#: A probe result's status fields in the report's JSON (its data's beside them).
_STATUS_ONLY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "status": {"enum": ["ok", "unavailable", "failed", "skipped"]},
        "reason": {"type": ["string", "null"]},
        "elapsed_s": {"type": "number"},
    },
}
#: The JSON schema of a file's block (:meth:`FileProbe.to_dict`), which the report's
#: schema carries for ``probe.files``.
FILE_BLOCK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "size_bytes": {"type": "integer", "minimum": 0},
        "mount": _STATUS_ONLY,
        "device": _STATUS_ONLY,
        "bdi": _STATUS_ONLY,
        "fuse_connection": _STATUS_ONLY,
        "block_stat_path": {"type": ["string", "null"]},
        "blind_signals": {"type": "object", "additionalProperties": {"type": "string"}},
        "keeps_pages": {"type": ["boolean", "null"]},
        "residency": _STATUS_ONLY,
    },
}

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


def storage_of(path: Path, table: list[mounts.Mount], wsl: bool) -> StorageProbe:
    """The storage under ``path``: its mount, device chain, bdi and FUSE connection."""
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


def file_probes(
    files: Sequence[tuple[str, int]], table_result: ProbeResult[list[mounts.Mount]], wsl: bool
) -> list[FileProbe]:
    """Each weight file ``(path, bytes)`` with its storage (probed once per filesystem)
    and its residency."""
    table = table_result.data or []
    storages: dict[str, StorageProbe] = {}
    out: list[FileProbe] = []
    for path, size in files:
        key = str(os.stat(path).st_dev)
        if key not in storages:
            if table_result.data is None:
                failed = ProbeResult[Any]("mount", table_result.status, reason=table_result.reason)
                storages[key] = StorageProbe(failed, failed, failed, failed)
            else:
                storages[key] = storage_of(Path(path), table, wsl)
        probe = FileProbe(
            str(path),
            size,
            storages[key],
            run_probe("residency", functools.partial(residency, path)),
        )
        out.append(probe)
    return out


def mount_and_class(table: list[mounts.Mount], wsl: bool, path: str) -> tuple[str, str] | None:
    """``path``'s mount point and storage class (resolved: the class a FUSE or overlay
    mount stands for), as a registered probe's ``ProbeContext.mount_of``."""
    if not table:
        return None
    m = storage_of(Path(path), table, wsl).mount.data
    if m is None:
        return None
    return m.mount_point, m.resolved_class or m.storage_class


def classified(table: list[mounts.Mount], wsl: bool, path: str) -> tuple[str | None, str | None]:
    """The storage class of ``path``'s mount and why, as the model's own is classified
    (a registered probe's ``ProbeContext.classify``)."""
    if not table:
        return None, "mount table unavailable"
    storage = storage_of(Path(path), table, wsl)
    if storage.mount.data is None:
        return None, storage.mount.reason
    return storage.mount.data.storage_class, storage.mount.data.reason


def _run(ctx: ProbeContext) -> list[FileProbe]:
    table = run_probe("mountinfo", mounts.read_mountinfo)
    return file_probes(ctx.files, table, ctx.wsl)


def _storage_shown(doc: Mapping[str, Any]) -> Shown:
    """The storage under the files, once per filesystem (files on one share its probe)."""
    seen: set[str] = set()
    rows: Shown = []
    for f in blocks_of(doc.get("files")):
        key = json.dumps([f.get(k) for k in ("mount", "device", "bdi")], sort_keys=True)
        if key not in seen:
            seen.add(key)
            rows += mounts.storage_lines(f)
    return rows


def _residency_shown(doc: Mapping[str, Any]) -> Shown:
    return list(residency_lines(doc.get("files")))


SPEC = ProbeSpec(
    "files",
    "mounts and devices",
    FileProbe,
    _run,
    lambda _block: [],
    core=True,
    part="head",
    shown=_storage_shown,
)


def _residencies(ctx: ProbeContext) -> list[Residency]:
    """Each file's residency (:func:`file_probes` measures it with the file's storage)."""
    return [residency(path) for path, _size in ctx.files]


PAGE_CACHE = ProbeSpec(
    "page_cache",
    "page cache",
    Residency,
    _residencies,
    lambda _block: [],
    core=True,
    part="head",
    shown=_residency_shown,
    block="files",
)


def storage_class_of(doc: Mapping[str, Any]) -> str | None:
    """The storage class of the model's first file, from a probe report's JSON (None:
    no file probed, or its mount not classified)."""
    files = blocks_of(doc.get("files"))
    mount = block_of(files[0].get("mount")) if files else {}
    value = mount.get("storage_class")
    return str(value) if isinstance(value, str) else None


def mount_names(doc: Mapping[str, Any]) -> list[str]:
    """Where the model's filesystems come from, as a report names them (a server and its
    export, a FUSE daemon's source, the mount point): what redaction replaces."""
    out = []
    for f in blocks_of(doc.get("files")):
        mount = block_of(f.get("mount"))
        out += [v for k in ("source", "mount_point") if isinstance(v := mount.get(k), str)]
    return out
