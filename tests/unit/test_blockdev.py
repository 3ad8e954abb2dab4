"""The block-device probe on fake sysfs trees shaped like real machines, and on this one.

Each tree is built the way the kernel lays sysfs out: device directories under
``/sys/devices``, and ``/sys/dev/block``, ``/sys/block``, ``slaves/``, ``device``
and ``/sys/class/bdi`` as *relative* symlinks into it, so the probe follows links
exactly as it must on a live system.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from loadscope.probes.blockdev import (
    DeviceReport,
    PhysicalDisk,
    bdi_settings,
    device_chain,
    disk_verdict,
    fuse_connection,
    fuse_connection_id,
    network_verdict,
    parse_scheduler,
)
from loadscope.probes.result import Unavailable
from loadscope.probes.sysfs import read_int

_QUEUE_DEFAULTS = {
    "rotational": "0",
    "read_ahead_kb": "128",
    "max_sectors_kb": "1280",
    "max_hw_sectors_kb": "2048",
    "scheduler": "[none] mq-deadline",
    "nr_requests": "1023",
}


class FakeSysfs:
    """Builds a sysfs tree under ``root``; every path argument is as it reads on a live system."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def dir(self, absolute: str) -> None:
        self.path(absolute).mkdir(parents=True, exist_ok=True)

    def file(self, absolute: str, text: str) -> None:
        p = self.path(absolute)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")  # sysfs attributes end in a newline

    def link(self, absolute: str, target: str) -> None:
        """A relative symlink at ``absolute`` to ``target``, like the kernel makes."""
        p = self.path(absolute)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(posixpath.relpath(target, posixpath.dirname(absolute)))

    def block(
        self,
        devpath: str,
        dev: str,
        *,
        size_sectors: int = 2_000_000,
        device: str | None = None,
        partition: int | None = None,
        queue: dict[str, str] | None = None,
    ) -> str:
        """A block device directory, with its /sys/dev/block link (and, for a disk, bdi)."""
        name = posixpath.basename(devpath)
        self.file(f"{devpath}/dev", dev)
        self.file(f"{devpath}/size", str(size_sectors))
        self.dir(f"{devpath}/holders")
        self.link(f"/sys/dev/block/{dev}", devpath)
        self.link(f"/sys/class/block/{name}", devpath)
        if partition is not None:
            self.file(f"{devpath}/partition", str(partition))
            self.file(f"{devpath}/start", "2048")
            return devpath
        self.dir(f"{devpath}/slaves")
        self.link(f"/sys/block/{name}", devpath)
        for key, value in {**_QUEUE_DEFAULTS, **(queue or {})}.items():
            self.file(f"{devpath}/queue/{key}", value)
        if device is not None:
            self.link(f"{devpath}/device", device)
        # Partitions have no bdi of their own: only whole devices do.
        read_ahead_kb = (queue or {}).get("read_ahead_kb", _QUEUE_DEFAULTS["read_ahead_kb"])
        self.file(f"/sys/devices/virtual/bdi/{dev}/read_ahead_kb", read_ahead_kb)
        self.file(f"/sys/devices/virtual/bdi/{dev}/max_ratio", "100")
        self.file(f"/sys/devices/virtual/bdi/{dev}/min_ratio", "0")
        self.link(f"/sys/class/bdi/{dev}", f"/sys/devices/virtual/bdi/{dev}")
        return devpath

    def nvme_controller(self, ctrl: str, model: str, transport: str = "pcie") -> None:
        self.file(f"{ctrl}/model", model)
        self.file(f"{ctrl}/serial", "S5GXNF0R123456")
        self.file(f"{ctrl}/firmware_rev", "1B2QGXA7")
        self.file(f"{ctrl}/transport", transport)

    def scsi_device(self, hctl_dir: str, vendor: str, model: str) -> None:
        # SCSI INQUIRY strings are space-padded (vendor to 8, model to 16 characters).
        self.file(f"{hctl_dir}/vendor", vendor.ljust(8))
        self.file(f"{hctl_dir}/model", model.ljust(16))
        self.file(f"{hctl_dir}/rev", "1.0")
        self.dir(f"{hctl_dir}/scsi_device/{posixpath.basename(hctl_dir)}")

    def scsi_disk(
        self, hctl_dir: str, vendor: str, model: str, name: str, dev: str, **block: Any
    ) -> str:
        """A SCSI device at ``hctl_dir`` and its disk ``name`` (``block``: :meth:`block`'s)."""
        self.scsi_device(hctl_dir, vendor, model)
        return self.block(f"{hctl_dir}/block/{name}", dev, device=hctl_dir, **block)

    def stack(self, devpath: str, dev: str, slaves: list[str]) -> None:
        """A dm or md device over ``slaves`` (device paths), with holders pointing back."""
        self.block(devpath, dev, device=None)
        name = posixpath.basename(devpath)
        for slave in slaves:
            self.link(f"{devpath}/slaves/{posixpath.basename(slave)}", slave)
            self.link(f"{slave}/holders/{name}", devpath)


@pytest.fixture
def fake(tmp_path: Path) -> FakeSysfs:
    return FakeSysfs(tmp_path)


def _nvme(
    fake: FakeSysfs, pci: str, model: str, *, ctrl: str = "nvme0", transport: str = "pcie"
) -> str:
    """An NVMe namespace ``<ctrl>n1`` (259:0) under controller ``ctrl`` at PCI path ``pci``."""
    controller = f"/sys/devices/pci0000:00/{pci}/nvme/{ctrl}"
    fake.nvme_controller(controller, model, transport)
    return fake.block(f"{controller}/{ctrl}n1", "259:0", device=controller)


def _sata(fake: FakeSysfs, port: int, letter: str, model: str, *, rotational: bool = False) -> str:
    hctl = f"/sys/devices/pci0000:00/0000:00:17.0/ata{port + 1}/host{port}/target{port}:0:0"
    hctl += f"/{port}:0:0:0"
    return fake.scsi_disk(
        hctl,
        "ATA",
        model,
        f"sd{letter}",
        f"8:{16 * port}",
        size_sectors=7_814_037_168,
        queue={"rotational": "1" if rotational else "0", "scheduler": "[mq-deadline] kyber none"},
    )


# --- the chain --------------------------------------------------------------------------------


def _verdict_says(report: DeviceReport, is_network: bool | None, *words: str) -> None:
    """``network_verdict(report)`` is ``is_network``, with each of ``words`` in its evidence."""
    got, evidence = network_verdict(report)
    assert got is is_network
    for said in words:
        assert said in evidence


def test_nvme_partition_on_local_samsung(fake: FakeSysfs) -> None:
    disk = _nvme(fake, "0000:00:1d.0/0000:3d:00.0", "Samsung SSD 980 PRO 1TB")
    fake.block(f"{disk}/nvme0n1p1", "259:1", partition=1, size_sectors=1_000_000)

    report = device_chain(259, 1, fake.root)

    assert (report.name, report.kind, report.maj_min) == ("nvme0n1p1", "partition", "259:1")
    assert report.whole_disk_maj_min == "259:0"
    assert report.sysfs_path == f"{disk}/nvme0n1p1"
    assert [(n.name, n.kind, n.lower) for n in report.chain] == [
        ("nvme0n1p1", "partition", ("nvme0n1",)),
        ("nvme0n1", "disk", ()),
    ]
    assert report.chain[0].size_bytes == 1_000_000 * 512
    (nvme,) = report.disks
    # Every field: the queue's as _QUEUE_DEFAULTS wrote them (those of _BASE but one).
    assert nvme == replace(
        _BASE,
        name="nvme0n1",
        maj_min="259:0",
        sysfs_path=disk,
        model="Samsung SSD 980 PRO 1TB",
        transport="nvme",
        nvme_transport="pcie",
        nr_requests=1023,
        size_bytes=2_000_000 * 512,
    )
    _verdict_says(report, False, "Samsung SSD 980 PRO 1TB", "local NVMe")


def test_ebs_nvme_partition_is_network(fake: FakeSysfs) -> None:
    disk = _nvme(fake, "0000:00:04.0", "Amazon Elastic Block Store")
    fake.block(f"{disk}/nvme0n1p1", "259:1", partition=1)

    report = device_chain(259, 1, fake.root)

    assert [d.name for d in report.disks] == ["nvme0n1"]
    assert report.disks[0].transport == "nvme"
    _verdict_says(report, True, "'Amazon Elastic Block Store'", "EBS")


def test_ec2_instance_store_is_local(fake: FakeSysfs) -> None:
    _nvme(fake, "0000:00:1f.0", "Amazon EC2 NVMe Instance Storage", ctrl="nvme1")
    # _nvme gives every namespace 259:0; this tree has only the one.
    report = device_chain(259, 0, fake.root)

    assert (report.kind, report.name) == ("disk", "nvme1n1")
    _verdict_says(report, False, "'Amazon EC2 NVMe Instance Storage'", "instance store")


def test_dm_crypt_over_nvme_partition(fake: FakeSysfs) -> None:
    disk = _nvme(fake, "0000:00:1d.0/0000:3d:00.0", "Samsung SSD 990 PRO 2TB")
    part = fake.block(f"{disk}/nvme0n1p3", "259:3", partition=3)
    fake.stack("/sys/devices/virtual/block/dm-0", "253:0", [part])
    fake.file("/sys/devices/virtual/block/dm-0/dm/name", "cryptroot")
    fake.file(
        "/sys/devices/virtual/block/dm-0/dm/uuid",
        "CRYPT-LUKS2-3b8f0c1e2d4a4f5b9c6d7e8f9a0b1c2d-cryptroot",
    )

    report = device_chain(253, 0, fake.root)

    assert report.kind == "dm"
    assert [(n.name, n.kind) for n in report.chain] == [
        ("dm-0", "dm"),
        ("nvme0n1p3", "partition"),
        ("nvme0n1", "disk"),
    ]
    dm = report.chain[0]
    assert dm.dm_name == "cryptroot"
    assert dm.dm_uuid is not None and dm.dm_uuid.startswith("CRYPT-LUKS2-")
    assert dm.lower == ("nvme0n1p3",)
    assert [d.model for d in report.disks] == ["Samsung SSD 990 PRO 2TB"]
    assert network_verdict(report)[0] is False


def test_lvm_over_md_raid0_over_two_sata_disks(fake: FakeSysfs) -> None:
    sda = _sata(fake, 0, "a", "Samsung SSD 870 EVO 4TB")
    sdb = _sata(fake, 1, "b", "ST4000DM004-2CV104", rotational=True)
    md0 = "/sys/devices/virtual/block/md0"
    fake.stack(md0, "9:0", [sda, sdb])
    fake.file(f"{md0}/md/level", "raid0")
    fake.file(f"{md0}/md/raid_disks", "2")
    fake.stack("/sys/devices/virtual/block/dm-1", "253:1", [md0])
    fake.file("/sys/devices/virtual/block/dm-1/dm/name", "vg0-models")
    fake.file("/sys/devices/virtual/block/dm-1/dm/uuid", "LVM-abcdef0123456789")

    report = device_chain(253, 1, fake.root)

    assert [(n.name, n.kind, n.lower) for n in report.chain] == [
        ("dm-1", "dm", ("md0",)),
        ("md0", "md", ("sda", "sdb")),
        ("sda", "disk", ()),
        ("sdb", "disk", ()),
    ]
    assert report.chain[0].dm_name == "vg0-models"
    assert report.chain[1].md_level == "raid0"
    by_name = {d.name: d for d in report.disks}
    assert set(by_name) == {"sda", "sdb"}
    assert by_name["sda"].rotational is False
    assert by_name["sdb"].rotational is True
    assert by_name["sdb"].model == "ST4000DM004-2CV104"
    assert by_name["sdb"].vendor == "ATA"
    assert {d.transport for d in report.disks} == {"scsi"}
    assert by_name["sda"].maj_min == "8:0"
    assert by_name["sdb"].maj_min == "8:16"
    _verdict_says(report, False, "sda:", "sdb:", "'ST4000DM004-2CV104'")


def test_loop_device_reports_its_backing_file(fake: FakeSysfs) -> None:
    loop = fake.block("/sys/devices/virtual/block/loop3", "7:3", size_sectors=152_000)
    fake.file(f"{loop}/loop/backing_file", "/var/lib/snapd/snaps/core22_1380.snap")
    fake.file(f"{loop}/loop/offset", "0")

    report = device_chain(7, 3, fake.root)

    assert report.kind == "loop"
    assert report.chain[0].backing_file == "/var/lib/snapd/snaps/core22_1380.snap"
    assert report.backing_files == ("/var/lib/snapd/snaps/core22_1380.snap",)
    assert report.disks == ()
    _verdict_says(report, None, "/var/lib/snapd/snaps/core22_1380.snap")


def test_unbound_loop(fake: FakeSysfs) -> None:
    fake.block("/sys/devices/virtual/block/loop0", "7:0", size_sectors=0)
    report = device_chain(7, 0, fake.root)
    assert report.kind == "loop"
    assert report.backing_files == ()
    assert network_verdict(report) == (None, "loop0: loop device with no backing file bound")


def test_virtio_partition_is_unknown(fake: FakeSysfs) -> None:
    virtio = "/sys/devices/pci0000:00/0000:00:05.0/virtio2"
    fake.file(f"{virtio}/vendor", "0x1af4")
    fake.file(f"{virtio}/device", "0x0002")
    vda = fake.block(f"{virtio}/block/vda", "252:0", device=virtio)
    fake.block(f"{vda}/vda1", "252:1", partition=1)

    report = device_chain(252, 1, fake.root)

    assert [n.name for n in report.chain] == ["vda1", "vda"]
    assert report.sysfs_path == "/sys/devices/pci0000:00/0000:00:05.0/virtio2/block/vda/vda1"
    (disk,) = report.disks
    assert disk.transport == "virtio"
    assert disk.model is None
    _verdict_says(report, None, "virtio", "cannot tell from inside the VM")


def test_rotational_sata_disk(fake: FakeSysfs) -> None:
    _sata(fake, 0, "a", "WDC WD40EFRX-68N32N0", rotational=True)

    report = device_chain(8, 0, fake.root)

    (disk,) = report.disks
    assert report.chain[0].kind == "disk"
    assert disk.rotational is True
    assert disk.transport == "scsi"
    assert disk.scheduler == "mq-deadline"
    assert disk.size_bytes == 7_814_037_168 * 512
    assert disk.sysfs_path.endswith("/ata1/host0/target0:0:0/0:0:0:0/block/sda")
    _verdict_says(report, False, "'WDC WD40EFRX-68N32N0'")


def test_gcp_persistent_disk_over_virtio_scsi(fake: FakeSysfs) -> None:
    hctl = "/sys/devices/pci0000:00/0000:00:03.0/virtio0/host0/target0:0:1/0:0:1:0"
    fake.scsi_disk(hctl, "Google", "PersistentDisk", "sda", "8:0")

    report = device_chain(8, 0, fake.root)

    (disk,) = report.disks
    assert (disk.vendor, disk.model) == ("Google", "PersistentDisk")
    # virtio-scsi carries SCSI disks: the disk is SCSI, the model tells what it is.
    assert disk.transport == "scsi"
    _verdict_says(report, True, "'PersistentDisk'")


_AZURE_VMBUS = "/sys/devices/LNXSYSTM:00/LNXSYBUS:00/PNP0A03:00/device:07/VMBUS:01"


def test_azure_managed_disk(fake: FakeSysfs) -> None:
    hctl = f"{_AZURE_VMBUS}/00000000-0000-8899-0000-000000000000/host0/target0:0:0/0:0:0:0"
    sda = fake.scsi_disk(hctl, "Msft", "Virtual Disk", "sda", "8:0")
    fake.block(f"{sda}/sda1", "8:1", partition=1)

    report = device_chain(8, 1, fake.root)

    (disk,) = report.disks
    assert (disk.vendor, disk.model) == ("Msft", "Virtual Disk")
    _verdict_says(report, True, "'Msft'", "'Virtual Disk'", "resource disk")


def test_azure_resource_disk_is_local(fake: FakeSysfs) -> None:
    hctl = f"{_AZURE_VMBUS}/00000000-0001-8899-0000-000000000000/host1/target1:0:1/1:0:1:0"
    fake.scsi_disk(hctl, "Msft", "Virtual Disk", "sdb", "8:16")

    _verdict_says(device_chain(8, 16, fake.root), False, "resource disk", "'Virtual Disk'")


def test_nbd_is_network_by_name(fake: FakeSysfs) -> None:
    fake.block("/sys/devices/virtual/block/nbd0", "43:0", queue={"scheduler": "none"})

    report = device_chain(43, 0, fake.root)

    (disk,) = report.disks
    assert (disk.name, disk.transport, disk.model, disk.scheduler) == (
        "nbd0",
        "unknown",
        None,
        "none",
    )
    _verdict_says(report, True, "nbd", "'nbd0'")


def test_iscsi_disk(fake: FakeSysfs) -> None:
    hctl = "/sys/devices/platform/host2/session1/target2:0:0/2:0:0:1"
    fake.scsi_disk(hctl, "LIO-ORG", "models01", "sdc", "8:32")

    report = device_chain(8, 32, fake.root)

    (disk,) = report.disks
    assert disk.transport == "iscsi"
    _verdict_says(report, True, "iSCSI", "'LIO-ORG'", "'models01'")


def test_nvme_over_fabrics(fake: FakeSysfs) -> None:
    ctrl = "/sys/devices/virtual/nvme-fabrics/ctl/nvme1"
    fake.nvme_controller(ctrl, "Linux", transport="tcp")
    fake.block(f"{ctrl}/nvme1n1", "259:4", device=ctrl)

    report = device_chain(259, 4, fake.root)

    assert report.disks[0].nvme_transport == "tcp"
    _verdict_says(report, True, "NVMe over Fabrics", "'tcp'")


def test_nvme_multipath_reads_the_controller_under_the_subsystem(fake: FakeSysfs) -> None:
    subsys = "/sys/devices/virtual/nvme-subsystem/nvme-subsys0"
    ctrl = "/sys/devices/pci0000:00/0000:00:04.0/nvme/nvme0"
    fake.file(f"{ctrl}/transport", "pcie")
    fake.file(f"{subsys}/model", "Amazon Elastic Block Store")
    fake.link(f"{subsys}/nvme0", ctrl)
    fake.block(f"{subsys}/nvme0n1", "259:0", device=subsys)

    (disk,) = device_chain(259, 0, fake.root).disks

    assert (disk.transport, disk.nvme_transport) == ("nvme", "pcie")
    assert disk_verdict(disk)[0] is True


def test_one_network_leg_makes_the_raid_network_bound(fake: FakeSysfs) -> None:
    local = _sata(fake, 0, "a", "Samsung SSD 870 EVO 4TB")
    fake.block("/sys/devices/virtual/block/nbd0", "43:0")
    fake.stack("/sys/devices/virtual/block/md1", "9:1", [local, "/sys/devices/virtual/block/nbd0"])
    fake.file("/sys/devices/virtual/block/md1/md/level", "raid1")

    is_network, evidence = network_verdict(device_chain(9, 1, fake.root))

    assert is_network is True
    assert evidence.startswith("nbd0:")
    assert "sda" not in evidence


def test_shared_member_is_walked_once(fake: FakeSysfs) -> None:
    sda = _sata(fake, 0, "a", "Samsung SSD 870 EVO 4TB")
    part1 = fake.block(f"{sda}/sda1", "8:1", partition=1)
    part2 = fake.block(f"{sda}/sda2", "8:2", partition=2)
    fake.stack("/sys/devices/virtual/block/md0", "9:0", [part1, part2])

    report = device_chain(9, 0, fake.root)

    assert [n.name for n in report.chain] == ["md0", "sda1", "sda", "sda2"]
    assert [d.name for d in report.disks] == ["sda"]


# --- missing pieces ---------------------------------------------------------------------------


def test_missing_dev_block_entry_is_unavailable(fake: FakeSysfs) -> None:
    with pytest.raises(Unavailable, match=r"no sysfs entry for block device 8:0 \("):
        device_chain(8, 0, fake.root)


def test_missing_attributes_are_none(fake: FakeSysfs) -> None:
    bare = "/sys/devices/virtual/block/sdz"
    fake.file(f"{bare}/dev", "65:144")
    fake.link("/sys/dev/block/65:144", bare)

    report = device_chain(65, 144, fake.root)

    (disk,) = report.disks
    # Every attribute sysfs does not hold is None; only the identity is known.
    known = {k: v for k, v in asdict(disk).items() if v is not None}
    assert known == {"name": "sdz", "maj_min": "65:144", "sysfs_path": bare, "transport": "unknown"}
    assert set(asdict(disk)) > set(known) | {"model", "rotational", "size_bytes"}
    _verdict_says(report, None, "no known model string")


def test_absolute_symlink_stays_inside_the_fake_root(fake: FakeSysfs) -> None:
    # A careless fixture (or a bind-mounted copy) may hold absolute links: they must
    # resolve inside sysfs_root, not on this host.
    fake.file("/sys/devices/virtual/block/nbd5/dev", "43:160")
    link = fake.path("/sys/dev/block/43:160")
    link.parent.mkdir(parents=True)
    link.symlink_to("/sys/devices/virtual/block/nbd5")

    report = device_chain(43, 160, fake.root)

    assert report.sysfs_path == "/sys/devices/virtual/block/nbd5"
    assert report.disks[0].maj_min == "43:160"


def test_symlink_loop_is_unavailable_not_a_hang(fake: FakeSysfs) -> None:
    fake.link("/sys/dev/block/8:0", "/sys/dev/block/8:0")
    with pytest.raises(Unavailable, match="8:0"):
        device_chain(8, 0, fake.root)


# --- verdicts by model string -----------------------------------------------------------------


_BASE = PhysicalDisk(
    name="sda",
    maj_min="8:0",
    sysfs_path="/sys/devices/pci0000:00/0000:00:03.0/virtio0/host0/target0:0:1/0:0:1:0/block/sda",
    model=None,
    vendor=None,
    transport="scsi",
    nvme_transport=None,
    rotational=False,
    read_ahead_kb=128,
    max_sectors_kb=1280,
    max_hw_sectors_kb=2048,
    scheduler="none",
    nr_requests=256,
    size_bytes=1 << 40,
)


@pytest.mark.parametrize(
    ("changes", "expected", "quoted"),
    [
        ({"name": "nvme0n1", "transport": "nvme", "model": "nvme_card-pd"}, True, "nvme_card-pd"),
        ({"name": "nvme1n1", "transport": "nvme", "model": "nvme_card0"}, False, "nvme_card0"),
        ({"name": "nvme1n1", "transport": "nvme", "model": "nvme_card"}, False, "nvme_card"),
        ({"vendor": "Google", "model": "EphemeralDisk"}, False, "EphemeralDisk"),
        (
            {"transport": "nvme", "model": "Alibaba Cloud Elastic Block Storage"},
            True,
            "Alibaba Cloud Elastic Block Storage",
        ),
        (
            {"transport": "nvme", "model": "MSFT NVMe Accelerator v1.0"},
            True,
            "MSFT NVMe Accelerator v1.0",
        ),
        (
            {"transport": "nvme", "model": "Microsoft NVMe Direct Disk v2"},
            False,
            "Microsoft NVMe Direct Disk v2",
        ),
        ({"vendor": "ORACLE", "model": "BlockVolume"}, True, "BlockVolume"),
        ({"vendor": "ATA", "model": "QEMU HARDDISK"}, None, "QEMU HARDDISK"),
        ({"vendor": "QEMU", "model": "QEMU HARDDISK"}, None, "QEMU HARDDISK"),
        ({"vendor": "VMware", "model": "Virtual disk"}, None, "VMware"),
        ({"name": "rbd0", "transport": "unknown"}, True, "rbd0"),
        ({"name": "zram0", "transport": "unknown"}, False, "zram0"),
        ({"name": "xvda", "transport": "xen"}, None, "Xen"),
        ({"vendor": "HITACHI", "model": "OPEN-V", "transport": "fc"}, True, "OPEN-V"),
        ({"name": "mmcblk0", "transport": "mmc", "model": "SD64G"}, False, "SD64G"),
    ],
)
def test_disk_verdict_table(changes: dict[str, str], expected: bool | None, quoted: str) -> None:
    disk = replace(_BASE, **changes)
    is_network, evidence = disk_verdict(disk)
    assert is_network is expected, evidence
    assert quoted in evidence


def test_qemu_disk_evidence_names_qemu() -> None:
    disk = replace(_BASE, vendor="ATA", model="QEMU HARDDISK")
    assert "QEMU" in disk_verdict(disk)[1]
    assert "cannot tell from inside the VM" in disk_verdict(disk)[1]


def test_verdict_without_disks_or_files() -> None:
    report = DeviceReport(
        maj_min="253:3",
        name="dm-3",
        kind="dm",
        sysfs_path="/sys/devices/virtual/block/dm-3",
        whole_disk_maj_min="253:3",
        chain=(),
        disks=(),
        backing_files=(),
    )
    assert network_verdict(report) == (None, "dm-3: no physical disk found below it in sysfs")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[mq-deadline] kyber none", "mq-deadline"),
        ("none [mq-deadline] kyber bfq", "mq-deadline"),
        ("[none] mq-deadline", "none"),
        ("none", "none"),
        ("", None),
        (None, None),
        ("noop deadline", None),
    ],
)
def test_parse_scheduler(text: str | None, expected: str | None) -> None:
    assert parse_scheduler(text) == expected


# --- bdi and FUSE -----------------------------------------------------------------------------


def test_bdi_of_a_partition_is_its_disks(fake: FakeSysfs) -> None:
    disk = _nvme(fake, "0000:00:04.0", "Amazon Elastic Block Store")
    fake.block(f"{disk}/nvme0n1p1", "259:1", partition=1)
    fake.file("/sys/devices/virtual/bdi/259:0/read_ahead_kb", "4096")

    bdi = bdi_settings(259, 1, fake.root)

    assert (bdi.maj_min, bdi.bdi_name, bdi.path) == ("259:1", "259:0", "/sys/class/bdi/259:0")
    assert (bdi.read_ahead_kb, bdi.max_ratio, bdi.min_ratio) == (4096, 100, 0)


def test_bdi_of_a_fuse_mount(fake: FakeSysfs) -> None:
    # FUSE and NFS mounts are anonymous devices: a bdi, but no /sys/dev/block entry.
    fake.file("/sys/devices/virtual/bdi/0:52/read_ahead_kb", "128")
    fake.file("/sys/devices/virtual/bdi/0:52/max_ratio", "1")
    fake.file("/sys/devices/virtual/bdi/0:52/min_ratio", "0")
    fake.link("/sys/class/bdi/0:52", "/sys/devices/virtual/bdi/0:52")

    bdi = bdi_settings(0, 52, fake.root)

    assert (bdi.bdi_name, bdi.read_ahead_kb, bdi.max_ratio, bdi.min_ratio) == ("0:52", 128, 1, 0)


def test_bdi_with_missing_files_has_none_fields(fake: FakeSysfs) -> None:
    fake.dir("/sys/class/bdi/0:60")
    bdi = bdi_settings(0, 60, fake.root)
    assert (bdi.read_ahead_kb, bdi.max_ratio, bdi.min_ratio) == (None, None, None)


def test_no_bdi_is_unavailable(fake: FakeSysfs) -> None:
    with pytest.raises(Unavailable, match="0:99"):
        bdi_settings(0, 99, fake.root)


def test_fuse_connection(fake: FakeSysfs) -> None:
    conn = "/sys/fs/fuse/connections/52"
    fake.file(f"{conn}/waiting", "3")
    fake.file(f"{conn}/max_background", "12")
    fake.file(f"{conn}/congestion_threshold", "9")
    fake.file(f"{conn}/abort", "")

    info = fuse_connection(fuse_connection_id(0, 52), fake.root)

    assert info is not None
    assert (info.conn_id, info.path) == (52, conn)
    assert (info.waiting, info.max_background, info.congestion_threshold) == (3, 12, 9)


def test_fuse_connection_absent(fake: FakeSysfs) -> None:
    assert fuse_connection(52, fake.root) is None
    fake.dir("/sys/fs/fuse/connections/53")
    info = fuse_connection(53, fake.root)
    assert info is not None
    assert (info.waiting, info.max_background, info.congestion_threshold) == (None, None, None)


def test_fuse_connection_id_is_the_kernel_dev_t() -> None:
    assert fuse_connection_id(0, 52) == 52
    assert fuse_connection_id(1, 2) == (1 << 20) | 2


# --- this machine -----------------------------------------------------------------------------


def test_live_root_device() -> None:
    st_dev = os.stat("/").st_dev
    major, minor = os.major(st_dev), os.minor(st_dev)
    if not Path(f"/sys/dev/block/{major}:{minor}").exists():
        pytest.skip(f"/ is on {major}:{minor}, which has no /sys/dev/block entry (not a block fs)")

    report = device_chain(major, minor)

    if not any(d.transport == "virtio" for d in report.disks):
        found = [(d.name, d.transport) for d in report.disks]
        pytest.skip(f"/ is not on a virtio disk here (disks {found}); this check is for a VM")
    assert report.disks
    assert network_verdict(report)[0] is None
    bdi = bdi_settings(major, minor)
    assert bdi.bdi_name == report.whole_disk_maj_min
    expected = read_int(f"/sys/class/bdi/{report.whole_disk_maj_min}/read_ahead_kb")
    assert isinstance(bdi.read_ahead_kb, int)
    assert bdi.read_ahead_kb == expected
