"""Loading for a node, not a process: local ranks read a cold file from storage once.

Eight ranks on a node that each call ``loadscope.load_file`` on a cold file used to read
it from storage eight times: its O_DIRECT reads leave no page cache behind. Here the
local ranks of one job (``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` under torchrun, SLURM's
``SLURM_LOCALID``/``SLURM_NTASKS_PER_NODE``, or an explicit ``(rank, world)``) read a
cold file into one shared-memory file, chunk by chunk, and every rank maps that file
copy-on-write: the storage serves the model once, the node's RAM holds one copy of it
instead of N, and one rank's in-place update never reaches another's tensors.

**No rank waits for another to arrive.** The first rank to ask for a file starts reading
it at once; a rank that asks later claims the chunks nobody has claimed yet (a lock on
the control block at the head of the shared file) and maps the ones already read. So
every pattern of calls costs what loading alone costs, or less: all ranks (the reads
split among them), rank 0 alone (it reads every chunk itself), ranks loading different
shards (one group per file, each read by the ranks that want it), ranks seconds apart,
a rank that never calls. An earlier design made every local rank join first and fell
back after 10 s: rank-0-only loading waited 10 s per file (40 s for a 4-shard model
that loads in 0.27 s alone). A chunk claimed by a rank that died, or that has not been
read within :data:`STALL_S` (more for a big chunk: its size at 20 MB/s), is read by
another rank; each rank counts the bytes its own reads returned.

Why shared memory and direct reads, by measurement (the emulated 5 ms disk, readahead 128
KiB, 12 background requests): every way of filling the *page cache* through FUSE (8 to
64 threads of 1-16 MiB reads, ``POSIX_FADV_WILLNEED``, ``readahead(2)``,
``MADV_POPULATE_READ``) stopped at ~180-214 MB/s, while direct reads of the same file
reached ~1.4 GB/s.

Nothing outlives the job (``loaders/shmgroup.py``): the last of the world's ranks to map
a file removes it (the mappings stay valid); a file that waited :data:`LINGER_S` after it
was filled for ranks that never came is removed by the job's watcher, a small process
that also removes every file of the job once none of its ranks is alive (SIGKILL,
SIGTERM); and any loadscope call or command on the node removes what a job whose ranks
are all gone left (:func:`reap_stale`). The room is checked, and reserved, before a byte
is written: a ``/dev/shm`` too small for the file (a container's is often 64 MiB) or
unusable means the rank loads alone and says why.

It is off inside loadscope's own trial workers (``LOADSCOPE_NODE_SHARE=0``: a ``srun``
step sets SLURM's local ids for every process) and for a single process.

May import: ``loadscope.loaders.localranks``, ``loadscope.loaders.shmgroup``,
``loadscope.loaders.autoread`` (auto's
settings), ``loadscope.loaders.parallelread``, ``loadscope.loaders.buffers``,
``loadscope.loaders.safetensors_format``, ``loadscope.base``.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import logging
import mmap
import os
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadscope.loaders import autoread, shmgroup
from loadscope.loaders.buffers import tensors_from_buffer
from loadscope.loaders.localranks import LocalRanks as LocalRanks  # noqa: PLC0414  (re-exported)
from loadscope.loaders.localranks import local_ranks as local_ranks  # noqa: PLC0414
from loadscope.loaders.parallelread import read_into
from loadscope.loaders.safetensors_format import SafetensorsHeader
from loadscope.loaders.shmgroup import CLAIMED, DONE, FREE, HEAD, MAGIC, PREFIX, locked

_FREE, _CLAIMED = bytes([FREE]), bytes([CLAIMED])
#: What a read into the shared file returns when the folder has filled up meanwhile.
_FULL = (errno.EFAULT, errno.ENOSPC, errno.ENOMEM)

if TYPE_CHECKING:
    import torch

log = logging.getLogger("loadscope")

#: Chunk bounds fall on this: O_DIRECT requests stay aligned.
ALIGN = 64 << 10
#: The least a rank waits on a chunk another live rank claimed before reading it itself.
STALL_S = 5.0
#: A file under this is read alone: sharing it saves less than making the shared file.
MIN_SHARED_BYTES = 64 << 10
#: See ``loaders/shmgroup.py``.
LINGER_S = shmgroup.LINGER_S
#: madvise(2)'s MADV_POPULATE_READ (Linux 5.14; Python's mmap module has no name for it).
MADV_POPULATE_READ = 22


class NotShared(Exception):
    """Why this load was not shared: the rank loads the file alone."""


@dataclass(frozen=True, slots=True)
class Shared:
    """One rank's side of a node-shared file."""

    #: The file's bytes, this rank's copy-on-write mapping.
    buffer: mmap.mmap
    #: What this rank's own reads returned (its chunks, and any it took over).
    read_bytes: int
    size_bytes: int
    #: Chunks this rank read that another rank had claimed (dead or stalled).
    taken_over: int
    seconds: float


def shared_tensors(
    path: str,
    header: SafetensorsHeader,
    ranks: LocalRanks,
    *,
    threads: int,
    block_bytes: int,
    direct: bool,
) -> tuple[dict[str, torch.Tensor], Shared]:
    """``path``'s tensors, read once for the node into shared memory and mapped
    copy-on-write; raises :class:`NotShared` saying why the rank must load alone."""
    share = shared_buffer(path, ranks, threads=threads, block_bytes=block_bytes, direct=direct)
    return dict(tensors_from_buffer(share.buffer, 0, header, list(header.tensors))), share


def shared_buffer(
    path: str, ranks: LocalRanks, *, threads: int, block_bytes: int, direct: bool
) -> Shared:
    """``path``'s bytes, read once for the node (this rank the chunks it claims) into
    shared memory, as this rank's copy-on-write mapping; raises :class:`NotShared`."""
    started = time.monotonic()
    reap_stale()
    st = os.stat(path)
    size = st.st_size
    if size < MIN_SHARED_BYTES:
        raise NotShared(f"{size} bytes: too small to be worth sharing")
    job = _digest(ranks.job)
    key = _digest(f"{st.st_dev}\0{st.st_ino}\0{size}\0{st.st_mtime_ns}\0{ranks.world}")
    where = shmgroup.shm_dir()
    data = where / f"{PREFIX}{job}-{key}.data"
    chunk = chunk_bytes(block_bytes)
    group = _Group.join(data, where, job, size, chunk, ranks.world)
    try:
        read, taken = group.fill(path, threads=threads, block_bytes=block_bytes, direct=direct)
        private = group.map_private()
    finally:
        group.close()
    _mark(data, "mapped", ranks.rank)
    if _count(data, "mapped") >= ranks.world:
        shmgroup.remove_group(data, only_inode=group.inode)
    return Shared(private, read, size, taken, time.monotonic() - started)


def settings(
    path: str, knobs: Mapping[str, Any], hints: Mapping[str, Any]
) -> tuple[int, int, bool]:
    """The reads a node-shared load makes: ``auto``'s (threads, bytes per request,
    O_DIRECT), from the knobs, else the hints, else its defaults, as ``load_file`` alone."""
    read = autoread.settings(knobs, hints)
    return read.threads, read.block_bytes, read.direct_for(path)


def chunk_bytes(block_bytes: int) -> int:
    """The chunk ranks claim: one request of ``block_bytes`` (on O_DIRECT's bounds), so
    that the last requests of a file spread over every thread of every rank. (Chunks of
    4 requests read in turn left a 64 MiB file's second round to 4 of 12 threads: 1.5x
    slower than one process for 4 ranks on the emulated disk.)"""
    return max(ALIGN, -(-block_bytes // ALIGN) * ALIGN)


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


class _Group:
    """One file's shared copy: its data file held open, the control block mapped."""

    def __init__(self, fd: int, data: Path, size: int) -> None:
        self.fd, self.data, self.size = fd, data, size
        self.inode = os.fstat(fd).st_ino
        head = HEAD.unpack(os.pread(fd, HEAD.size, 0))
        self.chunks, self.chunk = int(head[1]), int(head[3])
        self.offset = shmgroup.control_bytes(self.chunks)
        self.ctl = mmap.mmap(fd, self.offset, flags=mmap.MAP_SHARED)
        self.states = shmgroup.HEAD_BYTES
        self.owners = self.states + -(-self.chunks // 8) * 8
        self.claims = self.owners + -(-4 * self.chunks // 8) * 8
        self.lock = threading.Lock()  # fcntl's locks are a process's: threads need one too
        self.pid = os.getpid()
        self._peeked = 0.0

    @classmethod
    def join(cls, data: Path, where: Path, job: str, size: int, chunk: int, world: int) -> _Group:
        """The group for ``data``, made here when no rank has made it (its room reserved)."""
        for _ in range(20):
            try:
                fd = os.open(data, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise NotShared(f"{where}: {exc.strerror or exc}") from None
            made = gone = False
            try:
                with locked(fd):
                    gone = os.fstat(fd).st_nlink == 0  # removed as this rank opened it
                    if not gone:
                        made = _enter(fd, data, where, job, size, chunk, world)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.close(fd)
                raise
            if gone:  # unlocked first: the lock lives on the descriptor
                os.close(fd)
                continue
            if made:
                _start_watcher(where, job)
            _leave_at_exit(where, job)
            return cls(fd, data, size)
        raise NotShared(f"{data}: removed and made again 20 times while joining it")

    def close(self) -> None:
        with contextlib.suppress(BufferError, ValueError):
            self.ctl.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def _claim(self) -> int | None:
        """The next chunk for this rank to read: a free one (``i``), else one whose owner
        died or stalled (``-(i + 1)``); None when every chunk is read or being read."""
        with self.lock, locked(self.fd):
            i, taken = self._free(), False
            if i < 0:
                stalled = self._stalled()
                if stalled is None:
                    return None
                i, taken = stalled, True
            else:
                struct.pack_into("<I", self.ctl, shmgroup.NEXT_AT, i + 1)
            self.ctl[self.states + i] = CLAIMED
            struct.pack_into("<I", self.ctl, self.owners + 4 * i, self.pid)
            struct.pack_into("<d", self.ctl, self.claims + 8 * i, time.monotonic())
            return -(i + 1) if taken else i

    def _free(self) -> int:
        """A free chunk's index, from where the last claim left off (-1: none)."""
        (hint,) = struct.unpack_from("<I", self.ctl, shmgroup.NEXT_AT)
        start, end = self.states, self.states + self.chunks
        hint = min(hint, self.chunks)
        at = self.ctl.find(_FREE, start + hint, end)
        if at < 0 and hint:
            at = self.ctl.find(_FREE, start, start + hint)
        return at - start if at >= 0 else -1

    def _stalled(self) -> int | None:
        """A chunk another rank claimed and died on, or has sat on past the stall time."""
        now = time.monotonic()
        wait = max(STALL_S, self.chunk / 20e6)
        at, end = self.states, self.states + self.chunks
        while (at := self.ctl.find(_CLAIMED, at, end)) >= 0:
            i = at - self.states
            at += 1
            (owner,) = struct.unpack_from("<I", self.ctl, self.owners + 4 * i)
            (since,) = struct.unpack_from("<d", self.ctl, self.claims + 8 * i)
            if owner == self.pid:
                continue
            if now - since > wait or not shmgroup.process_alive(owner):
                return i
        return None

    def _set(self, i: int, state: int) -> None:
        with self.lock, locked(self.fd):
            if state == DONE and self.ctl[self.states + i] != DONE:
                _, chunks, world, chunk, size, done, _ = HEAD.unpack_from(self.ctl, 0)
                done += 1
                when = time.monotonic() if done >= chunks else 0.0
                HEAD.pack_into(self.ctl, 0, MAGIC, chunks, world, chunk, size, done, when)
            elif state == FREE:
                if self.ctl[self.states + i] == DONE:
                    return  # another rank took it over and read it meanwhile
                struct.pack_into("<I", self.ctl, shmgroup.NEXT_AT, i)  # found first
            self.ctl[self.states + i] = state

    def done(self) -> bool:
        _, chunks, _, _, _, done, _ = HEAD.unpack_from(self.ctl, 0)
        return bool(done >= chunks)

    def fill(self, path: str, *, threads: int, block_bytes: int, direct: bool) -> tuple[int, int]:
        """Read the chunks this rank can claim until every chunk is read; (bytes this
        rank's reads returned, chunks it took over from another rank)."""
        shared = self._map(mmap.MAP_SHARED)
        view = memoryview(shared)
        counted = [0, 0]  # bytes read, chunks taken over
        errors: list[BaseException] = []
        align = mmap.PAGESIZE if direct else 1

        def worker(k: int) -> None:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_DIRECT if direct else 0))
            plain = os.open(path, os.O_RDONLY | os.O_CLOEXEC) if direct else fd
            try:
                while not errors and k < self._quota(threads):
                    got = self._claim()
                    if got is None:
                        return
                    i = got if got >= 0 else -got - 1
                    a, b = i * self.chunk, min(self.size, (i + 1) * self.chunk)
                    n = 0
                    try:
                        for off in range(a, b, block_bytes):
                            n += read_into(
                                fd, plain, view[off : min(b, off + block_bytes)], off, align
                            )
                    except BaseException as exc:
                        self._set(i, FREE)  # for another rank to read
                        if isinstance(exc, OSError) and exc.errno in _FULL:
                            raise NotShared(_no_room(self.data.parent, self.size)) from None
                        raise
                    with self.lock:
                        counted[0] += n
                        counted[1] += got < 0
                    self._set(i, DONE)
            except BaseException as exc:  # noqa: BLE001  (re-raised in the caller below)
                errors.append(exc)
            finally:
                os.close(fd)
                if plain != fd:
                    os.close(plain)

        try:
            while not errors:
                pool = [
                    threading.Thread(target=worker, args=(k,), daemon=True)
                    for k in range(self._quota(threads))
                ]
                for t in pool:
                    t.start()
                for t in pool:
                    t.join()
                # Every chunk claimed: wait for the other ranks' (taking over a dead or
                # stalled rank's, by the next round of workers).
                while not errors and not self.done():
                    if self._peek_claimable():
                        break
                    time.sleep(0.005)
                else:
                    break
            if errors:
                raise errors[0]
        finally:
            view.release()
            shared.close()
        return counted[0], counted[1]

    def _quota(self, threads: int) -> int:
        """This rank's reader threads now: its share of ``threads`` among the ranks that
        joined (4 ranks on 2 cores, each with one process's 12 requests in flight, were
        slower than 12 in all; a rank alone keeps all 12)."""
        (joined,) = struct.unpack_from("<I", self.ctl, shmgroup.JOINED_AT)
        return max(1, -(-max(1, threads) // max(1, int(joined))))

    def _peek_claimable(self) -> bool:
        if self._free() >= 0:
            return True
        # Liveness checks cost syscalls: a claimed chunk is looked at every 50 ms.
        if time.monotonic() - self._peeked < 0.05:
            return False
        self._peeked = time.monotonic()
        return self._stalled() is not None

    def _map(self, flags: int) -> mmap.mmap:
        """The file's bytes (after the control block), shared to fill or private to use."""
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        return mmap.mmap(self.fd, self.size, flags=flags, prot=prot, offset=self.offset)

    def map_private(self) -> mmap.mmap:
        private = self._map(mmap.MAP_PRIVATE)
        # The page tables filled in one call, read-only (no copy is made until a rank
        # writes): a fault per 4 KiB page in every rank cost more than the reads here.
        with contextlib.suppress(OSError, ValueError):
            private.madvise(MADV_POPULATE_READ)
        return private


def _enter(fd: int, data: Path, where: Path, job: str, size: int, chunk: int, world: int) -> bool:
    """Under the group's lock: make the group when the file is new (True), else check it
    is one; count this rank in and name its process among the job's."""
    chunks = -(-size // chunk)
    total = shmgroup.control_bytes(chunks) + size
    made = os.fstat(fd).st_size == 0
    if made:
        _reserve(fd, data, where, total, size)
        os.pwrite(fd, HEAD.pack(MAGIC, chunks, world, chunk, size, 0, 0.0), 0)
    elif os.pread(fd, 8, 0) != MAGIC or os.fstat(fd).st_size != total:
        raise NotShared(f"{data}: not a shared file of this loadscope")
    (joined,) = struct.unpack("<I", os.pread(fd, 4, shmgroup.JOINED_AT))
    os.pwrite(fd, struct.pack("<I", joined + 1), shmgroup.JOINED_AT)
    _mark(where / f"{PREFIX}{job}", "pid", os.getpid())
    return made


def _reserve(fd: int, data: Path, where: Path, total: int, size: int) -> None:
    """The folder's room checked and the control block allocated; the file's pages are
    allocated by the reads that land in them, in parallel (allocating them all first,
    under the lock, cost 60 ms of 310 for 256 MiB). A folder that fills up meanwhile
    makes those reads fail with EFAULT, which :meth:`_Group.fill` turns into
    :class:`NotShared` (never a store through the mapping: no SIGBUS)."""
    try:
        fs = os.statvfs(where)
        if total > fs.f_bavail * fs.f_frsize:
            raise OSError(errno.ENOSPC, "No space left on device")
        os.ftruncate(fd, total)
        os.posix_fallocate(fd, 0, total - size)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(data)
        if exc.errno == errno.ENOSPC:
            raise NotShared(_no_room(where, size)) from None
        raise NotShared(f"{where}: {exc.strerror or exc}") from None


def _no_room(where: Path, size: int) -> str:
    free = ""
    with contextlib.suppress(OSError):
        fs = os.statvfs(where)
        free = f" has {(fs.f_bavail * fs.f_frsize) >> 20} MiB free,"
    return (
        f"{where}{free} the file needs {size >> 20} MiB"
        " (a container's /dev/shm is often 64 MiB: --shm-size)"
    )


def _start_watcher(where: Path, job: str) -> None:
    """The job's watcher (``loaders/shmgroup.py``), unless a live one is there."""
    watch_file = where / f"{PREFIX}{job}.watch"
    with contextlib.suppress(OSError, ValueError):
        if shmgroup.process_alive(int(watch_file.read_text().strip())):
            return
    try:
        subprocess.Popen(
            [sys.executable, "-I", "-S", shmgroup.__file__, str(where), job, str(LINGER_S)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        log.warning(
            "could not start the watcher of %s's shared files (%s): files of"
            " ranks killed outright stay until the next loadscope call on this node",
            where,
            exc.strerror or exc,
        )


#: The jobs this process has joined (their files are looked at once more as it exits).
_joined: set[tuple[Path, str]] = set()


def _leave_at_exit(where: Path, job: str) -> None:
    """At this process's normal exit: its mark removed, and every file of the job when no
    other rank of it is alive (a watcher killed with the job's processes, as a batch
    system's step end does, leaves nothing behind then either)."""
    if not _joined:
        atexit.register(_leave_jobs)
    _joined.add((where, job))


def _leave_jobs() -> None:
    me = os.getpid()
    for where, job in _joined:
        others = [p for p in shmgroup.members(where, job) if p != me]
        if any(shmgroup.process_alive(p) for p in others):
            with contextlib.suppress(OSError):
                (where / f"{PREFIX}{job}.pid.{me}").unlink()
        else:
            shmgroup.remove_job(where, job)


def _mark(base: Path, what: str, who: int) -> None:
    with contextlib.suppress(FileExistsError):
        os.close(
            os.open(f"{_stem(base)}.{what}.{who}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        )


def _stem(base: Path) -> str:
    text = str(base)
    return text[: -len(".data")] if text.endswith(".data") else text


def _count(base: Path, what: str) -> int:
    stem = Path(_stem(base))
    return len(list(stem.parent.glob(f"{stem.name}.{what}.*")))


def reap_stale() -> list[tuple[Path, int]]:
    """Remove the shared files of jobs whose every rank is gone (killed outright); the
    files removed, with the bytes each held."""
    return shmgroup.reap(shmgroup.shm_dir())
