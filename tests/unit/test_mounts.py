r"""The mount probe on real-world mountinfo lines, and cross-checked against findmnt.

Each sample is a line as the kernel prints it on that kind of system (cloud VMs, HPC
clusters, containers, WSL, Colab), including its escapes (``\040`` for a space). The
live tests compare our lookup with util-linux ``findmnt`` on this machine, the way
psutil checks its probes against independent system tools.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from loadscope.probes.blockdev import fuse_connection_id
from loadscope.probes.mounts import (
    BLOCK_FILESYSTEMS,
    DeviceNetwork,
    MalformedMountLine,
    Mount,
    block_device_of,
    classify,
    describe_mount,
    fuse_subtype,
    interesting_options,
    mount_of,
    overlay_dirs,
    parse_mountinfo,
    parse_mountinfo_line,
    parse_options,
    read_mountinfo,
    resolve_overlay,
)
from loadscope.probes.result import STORAGE_CLASSES, Unavailable


@dataclass(frozen=True)
class Sample:
    id: str
    line: str
    fstype: str
    subtype: str | None  # as the report gives it (a plain "fuse" mount's daemon included)
    storage_class: str
    words: tuple[str, ...]  # must all appear in the reason
    wsl: bool = False
    device_network: DeviceNetwork = None


EBS_ROOT = "26 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw,discard,errors=remount-ro"
EBS_VERDICT = (True, "NVMe model 'Amazon Elastic Block Store': an EBS volume")
NFS42 = (
    "812 26 0:55 / /mnt/models rw,relatime shared:440 - nfs4 10.0.0.10:/export/models "
    "rw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,nconnect=16,timeo=600,"
    "retrans=2,sec=sys,clientaddr=10.0.0.5,local_lock=none,addr=10.0.0.10"
)
NFS3 = (
    "301 26 0:52 / /mnt/filestore rw,relatime shared:170 - nfs 10.20.0.2:/vol1 "
    "rw,vers=3,rsize=262144,wsize=262144,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,"
    "mountaddr=10.20.0.2,mountvers=3,mountport=2050,mountproto=udp,local_lock=none,addr=10.20.0.2"
)
CIFS = (
    "440 26 0:66 / /mnt/azfiles rw,relatime shared:235 - cifs "
    "//acct.file.core.windows.net/models rw,vers=3.1.1,cache=strict,username=acct,uid=0,"
    "noforceuid,gid=0,noforcegid,addr=20.60.1.2,file_mode=0777,dir_mode=0777,soft,"
    "persistenthandles,nounix,serverino,mapposix,mfsymlinks,rsize=1048576,wsize=1048576,"
    "bsize=1048576,echo_interval=60,actimeo=30,closetimeo=1"
)
GCSFUSE = (
    "450 26 0:68 / /mnt/gcs rw,nosuid,nodev,relatime shared:240 - fuse.gcsfuse my-models-bucket "
    "rw,user_id=0,group_id=0,default_permissions,allow_other"
)
GLUSTER = (
    "430 26 0:65 / /mnt/gluster rw,relatime shared:230 - fuse.glusterfs gluster1:/gv0 "
    "rw,user_id=0,group_id=0,default_permissions,allow_other,max_read=131072"
)
DOCKER_OVERLAY = (
    "602 541 0:190 / / rw,relatime master:1 - overlay overlay rw,"
    "lowerdir=/var/lib/docker/overlay2/l/4XHZ5FZ7TZJ7:/var/lib/docker/overlay2/l/OTJ2GWFAQDKT,"
    "upperdir=/var/lib/docker/overlay2/8c1f0a/diff,workdir=/var/lib/docker/overlay2/8c1f0a/work"
)
WSL2_DRVFS = (
    r"89 63 0:73 / /mnt/c rw,noatime - 9p C:\134 rw,dirsync,"
    r"aname=drvfs;path=C:\;uid=1000;gid=1000;symlinkroot=/mnt/,mmap,access=client,"
    "msize=262144,trans=virtio"
)

SAMPLES: tuple[Sample, ...] = (
    # --- block devices: local unless a device verdict (or the device's name) says otherwise
    Sample("ebs-root", EBS_ROOT, "ext4", None, "local-block", ("ext4", "/dev/nvme0n1p1")),
    Sample(
        "ebs-root-with-verdict",
        EBS_ROOT,
        "ext4",
        None,
        "network-block",
        ("ext4", "/dev/nvme0n1p1", "Amazon Elastic Block Store"),
        device_network=EBS_VERDICT,
    ),
    Sample(
        "local-nvme-with-verdict",
        "26 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro",
        "ext4",
        None,
        "local-block",
        ("Samsung SSD 990 PRO",),
        device_network=(False, "NVMe model 'Samsung SSD 990 PRO', a local disk"),
    ),
    Sample(
        "snap-squashfs",
        "510 26 7:3 / /snap/core/123 ro,nodev,relatime shared:260 - squashfs /dev/loop3 "
        "ro,errors=continue,threads=single",
        "squashfs",
        None,
        "local-block",
        ("squashfs", "/dev/loop3", "loop device"),
    ),
    Sample(
        "btrfs-anonymous-dev",
        "520 1 0:33 /@home /home rw,relatime shared:265 - btrfs /dev/sda2 "
        "rw,ssd,discard=async,space_cache=v2,subvolid=257,subvol=/@home",
        "btrfs",
        None,
        "local-block",
        ("btrfs", "/dev/sda2", "anonymous device 0:33"),
    ),
    Sample(
        "zfs-dataset",
        "530 1 0:50 / /tank/models rw,noatime shared:270 - zfs tank/models "
        "rw,xattr,posixacl,casesensitive",
        "zfs",
        None,
        "local-block",
        ("zfs dataset tank/models",),
    ),
    Sample(
        "xfs-on-md-raid",
        "540 26 9:127 / /data rw,noatime shared:275 - xfs /dev/md127 "
        "rw,attr2,inode64,logbufs=8,logbsize=32k,sunit=1024,swidth=4096,noquota",
        "xfs",
        None,
        "local-block",
        ("xfs", "/dev/md127", "RAID"),
    ),
    Sample(
        "ext4-on-dm-crypt",
        "28 1 253:0 / / rw,relatime shared:1 - ext4 /dev/mapper/luks-3f1c9a rw",
        "ext4",
        None,
        "local-block",
        ("/dev/mapper/luks-3f1c9a", "device-mapper"),
    ),
    Sample(
        "nbd",
        "550 26 43:0 / /mnt/nbd rw,relatime - ext4 /dev/nbd0 rw",
        "ext4",
        None,
        "network-block",
        ("/dev/nbd0", "NBD"),
        device_network=(False, "no network evidence in sysfs"),
    ),
    Sample(
        "ceph-rbd",
        "551 26 252:0 / /var/lib/kubelet/pods/7f/volumes/kubernetes.io~csi/pvc-1/mount "
        "rw,relatime shared:280 - ext4 /dev/rbd0 rw,stripe=16",
        "ext4",
        None,
        "network-block",
        ("/dev/rbd0", "RBD"),
    ),
    Sample(
        "escaped-space",
        r"560 26 259:3 / /mnt/my\040models rw,relatime - ext4 /dev/nvme1n1 rw",
        "ext4",
        None,
        "local-block",
        ("/dev/nvme1n1",),
    ),
    # --- network filesystems
    Sample(
        "nfs4.2-nconnect",
        NFS42,
        "nfs4",
        None,
        "network-fs",
        ("nfs4 mount of 10.0.0.10:/export/models", "vers=4.2", "nconnect=16", "NFS"),
    ),
    Sample(
        "efs-nfs4.1",
        "95 26 0:48 / /mnt/efs rw,relatime shared:52 - nfs4 "
        "fs-0123456789abcdef0.efs.us-east-1.amazonaws.com:/ rw,vers=4.1,rsize=1048576,"
        "wsize=1048576,namlen=255,hard,noresvport,proto=tcp,timeo=600,retrans=2,sec=sys,"
        "clientaddr=172.31.20.5,local_lock=none,addr=172.31.30.40",
        "nfs4",
        None,
        "network-fs",
        ("efs.us-east-1.amazonaws.com", "vers=4.1"),
    ),
    Sample("nfs3-tcp", NFS3, "nfs", None, "network-fs", ("nfs mount of", "vers=3", "proto=tcp")),
    Sample(
        "lustre",
        "402 26 0:60 / /fsx rw,relatime shared:210 - lustre 10.0.0.1@tcp:/lustre "
        "rw,flock,lazystatfs,encrypt",
        "lustre",
        None,
        "network-fs",
        ("10.0.0.1@tcp:/lustre", "Lustre"),
    ),
    Sample(
        "gpfs",
        "410 26 0:61 / /gpfs/fs1 rw,relatime shared:215 - gpfs fs1 rw",
        "gpfs",
        None,
        "network-fs",
        ("gpfs mount of fs1", "GPFS"),
    ),
    Sample(
        "beegfs",
        "415 26 0:62 / /mnt/beegfs rw,relatime shared:220 - beegfs beegfs_nodev "
        "rw,cfgFile=/etc/beegfs/beegfs-client.conf",
        "beegfs",
        None,
        "network-fs",
        ("BeeGFS",),
    ),
    Sample(
        "cephfs-kernel",
        "420 26 0:63 / /mnt/cephfs rw,relatime shared:225 - ceph "
        "10.0.0.1:6789,10.0.0.2:6789,10.0.0.3:6789:/ rw,name=admin,secret=<hidden>,acl",
        "ceph",
        None,
        "network-fs",
        ("CephFS", "kernel client", "10.0.0.1:6789"),
    ),
    Sample(
        "glusterfs-fuse",
        GLUSTER,
        "fuse",
        "glusterfs",
        "network-fs",
        ("fuse.glusterfs", "gluster1:/gv0", "GlusterFS"),
    ),
    Sample("cifs-azure-files", CIFS, "cifs", None, "network-fs", ("vers=3.1.1", "cache=strict")),
    Sample(
        "smb3",
        "441 26 0:67 / /mnt/nas rw,relatime shared:236 - smb3 //nas.local/share "
        "rw,vers=3.0,cache=loose,username=me,uid=1000,forceuid,gid=1000,forcegid,"
        "addr=192.168.1.10,soft,nounix,serverino,mapposix,rsize=4194304,wsize=4194304,"
        "bsize=1048576,echo_interval=60,actimeo=1,closetimeo=1",
        "smb3",
        None,
        "network-fs",
        ("//nas.local/share", "SMB3", "cache=loose"),
    ),
    Sample(
        "qemu-9p",
        "40 26 0:38 / /mnt/host rw,relatime - 9p hostshare rw,sync,dirsync,access=client,"
        "trans=virtio",
        "9p",
        None,
        "network-fs",
        ("9p mount of hostshare", "trans=virtio"),
    ),
    Sample(
        "virtiofs",
        "41 26 0:39 / /mnt/shared rw,relatime - virtiofs myfs rw",
        "virtiofs",
        None,
        "network-fs",
        ("virtiofs mount of myfs", "VM host"),
    ),
    Sample(
        "afs",
        "570 26 0:82 / /afs rw,relatime - afs AFS rw",
        "afs",
        None,
        "network-fs",
        ("AFS",),
    ),
    Sample(
        "orangefs",
        "571 26 0:83 / /mnt/orangefs rw,relatime - pvfs2 tcp://ofs1:3334/orangefs rw",
        "pvfs2",
        None,
        "network-fs",
        ("OrangeFS", "tcp://ofs1:3334/orangefs"),
    ),
    Sample(
        "wekafs",
        "572 26 0:84 / /mnt/weka rw,relatime - wekafs default rw,relatime_threshold=0",
        "wekafs",
        None,
        "network-fs",
        ("WekaFS",),
    ),
    Sample(
        "panfs",
        "573 26 0:85 / /panfs rw,relatime - panfs panfs://10.0.0.9:global rw",
        "panfs",
        None,
        "network-fs",
        ("PanFS",),
    ),
    # --- FUSE: object stores and remote shims
    Sample("gcsfuse", GCSFUSE, "fuse", "gcsfuse", "fuse", ("my-models-bucket", "Cloud Storage")),
    Sample(
        "blobfuse2-plain-fuse",
        "451 26 0:69 / /mnt/blob rw,nosuid,nodev,relatime shared:241 - fuse blobfuse2 "
        "rw,user_id=0,group_id=0,allow_other",
        "fuse",
        "blobfuse2",
        "fuse",
        ("Azure Blob", "subtype blobfuse2 from the source"),
    ),
    Sample(
        "s3fs",
        "452 26 0:70 / /mnt/s3 rw,nosuid,nodev,relatime shared:242 - fuse.s3fs s3fs "
        "rw,user_id=0,group_id=0,allow_other",
        "fuse",
        "s3fs",
        "fuse",
        ("fuse.s3fs", "S3 bucket"),
    ),
    Sample(
        "s3fs-plain-fuse",
        "453 26 0:71 / /mnt/s3old rw,nosuid,nodev,relatime - fuse s3fs rw,user_id=0,group_id=0",
        "fuse",
        "s3fs",
        "fuse",
        ("S3 bucket", "from the source"),
    ),
    Sample(
        "goofys",
        "454 26 0:72 / /mnt/goofys rw,nosuid,nodev,relatime shared:243 - fuse.goofys my-bucket "
        "rw,user_id=0,group_id=0,default_permissions,allow_other",
        "fuse",
        "goofys",
        "fuse",
        ("goofys", "my-bucket"),
    ),
    Sample(
        "mountpoint-s3",
        "455 26 0:73 / /mnt/mps3 rw,nosuid,nodev,noatime shared:244 - fuse mountpoint-s3 "
        "rw,user_id=0,group_id=0,default_permissions",
        "fuse",
        "mountpoint-s3",
        "fuse",
        ("Mountpoint for Amazon S3",),
    ),
    Sample(
        "sshfs",
        "456 26 0:74 / /home/me/remote rw,nosuid,nodev,relatime shared:245 - fuse.sshfs "
        "me@gpu-box:/data rw,user_id=1000,group_id=1000",
        "fuse",
        "sshfs",
        "fuse",
        ("me@gpu-box:/data", "SSH"),
    ),
    Sample(
        "sshfs-old-style-source",
        "457 26 0:75 / /home/me/old rw,nosuid,nodev,relatime - fuse sshfs#me@gpu-box:/data "
        "rw,user_id=1000,group_id=1000",
        "fuse",
        "sshfs",
        "fuse",
        ("SSH",),
    ),
    Sample(
        "rclone",
        "458 26 0:76 / /mnt/r2 rw,nosuid,nodev,relatime shared:246 - fuse.rclone r2:models "
        "rw,user_id=0,group_id=0,allow_other",
        "fuse",
        "rclone",
        "fuse",
        ("r2:models", "rclone"),
    ),
    Sample(
        "juicefs",
        "459 26 0:77 / /jfs rw,relatime shared:247 - fuse.juicefs JuiceFS:myjfs "
        "rw,user_id=0,group_id=0,default_permissions,allow_other",
        "fuse",
        "juicefs",
        "fuse",
        ("JuiceFS:myjfs", "metadata engine"),
    ),
    Sample(
        "ceph-fuse",
        "421 26 0:64 / /mnt/ceph-fuse rw,nosuid,nodev,relatime shared:226 - fuse.ceph-fuse "
        "ceph-fuse rw,user_id=0,group_id=0,allow_other",
        "fuse",
        "ceph-fuse",
        "fuse",
        ("CephFS", "userspace"),
    ),
    Sample(
        "colab-drivefs",
        "1204 1020 0:78 / /content/drive rw,nosuid,nodev,relatime shared:248 - fuse.drive drive "
        "rw,user_id=0,group_id=0,default_permissions,allow_other",
        "fuse",
        "drive",
        "fuse",
        ("Google Drive", "Colab"),
    ),
    Sample(
        "geesefs",
        "460 26 0:79 / /mnt/geese rw,nosuid,nodev,relatime - fuse.geesefs my-bucket "
        "rw,user_id=0,group_id=0,default_permissions",
        "fuse",
        "geesefs",
        "fuse",
        ("GeeseFS",),
    ),
    Sample(
        "alluxio-fuse",
        "461 26 0:80 / /mnt/alluxio-fuse rw,nosuid,nodev,relatime - fuse.alluxio-fuse "
        "alluxio-fuse rw,user_id=0,group_id=0,allow_other,max_read=131072",
        "fuse",
        "alluxio-fuse",
        "fuse",
        ("Alluxio", "max_read=131072"),
    ),
    Sample(
        "lxcfs",
        "462 26 0:81 / /var/lib/lxcfs rw,nosuid,nodev,relatime shared:250 - fuse.lxcfs lxcfs "
        "rw,user_id=0,group_id=0,allow_other",
        "fuse",
        "lxcfs",
        "fuse",
        ("LXCFS", "not storage"),
    ),
    Sample(
        "ntfs-3g-fuseblk",
        "463 26 8:17 / /media/usb rw,nosuid,nodev,relatime shared:251 - fuseblk /dev/sdb1 "
        "rw,user_id=0,group_id=0,default_permissions,allow_other,blksize=4096",
        "fuseblk",
        None,
        "fuse",
        ("fuseblk mount of /dev/sdb1", "block device"),
    ),
    Sample(
        "unknown-fuse",
        "464 26 0:86 / /mnt/custom rw,nosuid,nodev,relatime - fuse.myfs myfs rw,user_id=0",
        "fuse",
        "myfs",
        "fuse",
        ("fuse.myfs", "userspace daemon"),
    ),
    # --- WSL
    Sample("wsl2-drvfs-9p", WSL2_DRVFS, "9p", None, "wsl", ("aname=drvfs", "C:\\", "WSL2")),
    Sample(
        "wsl1-drvfs",
        r"4 2 0:4 / /mnt/c rw,noatime - drvfs C:\134 rw,case=off",
        "drvfs",
        None,
        "wsl",
        ("drvfs mount of C:\\", "WSL1"),
    ),
    Sample(
        "wsl2-9p-on-wsl-system",
        "75 63 0:71 / /usr/lib/wsl/drivers ro,nosuid,nodev,noatime - 9p drivers "
        "ro,dirsync,aname=drivers;fmask=222;dmask=222,mmap,access=client,msize=65536,trans=fd,"
        "rfd=7,wfd=7",
        "9p",
        None,
        "wsl",
        ("9p mount of drivers", "WSL system"),
        wsl=True,
    ),
    # --- memory
    Sample(
        "dev-shm",
        "25 24 0:23 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,size=16384k,inode64",
        "tmpfs",
        None,
        "memory",
        ("tmpfs at /dev/shm", "size=16384k", "RAM"),
    ),
    Sample(
        "ramfs",
        "500 26 0:87 / /mnt/ram rw,relatime - ramfs ramfs rw",
        "ramfs",
        None,
        "memory",
        ("ramfs", "RAM"),
    ),
    Sample(
        "hugetlbfs",
        "33 24 0:30 / /dev/hugepages rw,relatime shared:15 - hugetlbfs hugetlbfs rw,pagesize=2M",
        "hugetlbfs",
        None,
        "memory",
        ("huge pages",),
    ),
    Sample(
        "devtmpfs",
        "24 27 0:6 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev "
        "rw,size=8010644k,nr_inodes=2002661,mode=755,inode64",
        "devtmpfs",
        None,
        "memory",
        ("devtmpfs",),
    ),
    # --- overlay (the docker upperdir is a host path, not visible here: resolved elsewhere)
    Sample(
        "docker-overlay",
        DOCKER_OVERLAY,
        "overlay",
        None,
        "overlay",
        ("upperdir=/var/lib/docker/overlay2/8c1f0a/diff", "2 lower layers"),
    ),
    # --- not storage
    Sample(
        "proc",
        "22 27 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw",
        "proc",
        None,
        "unknown",
        ("proc at /proc", "not storage"),
    ),
    Sample(
        "sysfs",
        "23 27 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw",
        "sysfs",
        None,
        "unknown",
        ("sysfs", "not storage"),
    ),
    Sample(
        "cgroup2",
        "31 23 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot",
        "cgroup2",
        None,
        "unknown",
        ("cgroup2",),
    ),
    Sample(
        "autofs",
        "45 23 0:40 / /proc/sys/fs/binfmt_misc rw,relatime shared:25 - autofs systemd-1 "
        "rw,fd=29,pgrp=1,timeout=0,minproto=5,maxproto=5,direct,pipe_ino=20133",
        "autofs",
        None,
        "unknown",
        ("automount",),
    ),
    Sample(
        "unrecognised",
        "590 26 0:88 / /mnt/odd rw,relatime - weirdfs thing rw",
        "weirdfs",
        None,
        "unknown",
        ("unrecognised filesystem type weirdfs", "thing"),
    ),
)


def test_samples_cover_every_storage_class() -> None:
    assert len({s.line for s in SAMPLES}) >= 25
    assert {s.storage_class for s in SAMPLES} == set(STORAGE_CLASSES)


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_sample_is_classified(sample: Sample) -> None:
    mount = parse_mountinfo_line(sample.line)
    report = describe_mount(mount, [mount], wsl=sample.wsl, device_network=sample.device_network)
    assert report.fstype == sample.fstype
    assert report.subtype == sample.subtype
    assert report.storage_class == sample.storage_class, report.reason
    for word in sample.words:
        assert word in report.reason, f"{word!r} not in {report.reason!r}"
    assert report.device == f"{mount.major}:{mount.minor}"
    # classify alone agrees with the report
    assert classify(mount, wsl=sample.wsl, device_network=sample.device_network) == (
        report.storage_class,
        report.reason,
    )


def test_a_full_line_is_parsed_field_by_field() -> None:
    # The example from proc(5).
    mount = parse_mountinfo_line(
        "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
    )
    assert mount == Mount(
        mount_id=36,
        parent_id=35,
        major=98,
        minor=0,
        root="/mnt1",
        mount_point="/mnt/parent",
        mount_options={"rw": None, "noatime": None},
        optional_fields=("master:1",),
        fstype="ext3",
        subtype=None,
        source="/dev/root",
        super_options={"rw": None, "errors": "continue"},
    )
    assert mount.full_fstype == "ext3"
    assert mount.device == "98:0"


def test_optional_fields_none_or_several() -> None:
    none = parse_mountinfo_line("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw")
    assert none.optional_fields == ()
    several = parse_mountinfo_line(
        "80 27 0:50 / /mnt/x rw shared:5 master:1 propagate_from:2 unbindable - tmpfs t rw"
    )
    assert several.optional_fields == ("shared:5", "master:1", "propagate_from:2", "unbindable")


def test_fstype_and_subtype_split() -> None:
    mount = parse_mountinfo_line(GCSFUSE)
    assert (mount.fstype, mount.subtype, mount.full_fstype) == ("fuse", "gcsfuse", "fuse.gcsfuse")
    plain = parse_mountinfo_line(
        "455 26 0:73 / /mnt/mps3 rw - fuse mountpoint-s3 rw,user_id=0,group_id=0"
    )
    # The raw field has no subtype; fuse_subtype reads the daemon's name from the source.
    assert (plain.fstype, plain.subtype, plain.full_fstype) == ("fuse", None, "fuse")
    assert fuse_subtype(plain) == "mountpoint-s3"
    bucket = parse_mountinfo_line("456 26 0:74 / /mnt/b rw - fuse my-bucket rw,user_id=0")
    assert fuse_subtype(bucket) is None  # a bucket name is not a daemon


def test_escapes_are_decoded_in_paths_and_source() -> None:
    mount = parse_mountinfo_line(
        r"90 26 0:60 /sub\040dir /mnt/a\040b\011c\012d\134e rw - tmpfs my\040src rw,size=1k"
    )
    assert mount.root == "/sub dir"
    assert mount.mount_point == "/mnt/a b\tc\nd\\e"
    assert mount.source == "my src"
    wsl = parse_mountinfo_line(WSL2_DRVFS)
    assert wsl.source == "C:\\"
    # 9p prints its aname unescaped; a lone backslash that is not \ooo stays as it is
    assert wsl.super_options["aname"] == "drvfs;path=C:\\;uid=1000;gid=1000;symlinkroot=/mnt/"


def test_non_ascii_and_line_separator_characters_survive() -> None:
    # The kernel escapes only space, tab, newline and backslash; U+2028 and \x1c stay raw
    # and must not split the line (str.splitlines would).
    text = "91 26 0:61 / /mnt/modèle\u2028x\x1cy rw - tmpfs tmpfs rw\n"
    (mount,) = parse_mountinfo(text)
    assert mount.mount_point == "/mnt/modèle\u2028x\x1cy"


def test_empty_source_field() -> None:
    mount = parse_mountinfo_line("92 26 0:62 / /mnt/e rw - tmpfs  rw,size=4k")
    assert mount.source == ""
    assert mount.super_options == {"rw": None, "size": "4k"}
    nfs = parse_mountinfo_line("93 26 0:63 / /mnt/n rw - nfs4  rw,vers=4.2")
    assert "nfs4 mount of (no source)" in classify(nfs, wsl=False)[1]


def test_quoted_option_values_keep_their_commas() -> None:
    options = parse_options(
        'rw,context="system_u:object_r:container_file_t:s0:c123,c456",lowerdir=/a:/b'
    )
    assert options == {
        "rw": None,
        "context": "system_u:object_r:container_file_t:s0:c123,c456",
        "lowerdir": "/a:/b",
    }
    assert parse_options("") == {}
    assert parse_options("a=,b") == {"a": "", "b": None}


MALFORMED = (
    ("no-separator", "27 1 254:0 / / rw,relatime ext4 /dev/vda rw", "separator"),
    ("nothing-after-separator", "27 1 254:0 / / rw,relatime -", "found 0"),
    ("missing-super-options", "27 1 254:0 / / rw,relatime - ext4 /dev/vda", "found 2"),
    ("extra-field", "27 1 254:0 / / rw - ext4 /dev/vda rw junk", "found 4"),
    ("bad-id", "x7 1 254:0 / / rw - ext4 /dev/vda rw", "mount ID"),
    ("negative-parent", "27 -1 254:0 / / rw - ext4 /dev/vda rw", "parent ID"),
    ("bad-device", "27 1 254 / / rw - ext4 /dev/vda rw", "major:minor"),
    ("bad-minor", "27 1 254:a / / rw - ext4 /dev/vda rw", "minor"),
    ("relative-mount-point", "27 1 254:0 / mnt rw - ext4 /dev/vda rw", "absolute"),
    ("empty-fstype", "27 1 254:0 / / rw - .sub /dev/vda rw", "filesystem type"),
    ("too-short", "garbage", "separator"),
)


@pytest.mark.parametrize(("line", "why"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_line_is_refused_with_the_reason(line: str, why: str) -> None:
    with pytest.raises(MalformedMountLine, match=why):
        parse_mountinfo_line(line)


def test_parse_mountinfo_skips_exactly_the_malformed_lines() -> None:
    good = [EBS_ROOT, NFS42, GCSFUSE]
    bad = [m[1] for m in MALFORMED]
    lines = [good[0], *bad[:5], "", "   ", good[1], *bad[5:], good[2], ""]
    mounts = parse_mountinfo("\n".join(lines))
    assert [m.mount_id for m in mounts] == [26, 812, 450]


def test_read_mountinfo_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match="does not exist"):
        read_mountinfo(tmp_path / "nope")
    table = tmp_path / "mountinfo"
    table.write_text(f"{EBS_ROOT}\n{NFS42}\n")
    assert [m.mount_point for m in read_mountinfo(table)] == ["/", "/mnt/models"]


def _options(line: str) -> str:
    """The interesting options of a mountinfo line, as mount -o would write them."""
    opts = interesting_options(parse_mountinfo_line(line))
    return ",".join(k if v is None else f"{k}={v}" for k, v in opts.items())


def test_interesting_options_nfs() -> None:
    assert _options(NFS42) == (
        "vers=4.2,proto=tcp,nconnect=16,rsize=1048576,wsize=1048576,timeo=600,hard"
    )
    nfs3 = interesting_options(parse_mountinfo_line(NFS3))
    assert nfs3["vers"] == "3"
    assert nfs3["proto"] == "tcp"
    assert "nconnect" not in nfs3  # the kernel prints nconnect only when it is above 1


def test_interesting_options_cifs_fuse_overlay() -> None:
    assert _options(CIFS) == "vers=3.1.1,rsize=1048576,wsize=1048576,cache=strict,actimeo=30"
    assert _options(GCSFUSE) == "allow_other,user_id=0,default_permissions"
    assert interesting_options(parse_mountinfo_line(GLUSTER))["max_read"] == "131072"
    overlay = parse_mountinfo_line(DOCKER_OVERLAY)
    assert interesting_options(overlay) == {
        "upperdir": "/var/lib/docker/overlay2/8c1f0a/diff",
        "lowerdir": (
            "/var/lib/docker/overlay2/l/4XHZ5FZ7TZJ7:/var/lib/docker/overlay2/l/OTJ2GWFAQDKT"
        ),
    }
    assert overlay_dirs(overlay)["workdir"] == "/var/lib/docker/overlay2/8c1f0a/work"


def test_wsl_flag_only_changes_plain_9p() -> None:
    qemu = parse_mountinfo_line("40 26 0:38 / /mnt/host rw - 9p hostshare rw,trans=virtio")
    assert classify(qemu, wsl=False)[0] == "network-fs"
    assert classify(qemu, wsl=True)[0] == "wsl"
    assert classify(parse_mountinfo_line(WSL2_DRVFS), wsl=False)[0] == "wsl"
    assert classify(parse_mountinfo_line(NFS42), wsl=True)[0] == "network-fs"


def test_device_verdict_as_a_function_is_asked_about_block_mounts_only() -> None:
    asked: list[str] = []

    def verdict(mount: Mount) -> tuple[bool, str] | None:
        asked.append(mount.source)
        return (True, "Google PersistentDisk") if mount.source == "/dev/sdb" else None

    on_pd = parse_mountinfo_line("30 26 8:16 / /mnt/disks/models rw - ext4 /dev/sdb rw")
    assert classify(on_pd, wsl=False, device_network=verdict) == (
        "network-block",
        "ext4 on /dev/sdb: Google PersistentDisk",
    )
    assert classify(parse_mountinfo_line(EBS_ROOT), wsl=False, device_network=verdict)[0] == (
        "local-block"
    )
    assert classify(parse_mountinfo_line(NFS42), wsl=False, device_network=verdict)[0] == (
        "network-fs"
    )
    assert asked == ["/dev/sdb", "/dev/nvme0n1p1"]


# ---------------------------------------------------------------------------- mount_of


def _line(mount_id: int, parent_id: int, point: Path | str, fstype: str, source: str) -> str:
    escaped = str(point).replace("\\", r"\134").replace(" ", r"\040")
    return f"{mount_id} {parent_id} 0:{mount_id} / {escaped} rw,relatime - {fstype} {source} rw"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A real directory tree, resolved (tmp may itself sit behind a symlink)."""
    root = tmp_path.resolve()
    for sub in ("data/sub", "data2", "data/real"):
        (root / sub).mkdir(parents=True)
    return root


def test_mount_of_longest_prefix_by_component(tree: Path) -> None:
    mounts = parse_mountinfo(
        "\n".join(
            [
                _line(1, 0, "/", "ext4", "/dev/vda"),
                _line(2, 1, tree, "xfs", "/dev/sdb"),
                _line(3, 2, tree / "data", "nfs4", "fs1:/export"),
                _line(4, 3, tree / "data/sub", "tmpfs", "tmpfs"),
            ]
        )
    )
    assert mount_of(tree / "data2/x", mounts).mount_id == 2  # /data2 is not under /data
    assert mount_of(tree / "data/x", mounts).mount_id == 3
    assert mount_of(tree / "data", mounts).mount_id == 3  # the mount point itself
    assert mount_of(tree / "data/sub/model.safetensors", mounts).mount_id == 4
    assert mount_of(tree / "data/subdir", mounts).mount_id == 3
    assert mount_of("/", mounts).mount_id == 1
    # a longer mount listed before a shorter one still wins (as /proc before / in real tables)
    assert mount_of(tree / "data/x", list(reversed(mounts))).mount_id == 3


def test_mount_of_stacked_mounts_takes_the_top(tree: Path) -> None:
    point = tree / "data"
    stacked = parse_mountinfo(
        "\n".join(
            [
                _line(1, 0, "/", "ext4", "/dev/vda"),
                _line(5, 1, point, "tmpfs", "first"),
                _line(6, 5, point, "tmpfs", "second"),  # mounted on top of 5
            ]
        )
    )
    assert mount_of(point / "f", stacked).source == "second"
    unrelated = parse_mountinfo(
        "\n".join(
            [
                _line(1, 0, "/", "ext4", "/dev/vda"),
                _line(5, 1, point, "tmpfs", "first"),
                _line(6, 1, point, "tmpfs", "second"),
            ]
        )
    )
    assert mount_of(point / "f", unrelated).source == "second"  # the last listed is on top
    # The parent links say which is on top even where the listing order does not.
    reordered = [stacked[0], stacked[2], stacked[1]]
    assert mount_of(point / "f", reordered).source == "second"


def test_mount_of_resolves_symlinks(tree: Path) -> None:
    (tree / "link").symlink_to(tree / "data/real")
    (tree / "data/real/model.safetensors").write_bytes(b"")
    (tree / "data2/model.safetensors").symlink_to(tree / "data/real/model.safetensors")
    mounts = parse_mountinfo(
        "\n".join(
            [
                _line(1, 0, "/", "ext4", "/dev/vda"),
                _line(2, 1, tree / "data", "nfs4", "fs1:/export"),
            ]
        )
    )
    assert mount_of(tree / "link/model.safetensors", mounts).mount_id == 2
    assert mount_of(tree / "data2/model.safetensors", mounts).mount_id == 2
    assert mount_of(tree / "data2", mounts).mount_id == 1


def test_mount_of_escaped_mount_point(tree: Path) -> None:
    spaced = tree / "my models"
    spaced.mkdir()
    mounts = parse_mountinfo(
        "\n".join([_line(1, 0, "/", "ext4", "/dev/vda"), _line(2, 1, spaced, "xfs", "/dev/sdc")])
    )
    assert mounts[1].mount_point == str(spaced)
    assert mount_of(spaced / "x.bin", mounts).mount_id == 2


def test_mount_of_without_a_containing_mount() -> None:
    with pytest.raises(Unavailable, match="no mount"):
        mount_of("/", [])


# ---------------------------------------------------------------------------- overlay


def test_overlay_resolves_to_the_storage_under_its_upperdir(tree: Path) -> None:
    upper = tree / "upperfs" / "diff"
    upper.mkdir(parents=True)
    (tree / "merged").mkdir()
    overlay_line = (
        f"700 1 0:190 / {tree}/merged rw,relatime - overlay overlay "
        f"rw,lowerdir={tree}/lower1:{tree}/lower2,upperdir={upper},workdir={tree}/upperfs/work"
    )
    mounts = parse_mountinfo(
        "\n".join(
            [
                _line(1, 0, "/", "ext4", "/dev/vda"),
                _line(2, 1, tree / "upperfs", "xfs", "/dev/sdb"),
                overlay_line,
            ]
        )
    )
    overlay = mounts[2]
    assert overlay_dirs(overlay) == {
        "upperdir": str(upper),
        "lowerdir": f"{tree}/lower1:{tree}/lower2",
        "workdir": f"{tree}/upperfs/work",
    }
    report = describe_mount(overlay, mounts, wsl=False)
    assert report.storage_class == "overlay"
    assert report.resolved_class == "local-block"
    assert report.resolved_reason is not None
    assert f"upperdir {upper} is on {tree}/upperfs" in report.resolved_reason
    assert "xfs on /dev/sdb" in report.resolved_reason

    def azure(mount: Mount) -> tuple[bool, str] | None:
        return (True, "Azure managed disk (Msft Virtual Disk)") if mount.mount_id == 2 else None

    on_azure = describe_mount(overlay, mounts, wsl=False, device_network=azure)
    assert on_azure.resolved_class == "network-block"
    assert "Azure managed disk" in (on_azure.resolved_reason or "")


def test_overlay_on_overlay_resolves_through_both(tree: Path) -> None:
    (tree / "inner/upper").mkdir(parents=True)
    (tree / "outer/upper").mkdir(parents=True)
    mounts = parse_mountinfo(
        "\n".join(
            [
                _line(1, 0, "/", "ext4", "/dev/vda"),
                _line(2, 1, tree / "disk", "nfs4", "fs1:/export"),
                f"3 1 0:91 / {tree}/outer rw - overlay overlay "
                f"rw,lowerdir={tree}/l,upperdir={tree}/inner/upper,workdir={tree}/w",
                f"4 1 0:92 / {tree}/inner rw - overlay overlay "
                f"rw,lowerdir={tree}/l,upperdir={tree}/disk/upper,workdir={tree}/w",
            ]
        )
    )
    (tree / "disk/upper").mkdir(parents=True)
    storage_class, reason = resolve_overlay(mounts[2], mounts, wsl=False)
    assert storage_class == "network-fs"
    assert "itself an overlay" in reason
    assert "nfs4 mount of fs1:/export" in reason


def test_overlay_that_cannot_be_resolved_says_why(tree: Path) -> None:
    docker = parse_mountinfo_line(DOCKER_OVERLAY)
    if os.path.exists("/var/lib/docker/overlay2/8c1f0a/diff"):
        pytest.skip("this machine really has that docker layer")
    report = describe_mount(docker, [docker], wsl=False)
    assert report.resolved_class is None
    assert "not visible from here" in (report.resolved_reason or "")

    relative = parse_mountinfo_line(
        "701 1 0:191 / /merged rw - overlay overlay rw,lowerdir=l/ABC:l/DEF,"
        "upperdir=8c1f0a/diff,workdir=8c1f0a/work"
    )
    assert resolve_overlay(relative, [relative], wsl=False) == (
        None,
        "upperdir 8c1f0a/diff is relative to the working directory of whoever mounted the "
        "overlay; it cannot be resolved from here",
    )
    lower_only = parse_mountinfo(
        "\n".join(
            [
                _line(1, 0, "/", "ext4", "/dev/vda"),
                _line(2, 1, tree / "data", "squashfs", "/dev/loop7"),
                f"3 1 0:93 / /ro rw - overlay overlay ro,lowerdir={tree}/data/real:{tree}/data2",
            ]
        )
    )
    storage_class, reason = resolve_overlay(lower_only[2], lower_only, wsl=False)
    assert storage_class == "local-block"
    assert reason.startswith(f"lowerdir {tree}/data/real is on {tree}/data")
    nothing = parse_mountinfo_line("4 1 0:94 / /x rw - overlay overlay rw")
    assert resolve_overlay(nothing, [nothing], wsl=False)[0] is None


# ---------------------------------------------------------------------------- devices


def _fake_stat(mode: int, rdev: int = 0) -> Any:
    def fake(path: str) -> SimpleNamespace:
        return SimpleNamespace(st_mode=mode, st_rdev=rdev)

    return fake


def _missing(path: str) -> SimpleNamespace:
    raise FileNotFoundError(path)


def test_block_device_of() -> None:
    assert block_device_of(parse_mountinfo_line(EBS_ROOT)) == (259, 1)
    btrfs = parse_mountinfo_line("520 1 0:33 /@home /home rw - btrfs /dev/sda2 rw,subvol=/@home")
    as_block = _fake_stat(stat.S_IFBLK | 0o660, os.makedev(8, 2))
    assert block_device_of(btrfs, stat=as_block) == (8, 2)
    assert block_device_of(btrfs, stat=_fake_stat(stat.S_IFCHR | 0o660, 1)) is None
    assert block_device_of(btrfs, stat=_missing) is None
    zfs = parse_mountinfo_line("530 1 0:50 / /tank rw - zfs tank/models rw")
    assert block_device_of(zfs, stat=as_block) is None  # a dataset name, not a device
    assert block_device_of(parse_mountinfo_line(NFS42), stat=as_block) is None


def _findmnt(*args: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        ["findmnt", "-J", "-v", *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stderr
    filesystems: list[dict[str, Any]] = json.loads(proc.stdout)["filesystems"]
    return filesystems


# ---------------------------------------------------------------------------- live system

_LIVE = Path("/proc/self/mountinfo")
needs_mountinfo = pytest.mark.skipif(not _LIVE.exists(), reason="needs Linux /proc/self/mountinfo")
needs_findmnt = pytest.mark.skipif(
    shutil.which("findmnt") is None, reason="needs findmnt (util-linux) for the cross-check"
)


@needs_mountinfo
def test_live_mountinfo_parses_every_line() -> None:
    lines = [line for line in _LIVE.read_text(errors="surrogateescape").split("\n") if line]
    for line in lines:
        parse_mountinfo_line(line)  # raises on the first line we would skip
    assert len(read_mountinfo()) == len(lines)


@needs_mountinfo
@needs_findmnt
def test_live_table_matches_findmnt() -> None:
    ours = {m.mount_id: m for m in read_mountinfo()}
    theirs = _findmnt("--list", "-o", "ID,PARENT,MAJ:MIN,TARGET,SOURCE,FSTYPE,FSROOT")
    for fs in theirs:
        mount = ours.get(int(fs["id"]))
        if mount is None:
            continue  # mounted or unmounted between the two reads
        assert mount.parent_id == int(fs["parent"])
        assert mount.device == fs["maj:min"]
        assert mount.mount_point == fs["target"]
        assert mount.source == (fs["source"] or "")
        assert mount.full_fstype == fs["fstype"]
        assert mount.root == fs["fsroot"]
    assert len(ours) >= len(theirs) - 2


def _live_paths(tmp_path: Path) -> list[Path]:
    candidates = [Path("/"), Path("/proc"), Path("/dev/shm"), tmp_path, Path.home()]
    return [p for p in candidates if p.exists()]


@needs_mountinfo
@needs_findmnt
def test_live_mount_of_matches_findmnt(tmp_path: Path) -> None:
    mounts = read_mountinfo()
    for path in _live_paths(tmp_path):
        mount = mount_of(path, mounts)
        # findmnt -T lists every mount at the target, bottom first; the last is on top.
        top = _findmnt("-T", str(path), "-o", "TARGET,SOURCE,FSTYPE")[-1]
        assert (mount.mount_point, mount.full_fstype, mount.source) == (
            top["target"],
            top["fstype"],
            top["source"] or "",
        ), path


@needs_mountinfo
def test_live_mount_has_the_device_stat_reports(tmp_path: Path) -> None:
    mounts = read_mountinfo()
    for path in _live_paths(tmp_path):
        mount = mount_of(path, mounts)
        if mount.fstype in ("btrfs", "bcachefs"):
            continue  # each subvolume has its own st_dev
        st_dev = os.stat(path).st_dev  # a directory's st_dev is its mount's, overlay included
        assert (os.major(st_dev), os.minor(st_dev)) == (mount.major, mount.minor), path


@needs_mountinfo
def test_live_root_is_local_block_when_it_is_a_disk() -> None:
    mounts = read_mountinfo()
    root = mount_of("/", mounts)
    if root.fstype not in BLOCK_FILESYSTEMS:
        pytest.skip(f"/ here is {root.full_fstype} on {root.source}, not a block filesystem")
    report = describe_mount(root, mounts, wsl=False)
    assert report.storage_class == "local-block"
    assert root.source in report.reason
    if root.source.startswith("/dev/") and os.path.exists(root.source):
        st = os.stat(root.source)
        if stat.S_ISBLK(st.st_mode):
            expected = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            assert report.block_device == expected


@needs_mountinfo
def test_live_tmpfs_is_memory() -> None:
    mounts = read_mountinfo()
    on_top = [
        m
        for m in mounts
        if m.fstype == "tmpfs" and mount_of(m.mount_point, mounts).mount_id == m.mount_id
    ]
    if not on_top:
        pytest.skip("no tmpfs mount in /proc/self/mountinfo")
    preferred = [m for m in on_top if m.mount_point == "/dev/shm"] or on_top
    report = describe_mount(preferred[0], mounts, wsl=False)
    assert report.storage_class == "memory"
    assert "tmpfs" in report.reason


def _can_mount() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount") is not None


@needs_mountinfo
@needs_findmnt
@pytest.mark.skipif(not _can_mount(), reason="needs root and mount(8) to stack tmpfs mounts")
def test_live_stacked_tmpfs_agrees_with_findmnt(tmp_path: Path) -> None:
    point = tmp_path / "stack"
    point.mkdir()
    mounted = 0
    try:
        for name in ("loadscope-lower", "loadscope-upper"):
            proc = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=1m", name, str(point)],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                pytest.skip(f"mount -t tmpfs failed here: {proc.stderr.strip()}")
            mounted += 1
        mounts = read_mountinfo()
        mount = mount_of(point / "model.safetensors", mounts)
        assert mount.source == "loadscope-upper"
        top = _findmnt("-T", str(point), "-o", "TARGET,SOURCE,FSTYPE")[-1]
        assert (mount.mount_point, mount.source) == (top["target"], top["source"])
        assert describe_mount(mount, mounts, wsl=False).storage_class == "memory"
    finally:
        for _ in range(mounted):
            subprocess.run(["umount", str(point)], check=False, capture_output=True)


@needs_mountinfo
def test_live_fuse_mounts_have_their_connection_directory() -> None:
    connections = Path("/sys/fs/fuse/connections")
    fuse = [m for m in read_mountinfo() if m.fstype in ("fuse", "fuseblk")]
    if not fuse or not connections.is_dir():
        pytest.skip("no FUSE mount (or no fusectl at /sys/fs/fuse/connections) on this machine")
    names = {p.name for p in connections.iterdir()}
    for mount in fuse:
        assert str(fuse_connection_id(mount.major, mount.minor)) in names, mount.mount_point


def _libc_mount() -> Any:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc if hasattr(libc, "mount") and hasattr(libc, "umount2") else None


@needs_mountinfo
@pytest.mark.skipif(
    not (_can_mount() and os.path.exists("/dev/fuse")),
    reason="needs root and /dev/fuse to mount a FUSE connection",
)
def test_live_fuse_mount_and_its_connection_directory(tmp_path: Path) -> None:
    """A real FUSE mount (no daemon: nothing ever looks inside it) and fusectl beside it."""
    import ctypes

    libc = _libc_mount()
    if libc is None:
        pytest.skip("libc has no mount(2) wrapper here")
    point = (tmp_path / "fuse").resolve()
    control = (tmp_path / "fusectl").resolve()
    point.mkdir()
    control.mkdir()
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    mounted: list[Path] = []
    try:
        data = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
        ms_nosuid_nodev = 2 | 4
        if libc.mount(
            b"loadscope-test", bytes(point), b"fuse.loadscope-test", ms_nosuid_nodev, data
        ):
            pytest.skip(f"mounting FUSE failed: {os.strerror(ctypes.get_errno())}")
        mounted.append(point)
        if libc.mount(b"fusectl", bytes(control), b"fusectl", 0, None):
            pytest.skip(f"mounting fusectl failed: {os.strerror(ctypes.get_errno())}")
        mounted.append(control)
        # Only the mount table is read: with no daemon answering, a stat inside would hang.
        (mount,) = [m for m in read_mountinfo() if m.mount_point == str(point)]
        assert (mount.fstype, mount.subtype, mount.source) == (
            "fuse",
            "loadscope-test",
            "loadscope-test",
        )
        assert mount.super_options == {"rw": None, "user_id": "0", "group_id": "0"}
        assert classify(mount, wsl=False)[0] == "fuse"
        assert (control / str(fuse_connection_id(mount.major, mount.minor))).is_dir()
    finally:
        os.close(fd)  # aborts the connection, so the unmount below cannot wait on it
        for path in reversed(mounted):
            libc.umount2(bytes(path), 2)  # MNT_DETACH


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("40 1 254:0 / /m rw - ext4 /dev/vda rw", "an ext4 mount (source /dev/vda)"),
        ("41 1 0:50 / /m rw - tmpfs tmpfs rw", "a tmpfs mount (source tmpfs)"),
        ("42 1 0:51 / /m rw - fuse.sshfs u@h: rw", "a fuse.sshfs mount (source u@h:)"),
    ],
)
def test_a_refused_mount_is_named_with_its_article(line: str, said: str) -> None:
    from loadscope.tools.emumounts import describe_mount as in_a_few_words

    assert in_a_few_words(parse_mountinfo_line(line)) == said
