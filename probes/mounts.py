"""Which mount a path lives on, and what kind of storage that mount really is.

Parses ``/proc/self/mountinfo`` (see proc(5)), finds the mount under a path the way
``findmnt -T`` does, and sorts it into one of the classes of
:data:`loadscope.probes.result.StorageClass` with a reason naming the evidence
("nfs4 mount of fs1:/export (vers=4.2, nconnect=8): an NFS export"), because a verdict
nobody can check is a verdict nobody should act on. Only the mount table is read here;
whether a disk that looks local is really a cloud volume is the block-device probe's
call, and its verdict is passed in as ``device_network``.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat as stat_module
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from loadscope.probes.result import StorageClass, Unavailable

MOUNTINFO_PATH = "/proc/self/mountinfo"

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


class MalformedMountLine(ValueError):
    """A mountinfo line that does not have the shape proc(5) describes; the message says how."""


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of ``/proc/self/mountinfo``, with the kernel's octal escapes decoded.

    ``fstype`` is the filesystem type before any dot and ``subtype`` what follows it
    ("fuse.gcsfuse" is fuse / gcsfuse); see :func:`fuse_subtype` for plain "fuse" mounts
    whose daemon named itself only in the source.
    """

    mount_id: int
    parent_id: int
    major: int
    minor: int
    root: str  # the directory of the filesystem that is mounted here ("/" unless a bind mount)
    mount_point: str
    mount_options: dict[str, str | None] = field(hash=False)
    optional_fields: tuple[str, ...]
    fstype: str
    subtype: str | None
    source: str
    super_options: dict[str, str | None] = field(hash=False)

    @property
    def full_fstype(self) -> str:
        """The type as the kernel and findmnt print it: "fuse.sshfs", "ext4"."""
        return f"{self.fstype}.{self.subtype}" if self.subtype else self.fstype

    @property
    def device(self) -> str:
        """The ``st_dev`` of files on this mount as "major:minor"."""
        return f"{self.major}:{self.minor}"


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


# ---------------------------------------------------------------------------- parsing

# The kernel escapes space, tab, newline, backslash (and '#') in paths as \ooo.
_OCTAL_ESCAPE = re.compile(r"\\([0-3][0-7]{2})")
_DECIMAL = re.compile(r"[0-9]+")


def _decode_escape(match: re.Match[str]) -> str:
    value = int(match.group(1), 8)
    # Bytes above ASCII in the surrogateescape form, so os.fsencode gives the bytes back.
    return chr(value) if value < 0x80 else chr(0xDC00 + value)


def unescape(text: str) -> str:
    r"""A mountinfo field with its octal escapes decoded (``\040`` is a space)."""
    return _OCTAL_ESCAPE.sub(_decode_escape, text) if "\\" in text else text


def parse_options(text: str) -> dict[str, str | None]:
    """``rw,vers=4.2,hard`` as ``{"rw": None, "vers": "4.2", "hard": None}``.

    Commas inside double quotes do not split: SELinux prints
    ``context="system_u:object_r:container_file_t:s0:c1,c2"``. The quotes are dropped.
    """
    items: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            items.append("".join(current))
            current = []
            continue
        current.append(char)
    items.append("".join(current))
    options: dict[str, str | None] = {}
    for item in items:
        if not item:
            continue
        key, sep, value = item.partition("=")
        if sep and len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        options[unescape(key)] = unescape(value) if sep else None
    return options


def _decimal(text: str, what: str) -> int:
    if not _DECIMAL.fullmatch(text):
        raise MalformedMountLine(f"{what} {text!r} is not a decimal number")
    return int(text)


def parse_mountinfo_line(line: str) -> Mount:
    """One mountinfo line as a :class:`Mount`; raises :class:`MalformedMountLine` saying why.

    The shape (proc(5)): ``ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] -
    FSTYPE SOURCE SUPER_OPTIONS``, fields separated by single spaces (a field can be
    empty, e.g. a mount whose source was given as "").
    """
    fields = line.rstrip("\n").split(" ")
    try:
        separator = fields.index("-", 6)
    except ValueError:
        raise MalformedMountLine(
            f"no ' - ' separator after the sixth field ({len(fields)} fields)"
        ) from None
    after = fields[separator + 1 :]
    if len(after) != 3:
        raise MalformedMountLine(
            f"expected fstype, source and super options after ' - ', found {len(after)} fields"
        )
    mount_id = _decimal(fields[0], "mount ID")
    parent_id = _decimal(fields[1], "parent ID")
    major_text, colon, minor_text = fields[2].partition(":")
    if not colon:
        raise MalformedMountLine(f"device {fields[2]!r} is not major:minor")
    major = _decimal(major_text, "major")
    minor = _decimal(minor_text, "minor")
    mount_point = unescape(fields[4])
    if not mount_point.startswith("/"):
        raise MalformedMountLine(f"mount point {mount_point!r} is not an absolute path")
    full_type = unescape(after[0])
    fstype, dot, subtype = full_type.partition(".")
    if not fstype:
        raise MalformedMountLine(f"empty filesystem type {full_type!r}")
    return Mount(
        mount_id=mount_id,
        parent_id=parent_id,
        major=major,
        minor=minor,
        root=unescape(fields[3]),
        mount_point=mount_point,
        mount_options=parse_options(fields[5]),
        optional_fields=tuple(f for f in fields[6:separator] if f),
        fstype=fstype,
        subtype=subtype if dot and subtype else None,
        source=unescape(after[1]),
        super_options=parse_options(after[2]),
    )


def parse_mountinfo(text: str) -> list[Mount]:
    """Every well-formed line of a mountinfo text, in order; malformed lines are skipped.

    Use :func:`parse_mountinfo_line` to learn why a line was refused.
    """
    mounts: list[Mount] = []
    # Split on "\n" only: str.splitlines would also cut at \x1c or U+2028, which the kernel
    # leaves unescaped in paths.
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            mounts.append(parse_mountinfo_line(line))
        except MalformedMountLine:
            continue  # one odd line (a future kernel's format) must not hide all other mounts
    return mounts


def read_mountinfo(path: str | os.PathLike[str] = MOUNTINFO_PATH) -> list[Mount]:
    """The mount table of this process's mount namespace (or of ``path``)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise Unavailable(f"{path} does not exist (not Linux, or /proc is not mounted)") from None
    except OSError as exc:
        raise Unavailable(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_mountinfo(text)


# ---------------------------------------------------------------------------- lookup


def _components(path: str) -> tuple[str, ...]:
    return tuple(part for part in posixpath.normpath(path).split("/") if part)


def mount_of(path: str | os.PathLike[str], mounts: Sequence[Mount]) -> Mount:
    """The mount that serves ``path``: symlinks resolved, then the longest mount point.

    Mount points match whole components (/mnt/data2 is not under /mnt/data). Order in
    mountinfo is not mount order (mounts moved from the initramfs are listed before "/"),
    so a shorter later mount never hides a longer one; where several mounts share the
    winning mount point, the one stacked on top wins: the one no other mount there has as
    its parent, and among those the last in mountinfo order (as ``findmnt -T`` does).
    """
    real = os.path.realpath(path)
    parts = _components(real)
    best: list[Mount] = []
    best_depth = -1
    for mount in mounts:
        point = _components(mount.mount_point)
        if len(point) < best_depth or parts[: len(point)] != point:
            continue
        if len(point) > best_depth:
            best, best_depth = [mount], len(point)
        else:
            best.append(mount)
    if not best:
        raise Unavailable(f"no mount in the mount table contains {real}")
    ids = {m.mount_id for m in best}
    covered = {m.parent_id for m in best if m.parent_id in ids and m.parent_id != m.mount_id}
    on_top = [m for m in best if m.mount_id not in covered]
    return (on_top or best)[-1]


class _StatResult(Protocol):
    @property
    def st_mode(self) -> int: ...
    @property
    def st_rdev(self) -> int: ...


def block_device_of(
    mount: Mount, *, stat: Callable[[str], _StatResult] = os.stat
) -> tuple[int, int] | None:
    """The (major, minor) of the block device under ``mount``, or None when there is none.

    btrfs (and bcachefs, and some others) report an anonymous device number (major 0)
    in mountinfo and ``st_dev``, so the real disk comes from stat'ing the source
    (``/dev/sda2``); a source that is not a block device (a zfs dataset, "tmpfs",
    a host:path) gives None.
    """
    if mount.major != 0:
        return (mount.major, mount.minor)
    if not mount.source.startswith("/dev/"):
        return None
    try:
        st = stat(mount.source)
    except OSError:
        return None
    if not stat_module.S_ISBLK(st.st_mode):
        return None
    return (os.major(st.st_rdev), os.minor(st.st_rdev))


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
    source = mount.source or "(no source)"
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


def classify(
    mount: Mount, *, wsl: bool, device_network: DeviceNetwork = None
) -> tuple[StorageClass, str]:
    """The storage class of ``mount`` and the reason, naming the evidence.

    ``wsl`` says this system is WSL (from the system probe), which makes any 9p mount a
    Windows-side share. ``device_network`` is the block-device probe's verdict on the
    disk under a block-backed filesystem: only it can tell an EBS or Persistent Disk
    volume from a local NVMe, since both look the same in the mount table.
    """
    fstype = mount.fstype
    full = mount.full_fstype
    source = mount.source or "(no source)"
    at = mount.mount_point

    if fstype in MEMORY_FILESYSTEMS:
        opts = _option_text(mount, ("size",))
        return "memory", f"{fstype} at {at}{opts}: {MEMORY_FILESYSTEMS[fstype]}"

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

    if fstype in NETWORK_FILESYSTEMS:
        opts = _option_text(mount, _REASON_OPTIONS.get(fstype, ()))
        return "network-fs", f"{full} mount of {source}{opts}: {NETWORK_FILESYSTEMS[fstype]}"

    if fstype in FUSE_FILESYSTEMS:
        subtype = fuse_subtype(mount)
        opts = _option_text(mount, _REASON_OPTIONS["fuse"])
        named = "" if subtype is None or mount.subtype else f" (subtype {subtype} from the source)"
        if subtype in NETWORK_FUSE_SUBTYPES:
            why = NETWORK_FUSE_SUBTYPES[subtype]
            return "network-fs", f"{full} mount of {source}{named}{opts}: {why}"
        if subtype in FUSE_SUBTYPES:
            why = FUSE_SUBTYPES[subtype]
        elif fstype == "fuseblk":
            why = "a FUSE driver over a block device (e.g. ntfs-3g)"
        else:
            why = "a FUSE filesystem; every read goes through a userspace daemon"
        return "fuse", f"{full} mount of {source}{named}{opts}: {why}"

    if fstype in OVERLAY_FILESYSTEMS:
        dirs = overlay_dirs(mount)
        if "upperdir" in dirs or "lowerdir" in dirs:
            layers = len([d for d in dirs.get("lowerdir", "").split(":") if d])
            upper = f"upperdir={dirs['upperdir']}, " if "upperdir" in dirs else ""
            evidence = f" ({upper}{layers} lower layer{'s' if layers != 1 else ''})"
        else:
            evidence = ""
        return "overlay", (
            f"{fstype} at {at}{evidence}: layered container storage; "
            "the bytes live on the filesystem under its layers"
        )

    if fstype in BLOCK_FILESYSTEMS:
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

    if fstype in PSEUDO_FILESYSTEMS:
        return "unknown", f"{fstype} at {at}: {PSEUDO_FILESYSTEMS[fstype]}, not storage"
    return "unknown", f"unrecognised filesystem type {full} (source {source}) at {at}"


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
