"""Loading for a node, not a process: local ranks read a cold file from storage once.

Eight ranks on a node that each call ``loadscope.load_file`` on a cold file used to read
it from storage eight times: its O_DIRECT reads leave no page cache behind. Here the
local ranks of one job (``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` under torchrun, SLURM's
``SLURM_LOCALID``/``SLURM_NTASKS_PER_NODE``, or an explicit ``(rank, world)``) split the
file into disjoint ranges, each reads its range with large O_DIRECT requests into one
shared-memory file, and every rank maps that file copy-on-write: the storage serves the
model once, the node's RAM holds one copy of it instead of N, and one rank's in-place
update never reaches another's tensors.

Why this design, by measurement (the emulated 5 ms disk, readahead 128 KiB, 12 background
requests): every way of filling the *page cache* through FUSE (8 to 64 threads of 1-16
MiB reads, ``POSIX_FADV_WILLNEED``, ``readahead(2)``, ``MADV_POPULATE_READ``) stopped at
~180-214 MB/s, while direct reads of the same file reached ~1.4 GB/s. Ranks that fill the
page cache and map it, or one rank that reads while the others wait and map, pay that
limit; direct reads into shared memory do not, and split the reads among the ranks.

It never hangs and never shares by surprise (every step has a deadline, and each way out
is the rank loading the file on its own, saying why):

- **join**: each rank announces itself; if not every local rank has within
  :data:`JOIN_S` (a rank that never calls, ranks loading different files: tensor- or
  pipeline-parallel shards, rank-0-only loading), each loads alone;
- **room**: the shared-memory folder (``/dev/shm``, often 64 MiB in a container) must hold
  the file, checked before anything is written;
- **read**: a range a rank has not finished within its deadline is read by the others;
- **cleanup**: the last rank to map the file unlinks it (its mappings stay valid); files
  left by a job whose every rank died are removed by the next call on the node.

It is off inside loadscope's own trial workers (``LOADSCOPE_NODE_SHARE=0``: a ``srun``
step sets SLURM's local ids for every process) and for a single process.

May import: ``loadscope.loaders.strategies.parallel``, ``loadscope.loaders.buffers``,
``loadscope.loaders.safetensors_format``, ``loadscope.base``.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadscope.base.tempdirs import process_alive
from loadscope.loaders.buffers import tensors_from_buffer
from loadscope.loaders.safetensors_format import SafetensorsHeader

if TYPE_CHECKING:
    import torch

#: How long ranks wait for every local rank to join one shared load.
JOIN_S = 10.0
#: The least a rank waits for another's range before reading it itself (more for a big
#: range: its size at 20 MB/s).
READ_WAIT_S = 30.0
#: Where the shared file lives (tests point it elsewhere).
SHM_DIR = "/dev/shm"
PREFIX = "loadscope-node-"
#: Range boundaries fall on this: O_DIRECT requests stay aligned.
ALIGN = 64 << 10
#: madvise(2)'s MADV_POPULATE_READ (Linux 5.14; Python's mmap module has no name for it).
MADV_POPULATE_READ = 22


@dataclass(frozen=True, slots=True)
class LocalRanks:
    """This process's place among the local ranks of one job."""

    rank: int
    world: int
    #: What tells one job's ranks from another's on the same node.
    job: str


def local_ranks(
    explicit: tuple[int, int] | None = None, env: Mapping[str, str] | None = None
) -> LocalRanks | None:
    """The local ranks this process loads with, or None (one process, or sharing off)."""
    env = os.environ if env is None else env
    if env.get("LOADSCOPE_NODE_SHARE", "") == "0":
        return None
    job = (
        env.get("TORCHELASTIC_RUN_ID")
        or ":".join(filter(None, (env.get("SLURM_JOB_ID"), env.get("SLURM_STEP_ID"))))
        or ":".join(filter(None, (env.get("MASTER_ADDR"), env.get("MASTER_PORT"))))
        or f"ppid-{os.getppid()}"
    )
    if explicit is not None:
        rank, world = explicit
    elif "LOCAL_RANK" in env and "LOCAL_WORLD_SIZE" in env:
        rank, world = _int(env["LOCAL_RANK"]), _int(env["LOCAL_WORLD_SIZE"])
    elif "SLURM_LOCALID" in env:
        rank = _int(env["SLURM_LOCALID"])
        # "4" or "4(x2)": tasks on each of the step's nodes.
        per = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_STEP_TASKS_PER_NODE") or ""
        world = _int(re.split(r"[(,]", per)[0]) if per else -1
    else:
        return None
    if world < 2 or not 0 <= rank < world:
        return None
    return LocalRanks(rank, world, job)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


class NotShared(Exception):
    """Why this load was not shared: the rank loads the file alone."""


def shared_tensors(
    path: str,
    header: SafetensorsHeader,
    ranks: LocalRanks,
    *,
    threads: int,
    block_bytes: int,
    direct: bool,
    notes: dict[str, Any] | None = None,
) -> dict[str, torch.Tensor]:
    """``path``'s tensors, read once for the node into shared memory and mapped
    copy-on-write; raises :class:`NotShared` saying why the rank must load alone."""
    private = shared_buffer(
        path, ranks, threads=threads, block_bytes=block_bytes, direct=direct, notes=notes
    )
    return dict(tensors_from_buffer(private, 0, header, list(header.tensors)))


def shared_buffer(
    path: str,
    ranks: LocalRanks,
    *,
    threads: int,
    block_bytes: int,
    direct: bool,
    notes: dict[str, Any] | None = None,
) -> mmap.mmap:
    """``path``'s bytes, read once for the node (this rank its range) into shared memory,
    as this rank's copy-on-write mapping; raises :class:`NotShared` saying why not."""
    reap_stale()
    st = os.stat(path)
    size = st.st_size
    key = hashlib.sha1(
        f"{ranks.job}\0{st.st_dev}\0{st.st_ino}\0{size}\0{st.st_mtime_ns}\0{ranks.world}".encode()
    ).hexdigest()[:20]
    base = Path(SHM_DIR) / f"{PREFIX}{key}"
    data = Path(f"{base}.data")
    started = time.monotonic()
    _mark(base, "join", ranks.rank)
    _mark(base, "pid", os.getpid())
    if not _wait_for(base, "join", ranks.world, JOIN_S):
        joined = _count(base, "join")
        _leave(base, data, ranks)
        raise NotShared(
            f"{joined} of {ranks.world} local ranks asked for this file within {JOIN_S:g} s"
            " (ranks loading different files, or one that never calls): loaded alone"
        )
    room = _room(data, size)
    if room is not None:
        # Every rank that joined finds the same: the join marks stay until the last of
        # them has seen it (removing them now would leave a slower rank waiting for a
        # join that already happened).
        _mark(base, "left", ranks.rank)
        if _count(base, "left") >= ranks.world:
            _leave(base, data, ranks, everyone=True)
        raise NotShared(room)
    fd = os.open(data, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
        lo, hi = _share(size, ranks.rank, ranks.world)
        _fill(fd, path, size, [(lo, hi)], threads=threads, block_bytes=block_bytes, direct=direct)
        _mark(base, "done", ranks.rank)
        wait = max(READ_WAIT_S, (size / ranks.world) / 20e6)
        if not _wait_for(base, "done", ranks.world, wait):
            # A rank that died or stalled: its ranges are read here instead.
            missing = [
                _share(size, r, ranks.world)
                for r in range(ranks.world)
                if not Path(f"{base}.done.{r}").exists()
            ]
            _fill(fd, path, size, missing, threads=threads, block_bytes=block_bytes, direct=direct)
            if notes is not None:
                notes["node_share_missing_ranges"] = len(missing)
        private = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        # The page tables filled in one call, read-only (no copy is made until a rank
        # writes): a fault per 4 KiB page in every rank cost more than the reads here.
        with contextlib.suppress(OSError, ValueError):
            private.madvise(MADV_POPULATE_READ)
    finally:
        os.close(fd)
    _mark(base, "mapped", ranks.rank)
    if _count(base, "mapped") >= ranks.world:
        _leave(base, data, ranks, everyone=True)
    if notes is not None:
        notes["node_share"] = {
            "rank": ranks.rank,
            "world": ranks.world,
            "read_bytes": _share(size, ranks.rank, ranks.world)[1]
            - _share(size, ranks.rank, ranks.world)[0],
            "seconds": time.monotonic() - started,
        }
    return private


def _share(size: int, rank: int, world: int) -> tuple[int, int]:
    """Rank ``rank``'s byte range of a ``size``-byte file: equal parts on ALIGN bounds."""
    per = -(-size // world)
    per = -(-per // ALIGN) * ALIGN
    return min(size, rank * per), min(size, (rank + 1) * per)


def _fill(
    fd: int,
    path: str,
    size: int,
    ranges: list[tuple[int, int]],
    *,
    threads: int,
    block_bytes: int,
    direct: bool,
) -> None:
    """The byte ``ranges`` of ``path`` written into the shared file at the same offsets."""
    from loadscope.loaders.strategies.parallel import parallel_read

    ranges = [(a, b) for a, b in ranges if b > a]
    if not ranges:
        return
    shared = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    try:
        view = memoryview(shared)
        for a, b in ranges:
            parallel_read(
                path,
                view[a:b],
                [(a, b)],
                threads=threads,
                block_bytes=block_bytes,
                flags=os.O_DIRECT if direct else 0,
                align=mmap.PAGESIZE if direct else 1,
            )
        view.release()
    finally:
        shared.close()


def _room(data: Path, size: int) -> str | None:
    """Why the shared-memory folder cannot hold the file (None: it can)."""
    try:
        have = data.stat().st_size if data.exists() else 0
        fs = os.statvfs(data.parent)
    except OSError as exc:
        return f"{data.parent}: {exc.strerror or exc}: loaded alone"
    free = fs.f_bavail * fs.f_frsize
    if size - have > free:
        return (
            f"{data.parent} has {free >> 20} MiB free, the file needs {size >> 20} MiB"
            " (a container's /dev/shm is often 64 MiB: --shm-size): loaded alone"
        )
    return None


def _mark(base: Path, what: str, who: int) -> None:
    with contextlib.suppress(FileExistsError):
        os.close(os.open(f"{base}.{what}.{who}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def _count(base: Path, what: str) -> int:
    return len(list(base.parent.glob(f"{base.name}.{what}.*")))


def _wait_for(base: Path, what: str, world: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _count(base, what) < world:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _leave(base: Path, data: Path, ranks: LocalRanks, everyone: bool = False) -> None:
    """This rank's marks removed (all of the file's, and the file, with ``everyone``)."""
    marks = (
        base.parent.glob(f"{base.name}.*")
        if everyone
        else base.parent.glob(f"{base.name}.*.{ranks.rank}")
    )
    for mark in marks:
        if mark != data or everyone:
            with contextlib.suppress(OSError):
                mark.unlink()
    with contextlib.suppress(OSError):
        Path(f"{base}.pid.{os.getpid()}").unlink()
    if everyone:
        with contextlib.suppress(OSError):
            data.unlink()


def reap_stale() -> list[Path]:
    """Remove the shared files of loads whose every rank is gone (killed outright)."""
    removed: list[Path] = []
    with contextlib.suppress(OSError):
        for data in Path(SHM_DIR).glob(f"{PREFIX}*.data"):
            base = Path(str(data)[: -len(".data")])
            pids = [
                int(p.suffix[1:])
                for p in base.parent.glob(f"{base.name}.pid.*")
                if p.suffix[1:].isdigit()
            ]
            if any(process_alive(pid) for pid in pids):
                continue
            for mark in base.parent.glob(f"{base.name}.*"):
                with contextlib.suppress(OSError):
                    mark.unlink()
                    removed.append(mark)
    return removed
