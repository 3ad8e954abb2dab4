"""The emulator's mounts in the mount table: recognising them, refusing others, removing them.

Owns what an emulator mount looks like (``fuse.loadscope``, a source naming the
directory served), the checks a mount point passes before anything is mounted on it
(:func:`check_mountpoint`, :func:`prepare_mount`), and the unmounting, which touches
only a mount the emulator made, live or stale after its server died (:func:`unmount`;
:func:`unmount_emulator` for ``emulate --unmount`` also says what a path it refuses is).
May import ``loadscope.probes.mounts``, ``loadscope.base`` and
:mod:`loadscope.tools.emucommon`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

from loadscope.base.errors import LoadscopeError, PathNotFound
from loadscope.probes.mounts import Mount, read_mountinfo
from loadscope.tools.emucommon import EmulatorError, check_source

#: What the emulator's mounts look like in mountinfo: ``fuse.loadscope``, and a source
#: naming the directory served. Nothing else is ever unmounted by loadscope.
EMULATOR_FSTYPE = "fuse.loadscope"
EMULATOR_SOURCE_PREFIX = "loadscope-emulate:"


def is_mounted(mountpoint: str | os.PathLike[str]) -> bool:
    target = os.path.realpath(mountpoint)
    with contextlib.suppress(Exception):
        return any(m.mount_point == target for m in read_mountinfo())
    return False


def mounts_at(mountpoint: str | os.PathLike[str]) -> list[Mount]:
    """Every mount whose mount point is exactly ``mountpoint`` (stacked ones too)."""
    target = os.path.realpath(mountpoint)
    with contextlib.suppress(Exception):
        return [m for m in read_mountinfo() if m.mount_point == target]
    return []


def top_mount(mountpoint: str | os.PathLike[str]) -> Mount | None:
    """The mount that is seen at ``mountpoint`` (the last of a stack; what umount takes),
    or None. Every judgement of whose mount a path is reads this one, never one below it."""
    found = mounts_at(mountpoint)
    return found[-1] if found else None


def is_emulator_mount(mount: Mount) -> bool:
    """True for a mount the emulator made (live, or stale after its server died)."""
    return mount.full_fstype == EMULATOR_FSTYPE and mount.source.startswith(EMULATOR_SOURCE_PREFIX)


def describe_mount(mount: Mount) -> str:
    """A mount in a few words: "a tmpfs mount (source tmpfs)"."""
    article = "an" if mount.full_fstype.lower().startswith(tuple("aeiou")) else "a"
    return f"{article} {mount.full_fstype} mount (source {mount.source})"


def describe_path(path: str | os.PathLike[str]) -> str:
    """What ``path`` is, for a refusal: missing, not a directory, a mount, a directory."""
    target = os.fspath(path)
    if not os.path.lexists(target):
        return "does not exist"
    if not os.path.isdir(target):
        return "is not a directory"
    if (top := top_mount(target)) is not None:
        return f"is {describe_mount(top)}"
    return "is a directory, not a mount point"


def check_mountpoint(mountpoint: str | os.PathLike[str]) -> None:
    """Refuse a mount point that is not an empty directory, or that is already a mount.

    Mounting over a non-empty directory hides its files for as long as the emulator runs,
    and stacking on a live mount takes the mount below down when this one stops.
    """
    target = os.fspath(mountpoint)
    # The mount table first: a stale FUSE mount (its server gone) fails every stat.
    if (top := top_mount(target)) is not None:
        stale = " (stale: emulate --unmount removes it)" if is_emulator_mount(top) else ""
        raise EmulatorError(
            f"{target}: already {describe_mount(top)}{stale}; choose an empty directory"
        )
    if not os.path.lexists(target):
        return  # emulated_disk creates it
    if not os.path.isdir(target):
        raise EmulatorError(f"{target}: mount point is not a directory")
    try:
        with os.scandir(target) as entries:
            nonempty = any(True for _ in entries)
    except OSError as exc:
        raise EmulatorError(f"{target}: cannot list the mount point ({exc.strerror})") from None
    if nonempty:
        raise EmulatorError(
            f"{target}: mount point is not empty (mounting would hide its files);"
            " choose an empty directory"
        )


def prepare_mount(
    source: str | os.PathLike[str], mountpoint: str | os.PathLike[str]
) -> tuple[Path, Path]:
    """The directory to serve and the mount point, both checked; the mount point is created
    when missing. Both absolute (the source resolved, the mount point as given)."""
    src = check_source(source)
    check_mountpoint(mountpoint)
    mnt = Path(os.path.abspath(mountpoint))
    mnt.mkdir(parents=True, exist_ok=True)
    return src, mnt


def unmount(mountpoint: str | os.PathLike[str]) -> bool:
    """Unmount the emulator's mount there (also a stale one whose process died).

    Only a mount the emulator made is touched (:func:`is_emulator_mount`); True when no
    emulator mount is left at ``mountpoint``. Use :func:`unmount_emulator` for a user's
    request, which also says what a path it refuses is.
    """
    target = os.fspath(mountpoint)

    def ours() -> bool:
        top = top_mount(target)
        return top is not None and is_emulator_mount(top)

    for cmd in (
        ["fusermount3", "-u", target],
        ["fusermount3", "-uz", target],
        ["umount", "-l", target],
    ):
        if not ours():
            return True
        if shutil.which(cmd[0]):
            subprocess.run(cmd, capture_output=True, check=False, timeout=30)
    return not ours()


def unmount_emulator(mountpoint: str | os.PathLike[str]) -> None:
    """``emulate --unmount``: unmount an emulator mount, or refuse saying what the path is."""
    target = os.fspath(mountpoint)
    top = top_mount(target)
    if top is None:
        what = describe_path(target)
        error: type[LoadscopeError] = PathNotFound if what == "does not exist" else EmulatorError
        raise error(f"{target}: not unmounted: it {what}")
    if not is_emulator_mount(top):
        raise EmulatorError(
            f"{target}: not unmounted: it is {describe_mount(top)}, not one loadscope's"
            " emulator made"
        )
    if not unmount(target):
        raise EmulatorError(f"{target}: still mounted (busy? close files under it)")
