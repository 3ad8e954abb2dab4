"""What kind of storage a mount really is.

Sorts a mount of the table (:mod:`loadscope.probes.mounttable`) into one of the classes of
:data:`loadscope.probes.result.StorageClass` with a reason naming the evidence
("nfs4 mount of fs1:/export (vers=4.2, nconnect=8): an NFS export"), because a verdict
nobody can check is a verdict nobody should act on; an overlay is followed down to the
storage under its upperdir. Only the mount table is read here; whether a disk that looks
local is really a cloud volume is the block-device probe's call, and its verdict is
passed in as ``device_network``. The mount table's names (:class:`Mount`,
:func:`read_mountinfo`, :func:`mount_of`, ...) are importable from here too.

May import: ``loadscope.probes.result``, ``loadscope.probes.mounttable``,
``loadscope.probes.spec`` (how a probe's lines are declared).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from loadscope.probes.mounttable import (
    MOUNTINFO_PATH,
    MalformedMountLine,
    Mount,
    block_device_of,
    mount_of,
    parse_mountinfo,
    parse_mountinfo_line,
    parse_options,
    read_mountinfo,
    unescape,
)
from loadscope.probes.result import StorageClass, Unavailable
from loadscope.probes.spec import Lines, block_of, blocks_of, ok, status_text

__all__ = [
    "BLOCK_FILESYSTEMS",
    "FUSE_FILESYSTEMS",
    "FUSE_SUBTYPES",
    "MEMORY_FILESYSTEMS",
    "MOUNTINFO_PATH",
    "NETWORK_FILESYSTEMS",
    "NETWORK_FUSE_SUBTYPES",
    "OBJECT_STORE_FUSE",
    "OVERLAY_FILESYSTEMS",
    "PSEUDO_FILESYSTEMS",
    "Classification",
    "DeviceNetwork",
    "DeviceVerdict",
    "MalformedMountLine",
    "Mount",
    "MountReport",
    "block_device_of",
    "classify",
    "describe_mount",
    "fuse_subtype",
    "interesting_options",
    "mount_of",
    "object_store_behind",
    "overlay_dirs",
    "parse_mountinfo",
    "parse_mountinfo_line",
    "parse_options",
    "read_mountinfo",
    "resolve_overlay",
    "unescape",
]

#: Filesystems whose files live in RAM.
MEMORY_FILESYSTEMS: dict[str, str] = {
    "tmpfs": "files live in RAM (or swap)",
    "ramfs": "files live in RAM",
    "hugetlbfs": "huge pages in RAM",
    "devtmpfs": "device nodes kept in RAM",
}

#: Network and cluster filesystems, by kernel fstype, with a phrase for the reason.
NETWORK_FILESYSTEMS: dict[str, str] = {
    "nfs": "an NFS export",
    "nfs4": "an NFS export",
    "cifs": "an SMB/CIFS share",
    "smb3": "an SMB3 share",
    "smbfs": "an SMB share",
    "lustre": "a Lustre parallel filesystem",
    "gpfs": "an IBM Storage Scale (GPFS) filesystem",
    "beegfs": "a BeeGFS parallel filesystem",
    "ceph": "CephFS through the kernel client",
    "glusterfs": "a GlusterFS volume",
    "virtiofs": "a virtio-fs share of a directory on the VM host",
    "9p": "a 9P share (a VM host directory, e.g. QEMU virtfs)",
    "v9fs": "a 9P share (a VM host directory, e.g. QEMU virtfs)",
    "afs": "an AFS cell",
    "orangefs": "an OrangeFS parallel filesystem",
    "pvfs2": "an OrangeFS (PVFS2) parallel filesystem",
    "wekafs": "a WekaFS filesystem",
    "panfs": "a Panasas PanFS filesystem",
}

#: Filesystems that sit on a block device (or, for zfs, a pool of them).
BLOCK_FILESYSTEMS: frozenset[str] = frozenset(
    {
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "f2fs",
        "vfat",
        "exfat",
        "ntfs",
        "ntfs3",
        "iso9660",
        "squashfs",
        "erofs",
        "zfs",
        "bcachefs",
        "jfs",
        "reiserfs",
        "udf",
        "hfsplus",
    }
)

FUSE_FILESYSTEMS: frozenset[str] = frozenset({"fuse", "fuseblk"})
OVERLAY_FILESYSTEMS: frozenset[str] = frozenset({"overlay", "overlayfs", "aufs"})

#: FUSE subtypes we recognise, with what is really behind them.
FUSE_SUBTYPES: dict[str, str] = {
    "gcsfuse": "a Google Cloud Storage bucket (Cloud Storage FUSE)",
    "blobfuse2": "an Azure Blob Storage container (blobfuse2)",
    "blobfuse": "an Azure Blob Storage container (blobfuse v1)",
    "s3fs": "an S3 bucket (s3fs-fuse)",
    "goofys": "an S3 bucket (goofys)",
    "mountpoint-s3": "an S3 bucket (Mountpoint for Amazon S3)",
    "geesefs": "an S3 bucket (GeeseFS)",
    "sshfs": "a remote directory over SSH/SFTP (sshfs)",
    "rclone": "a remote or cloud store through rclone mount",
    "juicefs": "JuiceFS: objects in a store plus a metadata engine",
    "ceph-fuse": "CephFS through the userspace ceph-fuse client",
    "drive": "Google Drive (Colab DriveFS)",
    "drivefs": "Google Drive (Colab DriveFS)",
    "alluxio-fuse": "Alluxio, a cache in front of remote storage",
    "alluxio": "Alluxio, a cache in front of remote storage",
    "cvmfs2": "CernVM-FS, files fetched over HTTP on first access",
    "squashfuse": "a squashfs image file unpacked in userspace",
    "snapfuse": "a snap's squashfs image unpacked in userspace",
    "gvfsd-fuse": "GNOME gvfs remote locations (SFTP, SMB, WebDAV)",
    "lxcfs": "LXCFS, the container's views of /proc and /sys; not storage",
    "portal": "the xdg document portal; not storage",
}

#: FUSE daemons that serve an object store's bucket as files: each read a ranged GET (or
#: a stream of them), so a load meets the store's request latency and per-connection
#: bandwidth through the daemon.
OBJECT_STORE_FUSE: frozenset[str] = frozenset(
    {"gcsfuse", "blobfuse2", "blobfuse", "s3fs", "goofys", "mountpoint-s3", "geesefs", "rclone"}
)


def object_store_behind(subtype: str | None) -> str | None:
    """What serves a FUSE mount of ``subtype`` when it is an object store's bucket (the
    daemon's words: "an S3 bucket (Mountpoint for Amazon S3)"), else None."""
    return FUSE_SUBTYPES[subtype] if subtype in OBJECT_STORE_FUSE else None


#: FUSE clients that are the native client of a network filesystem, not an object-store shim.
NETWORK_FUSE_SUBTYPES: dict[str, str] = {
    "glusterfs": "a GlusterFS volume through its native (FUSE) client",
}

#: Kernel pseudo-filesystems: a model file never really lives here.
PSEUDO_FILESYSTEMS: dict[str, str] = {
    "proc": "process and kernel information",
    "sysfs": "kernel objects",
    "cgroup": "cgroup v1 controls",
    "cgroup2": "cgroup v2 controls",
    "devpts": "pseudo-terminals",
    "mqueue": "POSIX message queues",
    "debugfs": "kernel debugging files",
    "tracefs": "kernel tracing",
    "securityfs": "security module files",
    "pstore": "saved crash logs",
    "bpf": "pinned BPF objects",
    "configfs": "kernel object configuration",
    "fusectl": "FUSE connection controls",
    "binfmt_misc": "executable format registrations",
    "nsfs": "a namespace handle",
    "efivarfs": "UEFI variables",
    "selinuxfs": "SELinux controls",
    "rpc_pipefs": "NFS client RPC pipes",
    "nfsd": "NFS server controls",
    "autofs": "an automount trigger (the real filesystem appears once the path is accessed)",
}

# Options worth showing per filesystem; the rest of a mount's options is noise for loading.
# The kernel never prints "actimeo" for NFS (it expands it to the four ac* timeouts), so
# those are listed too; "hard"/"soft" are flags and come through with the value None.
_NFS_OPTIONS = (
    "vers",
    "proto",
    "nconnect",
    "rsize",
    "wsize",
    "timeo",
    "hard",
    "soft",
    "actimeo",
    "acregmin",
    "acregmax",
    "acdirmin",
    "acdirmax",
    "noac",
)
_CIFS_OPTIONS = ("vers", "rsize", "wsize", "cache", "actimeo")
_FUSE_OPTIONS = ("allow_other", "max_read", "user_id", "default_permissions")
_INTERESTING_OPTIONS: dict[str, tuple[str, ...]] = {
    "nfs": _NFS_OPTIONS,
    "nfs4": _NFS_OPTIONS,
    "cifs": _CIFS_OPTIONS,
    "smb3": _CIFS_OPTIONS,
    "smbfs": _CIFS_OPTIONS,
    "fuse": _FUSE_OPTIONS,
    "fuseblk": _FUSE_OPTIONS,
    "overlay": ("upperdir", "lowerdir"),
    "9p": ("aname", "trans", "msize", "cache"),
    "tmpfs": ("size",),
}
# The few that go into the one-line reason, where a long list would bury the point.
_REASON_OPTIONS: dict[str, tuple[str, ...]] = {
    "nfs": ("vers", "proto", "nconnect", "rsize"),
    "nfs4": ("vers", "proto", "nconnect", "rsize"),
    "cifs": ("vers", "cache", "rsize"),
    "smb3": ("vers", "cache", "rsize"),
    "smbfs": ("vers", "cache", "rsize"),
    "9p": ("trans", "msize", "cache"),
    "fuse": ("max_read",),
    "tmpfs": ("size",),
}

# An overlay resting on an overlay is real (docker-in-docker); deeper than this is a loop.
_MAX_OVERLAY_DEPTH = 4


#: (the device is a network volume posing as a local disk, the evidence for saying so).
DeviceVerdict: TypeAlias = tuple[bool, str]
#: A verdict for the mount being described, or a function asked for each block-backed
#: mount involved (the mount itself, or the one under an overlay's upperdir).
DeviceNetwork: TypeAlias = DeviceVerdict | Callable[[Mount], DeviceVerdict | None] | None


@dataclass(frozen=True, slots=True)
class MountReport:
    """What the mount probe says about one mount, ready for JSON, advice and display."""

    mount_point: str
    fstype: str
    subtype: str | None  # also the daemon named by the source of a plain "fuse" mount
    source: str
    device: str  # "major:minor" as in mountinfo (an anonymous 0:N for most non-disk types)
    block_device: str | None  # the real disk's "major:minor" where there is one
    options: dict[str, str | None] = field(hash=False)  # the options that matter for loading
    storage_class: StorageClass
    reason: str
    resolved_class: StorageClass | None = None  # overlay only: the storage under its upperdir
    resolved_reason: str | None = None


# ---------------------------------------------------------------------------- classifying

_SOURCE_NAME = re.compile(r"([A-Za-z][A-Za-z0-9_.+-]*)(?:[#:].*)?")


def fuse_subtype(mount: Mount) -> str | None:
    """The FUSE daemon behind a mount: from "fuse.X", else from a known name in the source.

    Plain "fuse" mounts name their daemon only in the source ("mountpoint-s3",
    "blobfuse2", the old "sshfs#user@host:/path"); an unknown source (a bucket name) is
    not taken as a subtype.
    """
    if mount.subtype or mount.fstype not in FUSE_FILESYSTEMS:
        return mount.subtype
    match = _SOURCE_NAME.fullmatch(mount.source)
    if match is None:
        return None
    name = match.group(1).lower()
    return name if name in FUSE_SUBTYPES or name in NETWORK_FUSE_SUBTYPES else None


def interesting_options(mount: Mount) -> dict[str, str | None]:
    """The options of ``mount`` that bear on loading speed (NFS rsize, FUSE max_read, ...)."""
    keys = _INTERESTING_OPTIONS.get(mount.fstype, ())
    merged = {**mount.mount_options, **mount.super_options}
    return {key: merged[key] for key in keys if key in merged}


def overlay_dirs(mount: Mount) -> dict[str, str]:
    """An overlay's ``upperdir``, ``lowerdir`` (colon-separated layers) and ``workdir``."""
    dirs: dict[str, str] = {}
    for key in ("upperdir", "lowerdir", "workdir"):
        value = mount.super_options.get(key)
        if value:
            dirs[key] = value
    return dirs


def _option_text(mount: Mount, keys: Sequence[str]) -> str:
    merged = {**mount.mount_options, **mount.super_options}
    shown = [
        key if merged[key] is None else f"{key}={merged[key]}" for key in keys if key in merged
    ]
    return f" ({', '.join(shown)})" if shown else ""


def _source_text(mount: Mount) -> str:
    return mount.source or "(no source)"


def _verdict(device_network: DeviceNetwork, mount: Mount) -> DeviceVerdict | None:
    if callable(device_network):
        return device_network(mount)
    return device_network


def _network_device_by_name(source: str) -> str | None:
    """Why a device name alone says it is remote, or None."""
    name = posixpath.basename(source)
    if re.fullmatch(r"nbd\d+(p\d+)?", name):
        return "a Network Block Device (NBD), usually served over the network"
    if re.fullmatch(r"rbd\d+(p\d+)?", name) or source.startswith("/dev/rbd/") or source == "rbd":
        return "a Ceph RADOS block device (RBD): every read goes to the Ceph cluster"
    if "iscsi" in source.lower():
        return "an iSCSI disk: every read crosses the network"
    return None


def _block_reason(mount: Mount) -> str:
    """What the mount table alone says about a block-backed filesystem."""
    source = _source_text(mount)
    if mount.fstype == "zfs":
        return f"zfs dataset {source}: a ZFS pool (the disks behind it are not in the mount table)"
    base = f"{mount.fstype} on {source}"
    if mount.major == 0:
        base += f" (anonymous device {mount.device}; the disk is the source)"
    name = posixpath.basename(source)
    if re.fullmatch(r"loop\d+(p\d+)?", name):
        return f"{base}: a loop device, so the bytes come from an image file on another filesystem"
    if source.startswith("/dev/mapper/") or re.fullmatch(r"dm-\d+", name):
        return f"{base}: a device-mapper volume (LVM or dm-crypt) on a local disk"
    if re.fullmatch(r"md\d+(p\d+)?", name) or source.startswith("/dev/md/"):
        return f"{base}: a software RAID (md) of local disks"
    return f"{base}: a block-device filesystem, and nothing says the disk is remote"


#: A storage class and the reason for it, naming the evidence.
Classification: TypeAlias = tuple[StorageClass, str]


def _memory_class(mount: Mount) -> Classification:
    opts = _option_text(mount, ("size",))
    why = MEMORY_FILESYSTEMS[mount.fstype]
    return "memory", f"{mount.fstype} at {mount.mount_point}{opts}: {why}"


def _wsl_class(mount: Mount, *, wsl: bool) -> Classification | None:
    """A Windows drive or share seen from WSL, or None (a 9p mount elsewhere is a network fs)."""
    fstype = mount.fstype
    source = _source_text(mount)
    if fstype in ("9p", "v9fs"):
        aname = mount.super_options.get("aname") or ""
        aname_parts = aname.split(";")
        opts = _option_text(mount, _REASON_OPTIONS["9p"])
        if aname_parts[0] == "drvfs":
            drive = next((p[5:] for p in aname_parts if p.startswith("path=")), source)
            return "wsl", (
                f"9p mount of {source} with aname=drvfs{opts}: Windows drive {drive} seen from "
                "WSL2 through the Plan 9 file server; every read crosses the VM boundary"
            )
        if wsl:
            return "wsl", (
                f"9p mount of {source} on a WSL system{opts}: a Windows-side share seen from "
                "WSL2 through the Plan 9 file server"
            )
    if fstype == "drvfs":
        return "wsl", f"drvfs mount of {source}: a Windows drive seen from WSL1"
    if fstype in ("lxfs", "wslfs"):
        return "wsl", f"{fstype} mount of {source}: the WSL1 Linux tree, stored in Windows files"
    if fstype == "virtiofs" and wsl and source.lower().startswith("drvfs"):
        return "wsl", f"virtiofs mount of {source} on a WSL system: a Windows drive seen from WSL2"
    return None


def _network_fs_class(mount: Mount) -> Classification:
    source = _source_text(mount)
    opts = _option_text(mount, _REASON_OPTIONS.get(mount.fstype, ()))
    why = NETWORK_FILESYSTEMS[mount.fstype]
    return "network-fs", f"{mount.full_fstype} mount of {source}{opts}: {why}"


def _fuse_class(mount: Mount) -> Classification:
    """A FUSE mount: the native client of a network filesystem, or a userspace daemon."""
    full = mount.full_fstype
    source = _source_text(mount)
    subtype = fuse_subtype(mount)
    opts = _option_text(mount, _REASON_OPTIONS["fuse"])
    named = "" if subtype is None or mount.subtype else f" (subtype {subtype} from the source)"
    if subtype in NETWORK_FUSE_SUBTYPES:
        why = NETWORK_FUSE_SUBTYPES[subtype]
        return "network-fs", f"{full} mount of {source}{named}{opts}: {why}"
    if subtype in FUSE_SUBTYPES:
        why = FUSE_SUBTYPES[subtype]
    elif mount.fstype == "fuseblk":
        why = "a FUSE driver over a block device (e.g. ntfs-3g)"
    else:
        why = "a FUSE filesystem; every read goes through a userspace daemon"
    return "fuse", f"{full} mount of {source}{named}{opts}: {why}"


def _overlay_class(mount: Mount) -> Classification:
    dirs = overlay_dirs(mount)
    if "upperdir" in dirs or "lowerdir" in dirs:
        layers = len([d for d in dirs.get("lowerdir", "").split(":") if d])
        upper = f"upperdir={dirs['upperdir']}, " if "upperdir" in dirs else ""
        evidence = f" ({upper}{layers} lower layer{'s' if layers != 1 else ''})"
    else:
        evidence = ""
    return "overlay", (
        f"{mount.fstype} at {mount.mount_point}{evidence}: layered container storage; "
        "the bytes live on the filesystem under its layers"
    )


def _block_class(mount: Mount, device_network: DeviceNetwork) -> Classification:
    """A block-backed filesystem: local, or a network volume by verdict or device name."""
    fstype = mount.fstype
    source = _source_text(mount)
    verdict = _verdict(device_network, mount)
    if verdict is not None and verdict[0]:
        return "network-block", f"{fstype} on {source}: {verdict[1]}"
    by_name = _network_device_by_name(mount.source)
    if by_name is not None:
        # The name wins over a "local" verdict: sysfs shows nothing remote about an
        # nbd or rbd device, the network is behind the driver.
        return "network-block", f"{fstype} on {source}: {by_name}"
    if verdict is not None:
        return "local-block", f"{fstype} on {source}: {verdict[1]}"
    return "local-block", _block_reason(mount)


def classify(mount: Mount, *, wsl: bool, device_network: DeviceNetwork = None) -> Classification:
    """The storage class of ``mount`` and the reason, naming the evidence.

    ``wsl`` says this system is WSL (from the system probe), which makes any 9p mount a
    Windows-side share. ``device_network`` is the block-device probe's verdict on the
    disk under a block-backed filesystem: only it can tell an EBS or Persistent Disk
    volume from a local NVMe, since both look the same in the mount table.
    """
    fstype = mount.fstype
    if fstype in MEMORY_FILESYSTEMS:
        return _memory_class(mount)
    windows = _wsl_class(mount, wsl=wsl)
    if windows is not None:
        return windows
    if fstype in NETWORK_FILESYSTEMS:
        return _network_fs_class(mount)
    if fstype in FUSE_FILESYSTEMS:
        return _fuse_class(mount)
    if fstype in OVERLAY_FILESYSTEMS:
        return _overlay_class(mount)
    if fstype in BLOCK_FILESYSTEMS:
        return _block_class(mount, device_network)
    at = mount.mount_point
    if fstype in PSEUDO_FILESYSTEMS:
        return "unknown", f"{fstype} at {at}: {PSEUDO_FILESYSTEMS[fstype]}, not storage"
    source = _source_text(mount)
    return "unknown", f"unrecognised filesystem type {mount.full_fstype} (source {source}) at {at}"


def resolve_overlay(
    mount: Mount,
    mounts: Sequence[Mount],
    *,
    wsl: bool,
    device_network: DeviceNetwork = None,
    _depth: int = 0,
) -> tuple[StorageClass | None, str]:
    """The class of the storage under an overlay's upperdir (or first lower layer).

    None with the reason when that directory cannot be seen from here: inside a
    container the upperdir is a host path that this mount namespace does not contain.
    """
    dirs = overlay_dirs(mount)
    role, path = "upperdir", dirs.get("upperdir", "")
    if not path:
        role = "lowerdir"
        path = next((d for d in dirs.get("lowerdir", "").split(":") if d), "")
    if not path:
        return None, f"the {mount.fstype} options name no upperdir or lowerdir"
    if not path.startswith("/"):
        return None, (
            f"{role} {path} is relative to the working directory of whoever mounted the "
            "overlay; it cannot be resolved from here"
        )
    try:
        os.stat(path)
    except PermissionError:
        return None, f"{role} {path} cannot be read by this user"
    except OSError:
        return None, (
            f"{role} {path} is not visible from here (the overlay was assembled in another "
            "mount namespace, e.g. by the container runtime on the host)"
        )
    try:
        under = mount_of(path, mounts)
    except Unavailable as exc:
        return None, f"{role} {path}: {exc}"
    if under.mount_id == mount.mount_id:
        return None, f"{role} {path} resolves to the overlay itself"
    storage_class, why = classify(under, wsl=wsl, device_network=device_network)
    where = f"{role} {path} is on {under.mount_point}"
    if storage_class == "overlay" and _depth < _MAX_OVERLAY_DEPTH:
        deeper_class, deeper_why = resolve_overlay(
            under, mounts, wsl=wsl, device_network=device_network, _depth=_depth + 1
        )
        return deeper_class, f"{where}, itself an overlay: {deeper_why}"
    return storage_class, f"{where}: {why}"


def describe_mount(
    mount: Mount,
    mounts: Sequence[Mount],
    *,
    wsl: bool,
    device_network: DeviceNetwork = None,
) -> MountReport:
    """Everything the mount probe reports about ``mount``; ``mounts`` resolves overlays."""
    storage_class, reason = classify(mount, wsl=wsl, device_network=device_network)
    resolved_class: StorageClass | None = None
    resolved_reason: str | None = None
    if storage_class == "overlay":
        resolved_class, resolved_reason = resolve_overlay(
            mount, mounts, wsl=wsl, device_network=device_network
        )
    block = block_device_of(mount)
    return MountReport(
        mount_point=mount.mount_point,
        fstype=mount.fstype,
        subtype=fuse_subtype(mount),
        source=mount.source,
        device=mount.device,
        block_device=f"{block[0]}:{block[1]}" if block is not None else None,
        options=interesting_options(mount),
        storage_class=storage_class,
        reason=reason,
        resolved_class=resolved_class,
        resolved_reason=resolved_reason,
    )


def storage_lines(file: dict[str, Any]) -> Lines:
    """The storage under one weight file, from its block in the probe report's JSON (the
    mount's class and why, the overlay's, the mount, its disks, the readahead, the FUSE
    connection): what every output shows of it."""
    m = block_of(file.get("mount"))
    if not ok(m):
        return [("storage", status_text(m))]
    rows = [("storage", f"{m.get('storage_class')}: {m.get('reason')}")]
    if m.get("resolved_class"):
        rows.append(("", f"under the overlay: {m['resolved_class']} ({m.get('resolved_reason')})"))
    rows.append(("", f"mount {m.get('mount_point')} ({m.get('fstype')}, {m.get('source')})"))
    device = block_of(file.get("device"))
    if ok(device):
        for disk in blocks_of(device.get("disks")):
            bits = [str(disk.get("transport")), disk.get("model") or "no model string"]
            if disk.get("rotational"):
                bits.append("rotational")
            if disk.get("scheduler"):
                bits.append(f"scheduler {disk['scheduler']}")
            if disk.get("max_sectors_kb"):
                bits.append(f"max_sectors_kb {disk['max_sectors_kb']}")
            rows.append(("", f"disk {disk.get('name')}: {', '.join(bits)}"))
    bdi = block_of(file.get("bdi"))
    if ok(bdi) and bdi.get("read_ahead_kb") is not None:
        rows.append(("", f"read_ahead_kb {bdi['read_ahead_kb']} ({bdi.get('path')})"))
    fuse = block_of(file.get("fuse_connection"))
    if ok(fuse):
        conn = (
            f"max_background {fuse.get('max_background')},"
            f" congestion {fuse.get('congestion_threshold')}"
        )
        rows.append(("", f"fuse connection: {conn}"))
    return rows
