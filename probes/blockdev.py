"""The sysfs chain from a mount's block device down to the real disks, and what those disks are.

A filesystem's ``st_dev`` names one block device; the bytes may live several
layers below it (a partition of a disk, dm-crypt over a partition, LVM over md
raid over two disks, a loop device over a file). ``device_chain`` walks
``/sys/dev/block/MAJ:MIN`` down through partitions' parent disks, ``slaves/``
and loop backing files and reports every layer and every leaf disk with the
queue settings that shape its reads.

Cloud volumes masquerade as local disks: an EBS volume is an "NVMe" disk with a
millisecond per request. ``network_verdict`` decides from the model and vendor
strings the clouds put on their disks, and quotes the string that decided it;
where nothing inside the guest can tell (virtio, QEMU, Xen disks) it says
unknown rather than guess.

``bdi_settings`` and ``fuse_connection`` read the knobs measured to matter most
on slow storage: the mount's readahead (``/sys/class/bdi/MAJ:MIN/read_ahead_kb``
128 -> 8192 took a FUSE mmap load from 15.3 s to 1.25 s) and FUSE's
``max_background``.

Every function takes ``sysfs_root`` (``/`` on a live system) so tests can point it
at a fake tree; symlinks are followed inside that root. A missing attribute file
gives a None field, never an exception.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from loadscope.probes.result import Unavailable
from loadscope.probes.sysfs import read_int, read_text, under

BlockKind = Literal["partition", "disk", "dm", "md", "loop", "other"]
#: How a leaf disk is attached, as far as its sysfs path tells.
Transport = Literal["nvme", "virtio", "xen", "iscsi", "fc", "usb", "mmc", "scsi", "unknown"]

#: The kernel's internal dev_t keeps 20 bits for the minor (MINORBITS).
_MINOR_BITS = 20
#: Linux's own limit on symlinks followed while resolving one path.
_MAX_SYMLINKS = 40
#: Deeper stacks than this do not occur; the bound keeps a malformed tree finite.
_MAX_DEPTH = 16
_SECTOR_BYTES = 512  # sysfs "size" is always in 512-byte sectors, whatever the device's own
#: Block devices that hold their bytes in RAM.
_MEMORY_DEVICE = re.compile(r"^(zram|ram|nullb|brd)\d+$")
_LOOP_NAME = re.compile(r"^loop\d+$")
_CONTROLLER_NAME = re.compile(r"^nvme\d+$")
#: NVMe controller transports that cross a network (NVMe over Fabrics).
_FABRIC_TRANSPORTS = frozenset({"tcp", "rdma", "fc"})
#: Azure's Gen1 VMBus channel of the temporary resource disk (waagent's udev rules).
_AZURE_RESOURCE_CHANNEL = "/00000000-0001-"
#: The clouds' own model names: searched for in the lower-cased model in this order (it
#: matters where one is a prefix of another), whether the disk is network storage, and
#: what it is.
_CLOUD_MODELS: tuple[tuple[re.Pattern[str], bool, str], ...] = tuple(
    (re.compile(pattern), is_network, what)
    for pattern, is_network, what in (
        ("amazon elastic block store", True, "AWS EBS volume"),
        ("amazon ec2 nvme instance storage", False, "AWS EC2 instance store, a local NVMe SSD"),
        ("nvme_card-pd", True, "GCP Persistent Disk / Hyperdisk over NVMe"),
        ("^nvme_card", False, "GCP Local SSD over NVMe"),
        ("persistentdisk", True, "GCP Persistent Disk"),
        ("ephemeraldisk", False, "GCP Local SSD (SCSI)"),
        ("msft nvme accelerator", True, "Azure remote disk on the NVMe controller"),
        ("microsoft nvme direct disk", False, "Azure local NVMe disk"),
    )
)

_VIRTIO_UNKNOWN = (
    "virtio virtual disk: a hypervisor-provided disk that may be backed by a local image "
    "or by network storage; cannot tell from inside the VM"
)


@dataclass(frozen=True, slots=True)
class BlockNode:
    """One layer of the chain: the mounted device, or a device somewhere below it."""

    name: str  # kernel name: "nvme0n1p1", "dm-0", "md127", "loop3"
    kind: BlockKind
    maj_min: str | None  # from its ``dev`` file
    sysfs_path: str  # the resolved directory, as it reads on a live system
    #: Names of the devices directly below: a partition's disk, a dm/md device's slaves.
    lower: tuple[str, ...]
    size_bytes: int | None = None
    dm_name: str | None = None  # dm/name: "cryptroot", "vg0-models"
    #: dm/uuid, whose prefix names the target: "CRYPT-LUKS2-...", "LVM-...", "mpath-...".
    dm_uuid: str | None = None
    md_level: str | None = None  # md/level: "raid0", "raid1", ...
    backing_file: str | None = None  # loop/backing_file, as the kernel reports it


@dataclass(frozen=True, slots=True)
class PhysicalDisk:
    """A leaf of the chain: a whole device with nothing below it (as far as sysfs shows)."""

    name: str
    maj_min: str | None
    sysfs_path: str
    model: str | None  # device/model, whitespace-collapsed ("Amazon Elastic Block Store")
    vendor: str | None  # device/vendor ("ATA", "Msft", "Google"); absent on NVMe
    transport: Transport
    #: The NVMe controller's transport: "pcie", or "tcp"/"rdma"/"fc" for NVMe over Fabrics.
    nvme_transport: str | None
    rotational: bool | None
    read_ahead_kb: int | None
    max_sectors_kb: int | None  # the largest request the kernel sends (tunable)
    max_hw_sectors_kb: int | None  # the device's ceiling for max_sectors_kb
    scheduler: str | None  # the active I/O scheduler ("none", "mq-deadline")
    nr_requests: int | None
    size_bytes: int | None


@dataclass(frozen=True, slots=True)
class DeviceReport:
    """The block device a filesystem sits on, every layer under it, and the disks at the bottom."""

    maj_min: str  # the device asked about
    name: str
    kind: BlockKind
    sysfs_path: str
    #: For a partition, its whole disk's maj:min (whose queue and bdi it uses); else its own.
    whole_disk_maj_min: str | None
    #: The asked device first, then each layer below, depth first.
    chain: tuple[BlockNode, ...]
    disks: tuple[PhysicalDisk, ...]
    #: Files under loop devices in the chain: their storage is wherever the file lives.
    backing_files: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BdiSettings:
    """A mount's backing-dev-info: the readahead the page cache uses for every file on it."""

    maj_min: str  # the device asked about
    bdi_name: str  # the bdi read: the whole disk's for a partition
    path: str  # the directory read, as on a live system
    read_ahead_kb: int | None
    max_ratio: int | None  # percent of the dirty-page limit this bdi may use
    min_ratio: int | None


@dataclass(frozen=True, slots=True)
class FuseConnection:
    """One FUSE mount's connection in fusectl: how many requests wait and may run at once."""

    conn_id: int
    path: str
    waiting: int | None  # requests queued or in flight right now
    max_background: int | None  # background (readahead, async) requests allowed in flight
    congestion_threshold: int | None  # in-flight background requests that mark it congested


def device_chain(major: int, minor: int, sysfs_root: Path = Path("/")) -> DeviceReport:
    """Walk ``/sys/dev/block/MAJ:MIN`` down to its disks; raises ``Unavailable`` if it is absent."""
    root = Path(os.path.realpath(sysfs_root))
    maj_min = f"{major}:{minor}"
    top = _device_dir(root, maj_min)
    nodes: list[BlockNode] = []
    disks: list[PhysicalDisk] = []
    _walk(root, top, nodes=nodes, disks=disks, seen=set(), depth=0)
    first = nodes[0]
    whole = first.maj_min
    if first.kind == "partition":
        whole = _attr(top.parent / "dev")
    backing = tuple(n.backing_file for n in nodes if n.backing_file is not None)
    return DeviceReport(
        maj_min=maj_min,
        name=first.name,
        kind=first.kind,
        sysfs_path=first.sysfs_path,
        whole_disk_maj_min=whole,
        chain=tuple(nodes),
        disks=tuple(disks),
        backing_files=backing,
    )


def network_verdict(report: DeviceReport) -> tuple[bool | None, str]:
    """Whether the storage under ``report`` is a network volume: True, False or None (unknown).

    One network disk anywhere below makes the whole device network-bound (a raid
    leg or a multipath path waits on the slowest member). The evidence names each
    disk and quotes the model/vendor string or device name that decided it.
    """
    if not report.disks:
        if report.backing_files:
            files = ", ".join(repr(f) for f in report.backing_files)
            return None, (
                f"{report.name}: loop device over file {files}; the storage is whatever "
                "holds that file (look up the mount it lives on)"
            )
        if report.kind == "loop":
            return None, f"{report.name}: loop device with no backing file bound"
        return None, f"{report.name}: no physical disk found below it in sysfs"
    verdicts = [(disk.name, *disk_verdict(disk)) for disk in report.disks]
    network = [f"{name}: {why}" for name, is_net, why in verdicts if is_net is True]
    if network:
        return True, "; ".join(network)
    evidence = "; ".join(f"{name}: {why}" for name, _, why in verdicts)
    if report.backing_files:
        files = ", ".join(repr(f) for f in report.backing_files)
        evidence += f"; also loop-backed by {files} (check the mount that file lives on)"
    if all(is_net is False for _, is_net, _ in verdicts) and not report.backing_files:
        return False, evidence
    return None, evidence


def disk_verdict(disk: PhysicalDisk) -> tuple[bool | None, str]:
    """One disk's verdict and why; ``network_verdict`` combines these over a chain."""
    model = disk.model or ""
    vendor = disk.vendor or ""
    low_model, low_vendor = model.lower(), vendor.lower()
    quoted = _quote(disk)
    # Device names first: these drivers exist only to reach storage over a network.
    if disk.name.startswith("nbd"):
        return True, f"network block device (nbd): device name {disk.name!r}"
    if disk.name.startswith("rbd"):
        return True, f"Ceph RADOS block device (rbd): device name {disk.name!r}"
    if _MEMORY_DEVICE.match(disk.name):
        return False, f"memory-backed block device: device name {disk.name!r}"
    if disk.nvme_transport in _FABRIC_TRANSPORTS:
        return True, f"NVMe over Fabrics (controller transport {disk.nvme_transport!r}){quoted}"
    for pattern, is_network, what in _CLOUD_MODELS:
        if pattern.search(low_model):
            return is_network, f"{what}{quoted}"
    if low_vendor == "msft" and "virtual disk" in low_model:
        if _AZURE_RESOURCE_CHANNEL in disk.sysfs_path:
            return False, (
                f"Azure temporary resource disk, local to the host{quoted}, "
                "on VMBus channel 00000000-0001-*"
            )
        return True, (
            f"Azure managed disk{quoted}; the temporary resource disk shares that name "
            "(and so does any Hyper-V virtual disk outside Azure)"
        )
    if "alibaba cloud elastic block storage" in low_model:
        return True, f"Alibaba Cloud ESSD/cloud disk{quoted}"
    if low_vendor == "oracle" and "blockvolume" in low_model:
        return True, f"Oracle Cloud block volume{quoted}"
    if disk.transport == "iscsi":
        return True, f"iSCSI LUN{quoted}"
    if disk.transport == "fc":
        return True, f"Fibre Channel SAN LUN{quoted}"
    # Hypervisor disks: the host decides where the bytes live, and the guest cannot see it.
    if "qemu" in low_model or "qemu" in low_vendor:
        return None, (
            f"QEMU emulated disk{quoted}: may be backed by a local image or by network "
            "storage; cannot tell from inside the VM"
        )
    if "vmware" in low_vendor or "vbox" in low_model:
        return None, (
            f"hypervisor virtual disk{quoted}: may be backed by a local image or by "
            "network storage; cannot tell from inside the VM"
        )
    if disk.transport == "virtio":
        return None, _VIRTIO_UNKNOWN + (f"; model {model!r}" if model else "")
    if disk.transport == "xen":
        return None, (
            "Xen virtual block device: on AWS Xen instances an EBS volume or instance "
            "store alike; cannot tell from inside the VM"
        )
    if model and disk.transport != "unknown":
        return False, f"local {_TRANSPORT_WORDS[disk.transport]} disk{quoted}"
    return None, f"no known model string{quoted} and transport {disk.transport!r}"


def bdi_settings(major: int, minor: int, sysfs_root: Path = Path("/")) -> BdiSettings:
    """The backing-dev-info of the filesystem on ``MAJ:MIN``; ``Unavailable`` if none exists.

    Every mount has one, FUSE and NFS too (their anonymous devices are "0:NN").
    A partition has none of its own: its disk's is used.
    """
    root = Path(os.path.realpath(sysfs_root))
    asked = f"{major}:{minor}"
    name = asked
    bdi = under(root, f"/sys/class/bdi/{name}")
    if not bdi.is_dir():
        disk = _partition_disk_maj_min(root, asked)
        if disk is not None:
            name = disk
            bdi = under(root, f"/sys/class/bdi/{name}")
    if not bdi.is_dir():
        raise Unavailable(f"no backing-dev-info for {asked} (no /sys/class/bdi/{asked})")
    return BdiSettings(
        maj_min=asked,
        bdi_name=name,
        path=f"/sys/class/bdi/{name}",
        read_ahead_kb=read_int(bdi / "read_ahead_kb"),
        max_ratio=read_int(bdi / "max_ratio"),
        min_ratio=read_int(bdi / "min_ratio"),
    )


def fuse_connection_id(major: int, minor: int) -> int:
    """The fusectl directory name of a FUSE mount with ``st_dev`` MAJ:MIN: the kernel's dev_t.

    FUSE mounts are anonymous devices (major 0), so in practice this is the minor.
    """
    return (major << _MINOR_BITS) | minor


def fuse_connection(conn_id: int, sysfs_root: Path = Path("/")) -> FuseConnection | None:
    """``/sys/fs/fuse/connections/<conn_id>``, or None without fusectl or that connection."""
    absolute = f"/sys/fs/fuse/connections/{conn_id}"
    conn = under(Path(os.path.realpath(sysfs_root)), absolute)
    if not conn.is_dir():
        return None
    return FuseConnection(
        conn_id=conn_id,
        path=absolute,
        waiting=read_int(conn / "waiting"),
        max_background=read_int(conn / "max_background"),
        congestion_threshold=read_int(conn / "congestion_threshold"),
    )


def parse_scheduler(text: str | None) -> str | None:
    """The active entry of ``queue/scheduler``: "[mq-deadline] kyber none" -> "mq-deadline"."""
    if not text:
        return None
    match = re.search(r"\[([^\]]+)\]", text)
    if match:
        return match.group(1)
    # Devices without an elevator list only "none", unbracketed.
    words = text.split()
    return words[0] if len(words) == 1 else None


_TRANSPORT_WORDS: dict[str, str] = {
    "nvme": "NVMe",
    "scsi": "SATA/SAS/SCSI",
    "usb": "USB",
    "mmc": "MMC/SD",
}


def _quote(disk: PhysicalDisk) -> str:
    parts = []
    if disk.vendor:
        parts.append(f"vendor {disk.vendor!r}")
    if disk.model:
        parts.append(f"model {disk.model!r}")
    return f" ({', '.join(parts)})" if parts else ""


def _device_dir(root: Path, maj_min: str) -> Path:
    absolute = f"/sys/dev/block/{maj_min}"
    resolved = _resolve(root, under(root, absolute))
    if resolved is None or not resolved.is_dir():
        raise Unavailable(f"no sysfs entry for block device {maj_min} ({absolute} does not exist)")
    return resolved


def _partition_disk_maj_min(root: Path, maj_min: str) -> str | None:
    """The whole disk's maj:min when ``maj_min`` is a partition, else None."""
    resolved = _resolve(root, under(root, f"/sys/dev/block/{maj_min}"))
    if resolved is None or not (resolved / "partition").is_file():
        return None
    return _attr(resolved.parent / "dev")


def _resolve(root: Path, path: Path) -> Path | None:
    """``path`` (under ``root``) with every symlink followed, without ever leaving ``root``.

    Real sysfs links are relative (``../../devices/...``), so ``realpath`` would do
    on a live system; resolving component by component also keeps an absolute link,
    or one ``..`` too many, inside a fake tree instead of on this host. None on a loop.
    """
    pending = list(reversed(path.relative_to(root).parts))
    done: list[str] = []
    links = 0
    while pending:
        part = pending.pop()
        if part in ("", ".", "/"):
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = root.joinpath(*done, part)
        if here.is_symlink():
            links += 1
            if links > _MAX_SYMLINKS:
                return None
            try:
                target = os.readlink(here)
            except OSError:
                return None
            if os.path.isabs(target):
                done = []
            pending.extend(reversed(Path(target).parts))
            continue
        done.append(part)
    return root.joinpath(*done)


def _live(root: Path, path: Path) -> str:
    """``path`` as it reads on a live system (``/sys/...``)."""
    return "/" + path.relative_to(root).as_posix()


def _kind(d: Path, has_lower: bool) -> BlockKind:
    if (d / "partition").is_file():
        return "partition"
    if (d / "dm").is_dir():
        return "dm"
    if (d / "md").is_dir():
        return "md"
    if (d / "loop").is_dir() or _LOOP_NAME.match(d.name):
        return "loop"
    # A stacking device of another kind (bcache, ...) or a RAM disk is not a disk.
    if has_lower or _MEMORY_DEVICE.match(d.name):
        return "other"
    return "disk"


def _slaves(root: Path, d: Path) -> list[Path]:
    slaves_dir = d / "slaves"
    try:
        names = sorted(entry.name for entry in os.scandir(slaves_dir))
    except OSError:
        return []
    resolved = (_resolve(root, slaves_dir / name) for name in names)
    return [p for p in resolved if p is not None and p.is_dir()]


def _walk(
    root: Path,
    d: Path,
    *,
    nodes: list[BlockNode],
    disks: list[PhysicalDisk],
    seen: set[Path],
    depth: int,
) -> None:
    """Append ``d`` and everything below it, depth first, to ``nodes``; its leaves to ``disks``.

    ``seen`` matters for a dm multipath or raid1 whose members share a disk, and keeps a
    malformed tree from looping.
    """
    if d in seen or depth > _MAX_DEPTH:
        return
    seen.add(d)
    is_partition = (d / "partition").is_file()
    lower = [d.parent] if is_partition else _slaves(root, d)
    kind = _kind(d, bool(lower))
    nodes.append(
        BlockNode(
            name=d.name,
            kind=kind,
            maj_min=_attr(d / "dev"),
            sysfs_path=_live(root, d),
            lower=tuple(p.name for p in lower),
            size_bytes=_size_bytes(d),
            dm_name=_attr(d / "dm" / "name") if kind == "dm" else None,
            dm_uuid=_attr(d / "dm" / "uuid") if kind == "dm" else None,
            md_level=_attr(d / "md" / "level") if kind == "md" else None,
            backing_file=_attr(d / "loop" / "backing_file") if kind == "loop" else None,
        )
    )
    if not lower and kind != "loop":
        disks.append(_physical_disk(root, d))
    for below in lower:
        _walk(root, below, nodes=nodes, disks=disks, seen=seen, depth=depth + 1)


def _attr(path: Path) -> str | None:
    """An attribute's text; an empty one (an unbound loop's backing_file) is no attribute."""
    return read_text(path) or None


def _size_bytes(d: Path) -> int | None:
    sectors = read_int(d / "size")
    return None if sectors is None else sectors * _SECTOR_BYTES


def _clean(text: str | None) -> str | None:
    """SCSI pads model and vendor with spaces; an empty attribute is no attribute."""
    if text is None:
        return None
    return " ".join(text.split()) or None


def _physical_disk(root: Path, d: Path) -> PhysicalDisk:
    device = _resolve(root, d / "device") if (d / "device").exists() else None
    model = vendor = None
    if device is not None:
        model = _clean(read_text(device / "model"))
        vendor = _clean(read_text(device / "vendor"))
    queue = d / "queue"
    rotational = read_int(queue / "rotational")
    transport = _transport(root, d, device)
    return PhysicalDisk(
        name=d.name,
        maj_min=_attr(d / "dev"),
        sysfs_path=_live(root, d),
        model=model,
        vendor=vendor,
        transport=transport,
        nvme_transport=_nvme_transport(root, device) if transport == "nvme" else None,
        rotational=None if rotational is None else rotational != 0,
        read_ahead_kb=read_int(queue / "read_ahead_kb"),
        max_sectors_kb=read_int(queue / "max_sectors_kb"),
        max_hw_sectors_kb=read_int(queue / "max_hw_sectors_kb"),
        scheduler=parse_scheduler(read_text(queue / "scheduler")),
        nr_requests=read_int(queue / "nr_requests"),
        size_bytes=_size_bytes(d),
    )


def _transport(root: Path, d: Path, device: Path | None) -> Transport:
    path = _live(root, d)
    if device is not None:
        path += " " + _live(root, device)
    name = d.name
    if name.startswith("nvme") or "/nvme/" in path or "/nvme-subsystem/" in path:
        return "nvme"
    # iSCSI, FC and USB disks are SCSI disks too: the path tells which wire they are on.
    if "/session" in path:
        return "iscsi"
    if "/rport-" in path:
        return "fc"
    if "/usb" in path:
        return "usb"
    if name.startswith("mmcblk") or "/mmc" in path:
        return "mmc"
    if name.startswith("xvd") or "/vbd-" in path:
        return "xen"
    # Checked before "virtio" so a virtio-scsi disk (GCP PD, QEMU) counts as the SCSI disk
    # it presents; only virtio-blk (vda) is "virtio".
    if device is not None and (device / "scsi_device").is_dir():
        return "scsi"
    if "virtio" in path:
        return "virtio"
    if "/host" in path and "/target" in path:
        return "scsi"
    return "unknown"


def _nvme_transport(root: Path, device: Path | None) -> str | None:
    """The controller's ``transport``; under native multipath ``device`` is the subsystem."""
    if device is None:
        return None
    direct = _attr(device / "transport")
    if direct:
        return direct
    try:
        names = sorted(e.name for e in os.scandir(device) if _CONTROLLER_NAME.match(e.name))
    except OSError:
        return None
    for name in names:
        controller = _resolve(root, device / name)
        text = _attr(controller / "transport") if controller is not None else None
        if text:
            return text
    return None
