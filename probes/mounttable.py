"""The mount table: ``/proc/self/mountinfo`` parsed, and the mount that serves a path.

Owns reading and decoding the mount table (see proc(5)): :class:`Mount`, one line with the
kernel's octal escapes decoded; :func:`read_mountinfo` and the parsers under it, which
skip a malformed line rather than lose the table (:func:`parse_mountinfo_line` says why
it refused one); :func:`mount_of`, which finds the mount under a path the way
``findmnt -T`` does; and :func:`block_device_of`, the real disk under a mount. What kind
of storage a mount is belongs to :mod:`loadscope.probes.mounts`.

May import: ``loadscope.probes.result``.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat as stat_module
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from loadscope.probes.result import Unavailable

MOUNTINFO_PATH = "/proc/self/mountinfo"


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
