"""An emulated network block volume: ext4 on a loop device whose image is on the slow disk.

Cloud block volumes (EBS, Persistent Disk, Azure disks) look like local disks: an
ext4 on a block device in ``findmnt``, with the kernel's block-layer readahead,
request merging and queue in front of them, while every request crosses a network.
This reproduces that on one machine: the model's files are put into an ext4 image
(``mkfs.ext4 -d``, never touching the source), the image is served through the
FUSE slow disk (:mod:`loadscope.tools.emulator`, with ``direct_io`` so the image itself is
never cached and every request the loop device sends waits its latency), the image
is attached to a read-only loop device, and the ext4 is mounted read-only at the
mount point. The loop device's readahead is the setting's ``readahead_kb``.

The volume runs in its own process (``loadscope emulate --block``), which dies with
its parent (``PR_SET_PDEATHSIG``) and, on SIGINT/SIGTERM/SIGHUP or its parent's
death, unmounts the ext4, detaches the loop device, stops the FUSE server and
removes the image, in that order. :func:`emulated_block_disk` starts one and waits
until it is mounted; :func:`unmount_block` removes a stale one (its server killed).

Imports the FUSE emulator (:mod:`loadscope.tools.emulator` and its lower modules) and
the mount table; needs root, ``mkfs.ext4`` and loop devices.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from loadscope.probes.mounts import Mount, read_mountinfo
from loadscope.tools.emucommon import (
    EmulatorError,
    EmulatorSettings,
    check_source,
    die_with_parent,
    fuse_unavailable_reason,
    started_by,
)
from loadscope.tools.emulator import emulated_disk, read_ready, start_server
from loadscope.tools.emumounts import prepare_mount, top_mount, unmount

READY_LINE = "loadscope-emulate-block: ready"
#: The work directory's prefix: a loop device whose image lies under one is ours.
WORK_PREFIX = "loadscope-block-"
IMAGE_NAME = "disk.img"
#: In the work directory: the mount point, loop device and FUSE mount of the volume.
RECORD = "volume.json"
_READY_TIMEOUT_S = 600.0  # building the image copies the model


def block_unavailable_reason() -> str | None:
    """Why the block emulation cannot run here, or None."""
    if why := fuse_unavailable_reason():
        return why
    for tool in ("mkfs.ext4", "losetup", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install e2fsprogs util-linux)"
    if not Path("/dev/loop-control").exists():
        return "no loop devices here (/dev/loop-control is missing)"
    return None


def _require_block() -> None:
    """Refuse to go on where the block emulation cannot run, saying why."""
    if why := block_unavailable_reason():
        raise EmulatorError(f"cannot emulate a block volume here: {why}")


@dataclass(frozen=True, slots=True)
class BlockDisk:
    path: Path
    source: Path
    loop: str
    settings: EmulatorSettings
    process: subprocess.Popen[str] = field(repr=False)


# -- the server side -----------------------------------------------------------------------


def _run(cmd: list[str], what: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise EmulatorError(f"{what} failed: {detail[-1] if detail else f'exit {done.returncode}'}")
    return done.stdout.strip()


def _staged(source: Path, work: Path) -> Path:
    """``source`` itself, or (when it holds symbolic links, as a Hugging Face snapshot
    does) a directory of hard links or copies of what they point to: ``mkfs -d`` would
    copy the links, which point nowhere inside the image."""
    links = [p for p in source.rglob("*") if p.is_symlink()]
    if not links:
        return source
    stage = work / "stage"
    for path in source.rglob("*"):
        dest = stage / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        real = path.resolve()
        try:
            os.link(real, dest)
        except OSError:
            shutil.copyfile(real, dest)
    return stage


def build_image(source: Path, image: Path) -> None:
    """An ext4 image holding ``source``'s files (read only, never changed)."""
    used = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
    size = int(used * 1.08) + (64 << 20)
    free = shutil.disk_usage(image.parent).free
    if size > free:
        raise EmulatorError(
            f"the ext4 image of {source} needs {size >> 20} MiB in {image.parent},"
            f" which has {free >> 20} MiB free"
        )
    _run(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-b",
            "4096",
            "-m",
            "0",
            "-O",
            "^has_journal",
            "-L",
            "loadscope",
            "-d",
            str(source),
            str(image),
            f"{size // 1024}k",
        ],
        f"building the ext4 image of {source}",
    )


def _set_readahead(loop: str, readahead_kb: int) -> None:
    with contextlib.suppress(OSError):
        Path(f"/sys/block/{os.path.basename(loop)}/queue/read_ahead_kb").write_text(
            f"{readahead_kb}\n"
        )


def _umount(mountpoint: str) -> None:
    for _ in range(20):
        if subprocess.run(["umount", mountpoint], capture_output=True, check=False).returncode == 0:
            return
        if not any(m.mount_point == os.path.realpath(mountpoint) for m in read_mountinfo()):
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", mountpoint], capture_output=True, check=False)


def _detach(loop: str) -> None:
    for _ in range(20):
        if (
            subprocess.run(["losetup", "-d", loop], capture_output=True, check=False).returncode
            == 0
        ):
            return
        time.sleep(0.1)


def serve_block(source: str, mountpoint: str, settings: EmulatorSettings) -> None:
    """Build, serve, attach and mount; block until signalled; then take it all down."""
    src = check_source(source)
    mnt = os.path.realpath(mountpoint)  # as the mount table will show it
    _require_block()
    stop = threading.Event()

    def on_signal(_sig: int, _frame: object) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    die_with_parent(started_by())
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=tempfile.gettempdir()))
    try:
        (work / "img").mkdir()
        build_image(_staged(src, work), work / "img" / IMAGE_NAME)
        if stop.is_set():
            return
        # direct_io: the image is never cached, so each request the loop device sends
        # waits its latency, as a volume's requests cross the network.
        fuse = dataclasses.replace(settings, direct_io=True)
        with emulated_disk(work / "img", work / "fuse", fuse) as disk:
            loop = _run(
                ["losetup", "--find", "--show", "--read-only", str(disk.path / IMAGE_NAME)],
                "attaching the image to a loop device",
            )
            try:
                # The record that lets --unmount recognise this volume once its server is
                # gone (the loop device's backing path is then no longer ours to read).
                (work / RECORD).write_text(
                    json.dumps({"mountpoint": mnt, "loop": loop, "fuse": str(disk.path)})
                )
                _set_readahead(loop, settings.readahead_kb)
                _run(
                    ["mount", "-t", "ext4", "-o", "ro,noload", loop, mnt],
                    f"mounting the ext4 volume at {mnt}",
                )
                try:
                    st = os.stat(mnt)
                    print(
                        f"{READY_LINE} {loop} {os.major(st.st_dev)}:{os.minor(st.st_dev)}",
                        flush=True,
                    )
                    while not stop.wait(0.5):
                        pass
                finally:
                    _umount(mnt)
            finally:
                _detach(loop)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- the client side -----------------------------------------------------------------------


@contextlib.contextmanager
def emulated_block_disk(
    source: str | os.PathLike[str],
    mountpoint: str | os.PathLike[str],
    settings: EmulatorSettings | None = None,
) -> Iterator[BlockDisk]:
    """Mount ``source`` as an emulated network block volume at ``mountpoint`` for the
    ``with`` block; always takes it down (mount, loop device, FUSE server, image)."""
    settings = settings or EmulatorSettings()
    _require_block()
    src, mnt = prepare_mount(source, mountpoint)
    proc = start_server(src, mnt, settings, "--block")
    try:
        loop = read_ready(proc, READY_LINE, _READY_TIMEOUT_S, "the emulated block volume")[0]
        yield BlockDisk(mnt, src, loop, settings, proc)
    finally:
        _stop(proc, mnt)


def _stop(proc: subprocess.Popen[str], mnt: Path) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=5)
    # A server killed outright leaves its pieces: take them down here.
    top = top_mount(mnt)
    if top is not None and is_block_emulator_mount(top):
        unmount_block(str(mnt))


# -- recognising and removing a stale volume -----------------------------------------------


def loop_backing_file(source: str) -> str | None:
    """The image file behind ``/dev/loopN`` (sysfs), or None when it is not a loop."""
    name = os.path.basename(source)
    if not re.fullmatch(r"loop\d+", name):
        return None
    with contextlib.suppress(OSError):
        return Path(f"/sys/block/{name}/loop/backing_file").read_text().strip() or None
    return None


def _record_of(mount: Mount) -> tuple[Path, dict[str, str]] | None:
    """The work directory and record of the volume mounted as ``mount``, if ours."""
    if mount.fstype != "ext4" or loop_backing_file(mount.source) is None:
        return None
    for work in Path(tempfile.gettempdir()).glob(f"{WORK_PREFIX}*"):
        with contextlib.suppress(OSError, ValueError):
            record = json.loads((work / RECORD).read_text())
            mine = record.get("mountpoint") == mount.mount_point
            if mine and record.get("loop") == mount.source:
                return work, record
    return None


def is_block_emulator_mount(mount: Mount) -> bool:
    """True for an ext4 volume this module mounted (live, or its server gone)."""
    return _record_of(mount) is not None


def unmount_block(mountpoint: str) -> None:
    """Take down a block volume whose server is gone: the ext4, its loop device, the
    FUSE mount under the image, the work directory. Refuses anything else."""
    # Only the mount on top: umount takes that one, whatever is stacked under it.
    top = top_mount(mountpoint)
    found = _record_of(top) if top is not None else None
    if found is None:
        raise EmulatorError(f"{mountpoint}: not a block volume loadscope's emulator made")
    work, record = found
    _umount(record["mountpoint"])
    _detach(record["loop"])
    with contextlib.suppress(EmulatorError):
        unmount(record["fuse"])
    shutil.rmtree(work, ignore_errors=True)
