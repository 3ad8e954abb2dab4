"""Host-wide settings loadscope changes for a while, and always puts back: a lock and a journal.

Measuring the readahead fix means writing the mount's sysfs knobs (``read_ahead_kb``,
FUSE's ``max_background``) for the length of a trial. Three things make that safe:

- **One lock per mount** (:class:`MountLock`, an ``flock`` in loadscope's own state
  folder, never in the model's folder): a second loadscope measuring the same mount
  waits for the first, so their cold trials do not evict each other's cache, and two
  runs never save each other's raised value as "the old one".
- **A journal written before the change** (:func:`changed`): the old values, the new
  ones and the owner's pid, fsynced before the first write. The change is undone on
  every way out Python sees (return, exception, SIGINT/SIGTERM turned into exceptions).
- **The next run restores what a killed one left** (:func:`restore_stale`): SIGKILL runs
  no cleanup, so every loadscope command first looks for journals whose owner is gone
  and puts their values back, unless someone changed the setting again since (then it
  is left as it is, and the line says so).

The state folder is ``$LOADSCOPE_STATE_DIR``, else ``/run/loadscope`` for root (a tmpfs:
emptied at boot, as the sysfs values themselves are), else ``$XDG_RUNTIME_DIR/loadscope``,
else ``~/.cache/loadscope/state``.

May import: ``loadscope.base``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from loadscope.base.tempdirs import process_alive

#: How long a run waits for another loadscope measuring the same mount.
WAIT_S = 600.0


def state_dir() -> Path:
    """loadscope's own state folder (created, mode 0700): the first of the candidates this
    user can create and write (see the module's docstring), else one in the temp dir."""
    candidates = []
    if os.environ.get("LOADSCOPE_STATE_DIR"):
        candidates.append(Path(os.environ["LOADSCOPE_STATE_DIR"]))
    if os.geteuid() == 0:
        candidates.append(Path("/run/loadscope"))
    if os.environ.get("XDG_RUNTIME_DIR"):
        candidates.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "loadscope")
    with contextlib.suppress(RuntimeError, KeyError):  # no home directory to expand
        candidates.append(Path.home() / ".cache" / "loadscope" / "state")
    candidates.append(Path(tempfile.gettempdir()) / f"loadscope-state-{os.geteuid()}")
    for where in candidates:
        try:
            where.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(where, os.W_OK | os.X_OK) and where.stat().st_uid == os.geteuid():
            return where
    raise OSError("no state folder this user can write (set LOADSCOPE_STATE_DIR)")


def mount_key(device: tuple[int, int]) -> str:
    """The name a mount's lock and journal go by: its device number, ``0-44``."""
    return f"{device[0]}-{device[1]}"


class Busy(Exception):
    """Another loadscope holds the mount's lock past the wait."""


class MountLock:
    """An exclusive lock on one mount for the length of a measurement (``with``)."""

    def __init__(
        self,
        device: tuple[int, int],
        *,
        wait_s: float = WAIT_S,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.path = state_dir() / f"mount-{mount_key(device)}.lock"
        self.wait_s = wait_s
        self.on_wait = on_wait
        self.fd: int | None = None
        #: Seconds spent waiting for another run (0: the lock was free).
        self.waited_s = 0.0

    def __enter__(self) -> MountLock:
        started = time.monotonic()
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                self._take(fd, started)
                current = os.stat(self.path).st_ino
            except FileNotFoundError:
                current = None
            except BaseException:
                os.close(fd)
                raise
            if current == os.fstat(fd).st_ino:
                break
            # The holder we waited for removed the file as it let go: this lock is on a
            # name nobody finds any more; take the file that is there now.
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def _take(self, fd: int, started: float) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        if self.on_wait is not None:
            self.on_wait(
                f"another loadscope (pid {owner}) is measuring this mount: waiting for it"
                f" (up to {self.wait_s:.0f} s), so that neither evicts the other's cache"
            )
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.waited_s = time.monotonic() - started
                return
            except BlockingIOError:
                if time.monotonic() - started >= self.wait_s:
                    raise Busy(
                        f"another loadscope (pid {owner}) has been measuring this mount for"
                        f" over {self.wait_s:.0f} s; run again when it is done"
                    ) from None
                time.sleep(0.2)

    def __exit__(self, *_exc: object) -> None:
        if self.fd is not None:
            # Removed while still held (a waiter then sees its file gone and retries), so
            # that lock files do not pile up in the state folder until a reboot.
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(self.fd)  # closing releases the flock
            self.fd = None


@dataclass(frozen=True, slots=True)
class Setting:
    """One sysfs file, the value found there and the value loadscope wrote."""

    path: str
    old: str
    new: str


def _journal(key: str) -> Path:
    return state_dir() / f"settings-{key}.json"


@contextlib.contextmanager
def changed(key: str, changes: Sequence[tuple[Path, str]]) -> Iterator[list[Setting]]:
    """Write each ``(path, value)`` for the ``with`` block and put the old values back after,
    the journal written (and fsynced) before the first write. Hold the mount's
    :class:`MountLock` around it. Files that do not exist are left out."""
    saved = [Setting(str(p), p.read_text().strip(), v) for p, v in changes if p.exists()]
    journal = _journal(key)
    body = json.dumps({"pid": os.getpid(), "settings": [asdict(s) for s in saved]})
    tmp = journal.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(body)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, journal)
    done: list[Setting] = []
    try:
        for s in saved:
            Path(s.path).write_text(f"{s.new}\n")
            done.append(s)
        yield saved
    finally:
        problems = _put_back(done)
        if not problems:
            journal.unlink(missing_ok=True)
        if problems:
            raise OSError("; ".join(problems))


def _put_back(settings: Sequence[Setting]) -> list[str]:
    problems = []
    for s in reversed(settings):
        try:
            Path(s.path).write_text(f"{s.old}\n")
        except OSError as exc:
            problems.append(f"could not restore {s.path} to {s.old}: {exc.strerror or exc}")
    return problems


def restore_stale() -> list[str]:
    """Put back the settings of runs that ended without restoring them (SIGKILL, a lost
    power), skipping any whose owner still runs; what was done, one line each."""
    try:
        journals = sorted(state_dir().glob("settings-*.json"))
    except OSError:
        return []
    lines: list[str] = []
    for journal in journals:
        try:
            doc = json.loads(journal.read_text())
            pid = int(doc["pid"])
            settings = [Setting(**s) for s in doc["settings"]]
        except (OSError, ValueError, KeyError, TypeError):
            lines.append(f"{journal}: not a journal loadscope can read; left as it is")
            continue
        if pid != os.getpid() and process_alive(pid):
            continue
        for s in settings:
            try:
                now = Path(s.path).read_text().strip()
            except OSError:
                continue  # the mount is gone: its settings went with it
            if now != s.new:
                lines.append(f"{s.path} is {now} now, not the {s.new} a killed run set: left")
                continue
            try:
                Path(s.path).write_text(f"{s.old}\n")
                lines.append(f"{s.path}: put back to {s.old} (a run killed before it could)")
            except OSError as exc:
                lines.append(f"{s.path}: could not put back {s.old}: {exc.strerror or exc}")
                break
        else:
            journal.unlink(missing_ok=True)
    return lines
