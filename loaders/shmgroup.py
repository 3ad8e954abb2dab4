"""The files one node-shared load keeps in shared memory, and their removal.

Standard library only: it is also run as a script, the job's **watcher** (``python -I -S
shmgroup.py DIR JOB LINGER``), a small process in a session of its own that removes the
job's files once none of its ranks is alive (SIGKILL, SIGTERM, the OOM killer: a rank runs
no clean-up then) or once a file has waited :data:`LINGER_S` for ranks that never came.

Names, in the shared-memory folder (``/dev/shm``), for a job ``J`` and a file ``F``:

- ``loadscope-node-J.pid.P``: process ``P`` is one of the job's ranks (liveness);
- ``loadscope-node-J.watch``: the watcher's pid;
- ``loadscope-node-J-F.data``: a control block (each chunk's state, owner and claim
  time; when the last chunk was read), changed under a lock on its first byte, then from
  the next page bound the file's bytes;
- ``loadscope-node-J-F.mapped.R``: local rank ``R`` has mapped it (the last of the
  world's ranks removes the file: its mappings stay valid).

May import: the standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path

PREFIX = "loadscope-node-"
#: Where the shared files live, unless ``LOADSCOPE_SHM_DIR`` names another folder (a
#: larger tmpfs; the tests' temporary one). Every rank of a job must see the same.
SHM_DIR = "/dev/shm"
#: How long a filled file waits for local ranks that have not mapped it yet (a late
#: rank arriving after this reads the file anew): the RAM it holds is bounded in time.
LINGER_S = 30.0
#: The watcher's poll.
POLL_S = 0.2
#: A data file with no rank of its job named beside it (a half-made group) this old is
#: removed by :func:`reap`.
ORPHAN_S = 60.0

MAGIC = b"LSNODE02"
#: magic, chunks, world, chunk bytes, file bytes, chunks done, when the last was done
HEAD = struct.Struct("<8sIIQQId")
#: How many times a rank joined the group (a u32 after the head): the ranks reading at
#: once split one process's requests in flight between them.
JOINED_AT = 48
#: Where the next claim starts looking for a free chunk (a u32).
NEXT_AT = 52
HEAD_BYTES = 64
FREE, CLAIMED, DONE = 0, 1, 2


def shm_dir() -> Path:
    """The folder the local ranks share files in (:data:`SHM_DIR`)."""
    return Path(os.environ.get("LOADSCOPE_SHM_DIR") or SHM_DIR)


def reap_stale() -> str | None:
    """:func:`reap` in :func:`shm_dir`, said in one line (None when nothing was left)."""
    removed = reap(shm_dir())
    if not removed:
        return None
    held = sum(size for _, size in removed)
    return (
        f"removed {len(removed)} file(s) ({held / 2**20:.1f} MiB) that ranks killed outright"
        f" left in {shm_dir()}"
    )


def control_bytes(chunks: int) -> int:
    """The control block's size for ``chunks`` chunks (head, states, owners, claim times),
    to a page bound: the file's bytes start there."""
    raw = HEAD_BYTES + _pad8(chunks) + _pad8(4 * chunks) + 8 * chunks
    return -(-raw // mmap.PAGESIZE) * mmap.PAGESIZE


def _pad8(n: int) -> int:
    return -(-n // 8) * 8


@contextlib.contextmanager
def locked(fd: int) -> Iterator[None]:
    """The group's lock (the data file's first byte), across processes."""
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0)
    try:
        yield
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (as ``base.tempdirs.process_alive``)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def members(where: Path, job: str) -> list[int]:
    """The pids named as the job's ranks."""
    pids = []
    for mark in where.glob(f"{PREFIX}{job}.pid.*"):
        tail = mark.name.rsplit(".", 1)[1]
        if tail.isdecimal():
            pids.append(int(tail))
    return pids


def filled_at(data: Path) -> float | None:
    """When the group's last chunk was read (``time.monotonic``), None while it is not."""
    try:
        fd = os.open(data, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = os.pread(fd, HEAD.size, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(head) != HEAD.size or head[:8] != MAGIC:
        return None
    _, chunks, _, _, _, done, when = HEAD.unpack(head)
    return float(when) if done >= chunks else None


def remove_group(data: Path, only_inode: int | None = None) -> list[tuple[Path, int]]:
    """``data`` and its marks removed under the group's lock (a rank joining it at that
    moment sees it gone and starts anew); only if it is still inode ``only_inode`` when
    given. The files removed, with their sizes."""
    removed: list[tuple[Path, int]] = []
    try:
        fd = os.open(data, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        fd = -1
    try:
        if fd >= 0:
            st = os.fstat(fd)
            if only_inode is not None and st.st_ino != only_inode:
                return removed
            with locked(fd), contextlib.suppress(OSError):
                os.unlink(data)
                removed.append((data, st.st_blocks * 512))
        stem = str(data)[: -len(".data")]
        for mark in data.parent.glob(f"{Path(stem).name}.*"):
            with contextlib.suppress(OSError):
                mark.unlink()
                removed.append((mark, 0))
    finally:
        if fd >= 0:
            os.close(fd)
    return removed


def remove_job(where: Path, job: str) -> list[tuple[Path, int]]:
    """Every file of ``job``: its groups (under their locks), marks and watcher file."""
    removed: list[tuple[Path, int]] = []
    for data in where.glob(f"{PREFIX}{job}-*.data"):
        removed += remove_group(data)
    for mark in where.glob(f"{PREFIX}{job}*"):
        with contextlib.suppress(OSError):
            size = mark.stat().st_blocks * 512
            mark.unlink()
            removed.append((mark, size))
    return removed


def reap(where: Path) -> list[tuple[Path, int]]:
    """The files of every job on this node none of whose ranks is alive, removed (and
    data files no rank is named beside, once :data:`ORPHAN_S` old); the files removed,
    with the bytes each held. Files of this layout and of loadscope's earlier one."""
    removed: list[tuple[Path, int]] = []
    jobs: dict[str, list[int]] = {}
    try:
        entries = list(where.glob(f"{PREFIX}*"))
    except OSError:
        return removed
    for entry in entries:
        stem, dot, tail = entry.name.rpartition(".")
        if dot and tail.isdecimal() and stem.endswith(".pid"):
            jobs.setdefault(stem[len(PREFIX) : -len(".pid")], []).append(int(tail))
    for job, pids in jobs.items():
        if not any(process_alive(p) for p in pids):
            removed += remove_job(where, job)
    now = time.time()
    for entry in entries:
        if not entry.name.endswith(".data") or not entry.exists():
            continue
        # "loadscope-node-J-F.data" (this layout), "loadscope-node-K.data" (the earlier)
        job = entry.name[len(PREFIX) :].split("-", 1)[0].split(".", 1)[0]
        if job in jobs:
            continue
        with contextlib.suppress(OSError):
            if now - entry.stat().st_mtime > ORPHAN_S:
                removed += remove_group(entry)
    return removed


def watch(where: Path, job: str, linger: float = LINGER_S) -> None:
    """The watcher's loop: while a rank of ``job`` is alive, remove each of its files that
    has waited ``linger`` seconds since it was filled; once none is alive, remove all of
    the job's files and return."""
    watch_file = where / f"{PREFIX}{job}.watch"
    while where.is_dir():
        pids = members(where, job)
        if not any(process_alive(p) for p in pids):
            remove_job(where, job)
            return
        now = time.monotonic()
        for data in where.glob(f"{PREFIX}{job}-*.data"):
            when = filled_at(data)
            if when is not None and now - when > linger:
                with contextlib.suppress(OSError):
                    remove_group(data, only_inode=data.stat().st_ino)
        if not watch_file.exists():
            return  # another watcher replaced this one's file and took over
        time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    where, job, linger = Path(argv[1]), argv[2], float(argv[3])
    watch_file = where / f"{PREFIX}{job}.watch"
    with contextlib.suppress(OSError):
        watch_file.write_text(str(os.getpid()))
    try:
        watch(where, job, linger)
    finally:
        with contextlib.suppress(OSError, ValueError):
            if watch_file.read_text().strip() == str(os.getpid()):
                watch_file.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
