"""Open and read user files without ever blocking on a FIFO or wandering into a device.

Checkpoint paths come from users and from index files, so they can name a FIFO
(``open`` would block forever waiting for a writer), ``/dev/zero`` through a
symlink (reads never end), or a socket. Everything that reads a user's file goes
through :func:`open_regular`, which opens with ``O_NONBLOCK`` and refuses anything
that ``fstat`` does not call a regular file before a single byte is read.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable
from typing import TypeVar

from loadscope.base.errors import LoadscopeError, NotARegularFile, ReadFailed, error_from_oserror

T = TypeVar("T")


#: ``st_mode`` tests and the names a message gives them, most common first.
_FILE_KINDS: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISREG, "regular file"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISFIFO, "FIFO (named pipe)"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISLNK, "symbolic link"),
)


def file_kind(mode: int) -> str:
    """A readable name for the file type in an ``st_mode``."""
    return next((name for test, name in _FILE_KINDS if test(mode)), "special file")


def _refuse(exc: OSError, path: str | os.PathLike[str]) -> LoadscopeError:
    if exc.errno == errno.ELOOP:
        return NotARegularFile("is a symbolic link loop", path=path)
    return error_from_oserror(exc, path)


def _require_regular(st: os.stat_result, path: str | os.PathLike[str]) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFile(
            f"is a {file_kind(st.st_mode)}, not a regular file; refusing to read it", path=path
        )


def stat_regular(path: str | os.PathLike[str]) -> os.stat_result:
    """``os.stat`` (following symlinks) that insists on a regular file."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _refuse(exc, path) from None
    _require_regular(st, path)
    return st


def open_regular(path: str | os.PathLike[str]) -> int:
    """Open ``path`` read-only and return the fd, refusing non-regular files without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _refuse(exc, path) from None
    try:
        _require_regular(os.fstat(fd), path)
        # O_NONBLOCK means nothing for regular files, but clear it so nobody is surprised.
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def pread_exact(fd: int, size: int, offset: int, *, path: str | os.PathLike[str]) -> bytes:
    """Read exactly ``size`` bytes at ``offset``; a short read means the file shrank under us."""
    chunks: list[bytes] = []
    remaining = size
    while remaining > 0:
        try:
            chunk = os.pread(fd, remaining, offset)
        except OSError as exc:
            raise ReadFailed(
                f"read of {remaining} bytes at offset {offset} failed: {exc.strerror}", path=path
            ) from None
        if not chunk:
            raise ReadFailed(
                f"file ended at offset {offset}, {remaining} bytes before the expected end",
                path=path,
            )
        chunks.append(chunk)
        remaining -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def pread_exactly(fd: int, view: memoryview, offset: int, path: str) -> None:
    """Fill ``view`` from ``offset``: a short read continues where it stopped, so a storage
    error is reported with its own errno and the offset it happened at; the file ending
    early is said as such ("changed?"). Raises ReadFailed naming ``path`` first."""
    done = 0
    while done < len(view):
        at = offset + done
        try:
            got = os.preadv(fd, [view[done:]], at)
        except OSError as exc:
            raise ReadFailed(f"{exc.strerror} at offset {at}", path=path) from None
        if got == 0:
            raise ReadFailed(
                f"ends at offset {at}, short of the {offset + len(view)} bytes it had (changed?)",
                path=path,
            )
        done += got


# -- reads the storage may never answer --------------------------------------------------------

#: How long a read may go unanswered before it counts as a stall (LOADSCOPE_STALL_TIMEOUT).
STALL_TIMEOUT_S = 60.0
#: Reads given up on, with the thread that may still wait for each.
_stuck: list[tuple[str, threading.Thread]] = []


def stall_timeout_s() -> float:
    """The stall timeout: ``LOADSCOPE_STALL_TIMEOUT`` seconds, else 60."""
    raw = os.environ.get("LOADSCOPE_STALL_TIMEOUT", "")
    try:
        value = float(raw)
    except ValueError:
        return STALL_TIMEOUT_S
    return value if value > 0 else STALL_TIMEOUT_S


class StorageStalled(ReadFailed):
    """A read got no answer in time: the storage (a FUSE daemon, an NFS server) stalled."""


def bounded(fn: Callable[[], T], timeout_s: float, where: Callable[[], str]) -> T:
    """``fn()`` in a helper thread, given up on after ``timeout_s`` with :class:`StorageStalled`.

    A read a stalled FUSE or hard-mounted NFS server never answers cannot be
    interrupted, not even by SIGKILL: the thread is left where it is (its own
    descriptors stay open until it returns) and the caller goes on. ``where()``
    says what was being read, for the message; :func:`stuck_reads` lists them.
    """
    out: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001  (re-raised in the caller)
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True, name="bounded-read")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        what = where()
        _stuck.append((what, thread))
        raise StorageStalled(
            f"no answer within {timeout_s:g} s while reading {what}: the storage stopped answering"
        )
    if errors:
        raise errors[0]
    return out[0]


def note_stuck(what: str, threads: list[threading.Thread]) -> None:
    """Record a read given up on elsewhere (warm, copy) for :func:`stuck_reads`."""
    _stuck.extend((what, t) for t in threads if t.is_alive())


def stuck_reads() -> list[str]:
    """Reads given up on whose threads still wait in the kernel (not those that returned)."""
    _stuck[:] = [(what, t) for what, t in _stuck if t.is_alive()]
    return list(dict.fromkeys(what for what, _ in _stuck))
