"""The copy's destination folder (``loadscope.actions.copydest``): made by exactly one
copy, locked for the copy's whole life, and checked writable before any byte.

Two copies into one new DEST meet at one ``mkdir``: it decides which of them created
the folder; the lock (``flock`` on the directory) is then re-checked against the folder
now at DEST, and only the creator holding the lock may remove it again.
Owns :class:`CopyError` (every copy error's base), :class:`CopyRefused` and the
destination's own errors.
May import: ``loadscope.base``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from loadscope.base.errors import ExitCode, LoadscopeError


class CopyError(LoadscopeError):
    pass


class CopyRefused(CopyError):
    exit_code = ExitCode.USAGE


class DestinationBusy(CopyError):
    exit_code = ExitCode.USAGE


class DestinationUnwritable(CopyError):
    """DEST cannot be written (a read-only filesystem, an I/O error)."""

    exit_code = ExitCode.IO_ERROR


def _prepare_dest(dest_dir: Path) -> tuple[bool, int]:
    """DEST made (when missing), checked writable and locked against a second copy.

    Returns (created, the locked directory's fd). Every problem is one line before any
    byte is written: a path through a file, no permission, a read-only filesystem, or
    another ``loadscope copy`` writing into it (an ``flock`` on the directory itself, so
    nothing is added to DEST).

    Several copies may start at once into a DEST that does not exist: DEST is made with
    one ``mkdir`` (only the copy whose ``mkdir`` made it counts it as created; the others
    find it there), the lock is taken, and then the locked directory is checked to still
    be the one at DEST (not removed or replaced meanwhile), else it is made and locked
    again. A copy removes the DEST it created only while it holds the lock on it, so it
    never removes a DEST another copy is writing into.
    """
    for _ in range(_LOCK_TRIES):
        opened = _make_and_open(dest_dir)
        if opened is None:
            continue  # removed between its mkdir and its open (another copy's cleanup)
        created, fd = opened
        try:
            locked = _lock_and_check(dest_dir, fd)
        except BaseException:
            os.close(fd)
            raise
        if locked:
            break
        os.close(fd)  # DEST was removed (or replaced) after it was opened: again
    else:
        raise DestinationBusy(
            f"{dest_dir}: removed and made again by another process while this copy was"
            " locking it; wait for it to end (or pick another destination)"
        )
    try:
        _check_writable(dest_dir)
    except BaseException:
        if created:  # empty, ours, and still locked: no other copy is writing into it
            with contextlib.suppress(OSError):
                dest_dir.rmdir()
        os.close(fd)
        raise
    return created, fd


#: How many times DEST is made and locked again when it vanished under the lock.
_LOCK_TRIES = 20


def _make_and_open(dest_dir: Path) -> tuple[bool, int] | None:
    """DEST made if missing (created: whether this ``mkdir`` made it) and opened; None
    when it was gone again before it could be opened."""
    import errno

    from loadscope.base.errors import PermissionDenied

    if dest_dir.exists() and not dest_dir.is_dir():
        raise CopyRefused(f"{dest_dir} exists and is not a directory")
    try:
        dest_dir.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(dest_dir)
            created = True
        except FileExistsError:
            if not dest_dir.is_dir():
                raise
            created = False  # there already, or another copy made it a moment ago
        except OSError:
            if not dest_dir.is_dir():
                raise
            created = False  # e.g. EROFS for a directory that exists: writes checked later
        fd = os.open(dest_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileExistsError, NotADirectoryError):
        raise CopyRefused(f"{dest_dir}: a part of the path is a file, not a directory") from None
    except PermissionError:
        raise PermissionDenied(f"cannot create {dest_dir}: permission denied") from None
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = "a read-only filesystem" if exc.errno == errno.EROFS else exc.strerror
        raise DestinationUnwritable(f"cannot create {dest_dir}: {why}") from None
    return created, fd


def _lock_and_check(dest_dir: Path, fd: int) -> bool:
    """Lock ``fd`` (refused when another copy holds it); False when the locked directory
    is no longer the one at ``dest_dir`` (removed or replaced after it was opened)."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise DestinationBusy(
            f"{dest_dir}: another loadscope copy is writing into it; wait for it to end"
            " (or pick another destination)"
        ) from None
    held = os.fstat(fd)
    try:
        now = os.stat(dest_dir)
    except FileNotFoundError:
        return False
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)


def _check_writable(dest_dir: Path) -> None:
    import errno

    from loadscope.base.errors import PermissionDenied

    probe = dest_dir / f".loadscope-write-check-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except PermissionError:
        raise PermissionDenied(f"cannot write into {dest_dir}: permission denied") from None
    except OSError as exc:
        why = "a read-only filesystem" if exc.errno == errno.EROFS else exc.strerror
        raise DestinationUnwritable(f"cannot write into {dest_dir}: {why}") from None
