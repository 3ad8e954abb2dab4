"""The files of a node-shared load: chunks claimed, counted and taken over, and removed
once their job is gone (``loaders/nodeshare.py``, ``loaders/shmgroup.py``)."""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadscope.loaders import nodeshare, shmgroup
from loadscope.loaders.shmgroup import CLAIMED, DONE, PREFIX


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "shm"
    where.mkdir()
    monkeypatch.setenv("LOADSCOPE_SHM_DIR", str(where))
    return where


@pytest.fixture
def blob(tmp_path: Path) -> Path:
    path = tmp_path / "blob.bin"
    path.write_bytes(os.urandom(6 << 20))
    return path


@pytest.fixture
def no_watcher(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The watcher not started (these tests look at the files while they stand)."""
    monkeypatch.setattr(nodeshare, "_start_watcher", lambda where, job: None)
    yield


def _emptied(folder: Path, seconds: float = 5) -> bool:
    """Whether ``folder`` is empty within ``seconds`` (the watcher polls every 0.2 s)."""
    deadline = time.monotonic() + seconds
    while list(folder.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not list(folder.iterdir())


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _group(blob: Path, shm: Path, world: int) -> nodeshare._Group:
    st = blob.stat()
    ranks = nodeshare.LocalRanks(0, world, "job")
    key = nodeshare._digest(f"{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{world}")
    data = shm / f"{PREFIX}{nodeshare._digest(ranks.job)}-{key}.data"
    chunk = nodeshare.chunk_bytes(1 << 20)
    return nodeshare._Group.join(data, shm, nodeshare._digest(ranks.job), st.st_size, chunk, world)


def _set(group: nodeshare._Group, i: int, state: int, owner: int, since: float) -> None:
    group.ctl[group.states + i] = state
    struct.pack_into("<I", group.ctl, group.owners + 4 * i, owner)
    struct.pack_into("<d", group.ctl, group.claims + 8 * i, since)


def _load(blob: Path, world: int = 2) -> nodeshare.Shared:
    return nodeshare.shared_buffer(
        str(blob),
        nodeshare.LocalRanks(0, world, "job"),
        threads=4,
        block_bytes=1 << 20,
        direct=False,
    )


def test_a_rank_counts_what_its_reads_returned(shm: Path, blob: Path, no_watcher: None) -> None:
    """Two chunks another rank read: this rank reads the rest, and counts only that. The
    same two chunks claimed by a rank that died: this rank reads them again, and its
    count rises by them (a formula of the assigned range would not)."""
    group = _group(blob, shm, 2)
    chunk, size = group.chunk, group.size
    assert group.chunks >= 4
    for i in (0, 1):
        group._set(i, DONE)  # another rank's reads (the bytes are in place: copy them)
    with open(blob, "rb") as fh:
        first = fh.read(2 * chunk)
    shared = mmap.mmap(group.fd, size, offset=group.offset)
    shared[: 2 * chunk] = first
    shared.close()
    group.close()
    share = _load(blob)
    assert share.read_bytes == size - 2 * chunk and share.taken_over == 0
    assert bytes(share.buffer) == blob.read_bytes()

    for p in shm.iterdir():
        p.unlink()
    group = _group(blob, shm, 2)
    for i in (0, 1):
        _set(group, i, CLAIMED, _dead_pid(), time.monotonic())
    group.close()
    share = _load(blob)
    assert share.read_bytes == size and share.taken_over == 2
    assert bytes(share.buffer) == blob.read_bytes()


def test_a_chunk_a_live_rank_sits_on_is_taken_over_after_the_stall_time(
    shm: Path, blob: Path, no_watcher: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodeshare, "STALL_S", 0.2)
    group = _group(blob, shm, 2)
    _set(group, 0, CLAIMED, os.getppid(), time.monotonic())  # alive, never finishes
    group.close()
    started = time.monotonic()
    share = _load(blob)
    assert share.taken_over == 1 and share.read_bytes == blob.stat().st_size
    assert time.monotonic() - started >= 0.2
    assert bytes(share.buffer) == blob.read_bytes()


def test_the_last_rank_to_map_removes_the_file(shm: Path, blob: Path, no_watcher: None) -> None:
    """World 2: after rank 0 the file waits for rank 1; once rank 1 maps it, nothing is
    left (the mappings stay valid)."""
    first = _load(blob)
    assert [p.suffix for p in shm.glob("*.data")] == [".data"]
    second = nodeshare.shared_buffer(
        str(blob), nodeshare.LocalRanks(1, 2, "job"), threads=2, block_bytes=1 << 20, direct=False
    )
    assert second.read_bytes == 0  # every chunk was read by rank 0
    assert not list(shm.glob("*.data")) and not list(shm.glob("*.mapped.*"))
    assert bytes(first.buffer) == bytes(second.buffer) == blob.read_bytes()


def test_a_file_too_small_to_share_is_not_shared(shm: Path, tmp_path: Path) -> None:
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 1000)
    with pytest.raises(nodeshare.NotShared, match="too small"):
        _load(small)
    assert not list(shm.iterdir())


def _stale(shm: Path, job: str, pid: int) -> list[Path]:
    files = [
        shm / f"{PREFIX}{job}-f1.data",
        shm / f"{PREFIX}{job}-f1.mapped.0",
        shm / f"{PREFIX}{job}.pid.{pid}",
        shm / f"{PREFIX}{job}.watch",
    ]
    files[0].write_bytes(b"\0" * 8192)
    for f in files[1:]:
        f.write_bytes(b"")
    return files


def test_reap_removes_the_files_of_a_job_whose_ranks_are_gone(shm: Path) -> None:
    dead, alive = _dead_pid(), os.getpid()
    gone = _stale(shm, "deadjob", dead)
    kept = _stale(shm, "livejob", alive)
    # loadscope's earlier layout: marks of ranks killed during the join, no data file.
    legacy = [shm / f"{PREFIX}0123abcd.join.0", shm / f"{PREFIX}0123abcd.pid.{dead}"]
    for f in legacy:
        f.write_bytes(b"")
    removed = shmgroup.reap(shm)
    assert {p for p, _ in removed} == set(gone) | set(legacy)
    assert sum(size for _, size in removed) >= 8192
    assert all(f.exists() for f in kept)
    line = shmgroup.reap_stale()
    assert line is None  # nothing more to remove


def test_the_watcher_removes_a_jobs_files_once_its_ranks_are_gone(shm: Path, blob: Path) -> None:
    """A rank that loads alone (world 2, the other never comes) and exits without a word:
    its job's watcher removes the file, the marks and itself."""
    code = (
        "import sys; from loadscope.loaders import nodeshare;"
        " s = nodeshare.shared_buffer(sys.argv[1], nodeshare.LocalRanks(0, 2, 'w'),"
        " threads=2, block_bytes=1 << 20, direct=False); print(s.read_bytes, flush=True);"
        " import os; os._exit(0)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(blob)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "LOADSCOPE_SHM_DIR": str(shm)},
    )
    assert int(out.stdout) == blob.stat().st_size
    assert _emptied(shm)


def test_the_watcher_removes_a_file_no_late_rank_came_for(shm: Path, blob: Path) -> None:
    """The rank lives on (a training job), the other ranks never come: the file goes
    after the linger, so the RAM it holds is bounded in time."""
    code = (
        "import sys, time; from loadscope.loaders import nodeshare; nodeshare.LINGER_S = 0.5;"
        " s = nodeshare.shared_buffer(sys.argv[1], nodeshare.LocalRanks(0, 2, 'l'),"
        " threads=2, block_bytes=1 << 20, direct=False); print('loaded', flush=True);"
        " time.sleep(30)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(blob)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "LOADSCOPE_SHM_DIR": str(shm)},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "loaded"
        assert list(shm.glob("*.data"))
        deadline = time.monotonic() + 5
        while list(shm.glob("*.data")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not list(shm.glob("*.data"))
    finally:
        proc.kill()
        proc.wait()
    assert _emptied(shm)


def test_the_last_rank_to_exit_removes_the_jobs_files(shm: Path, blob: Path) -> None:
    """No watcher (a batch system's step end kills it with the ranks): a rank that exits
    normally as the job's last live one removes the job's files itself."""
    code = (
        "import sys; from loadscope.loaders import nodeshare;"
        " nodeshare._start_watcher = lambda where, job: None;"
        " s = nodeshare.shared_buffer(sys.argv[1], nodeshare.LocalRanks(0, 2, 'x'),"
        " threads=2, block_bytes=1 << 20, direct=False); print(len(s.buffer))"
    )
    env = {**os.environ, "LOADSCOPE_SHM_DIR": str(shm)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(blob)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    assert int(out.stdout) == blob.stat().st_size
    assert not list(shm.iterdir()), sorted(p.name for p in shm.iterdir())


def test_a_group_removed_as_a_rank_joins_it_is_made_anew(
    shm: Path, blob: Path, no_watcher: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last rank of a job removes the file while another opens it: the joiner sees
    it unlinked under the lock and starts a new one (it once closed its descriptor
    inside the lock, then failed to unlock it: EBADF, a failed load)."""
    real = nodeshare.locked
    removed: list[bool] = []

    def racing(fd: int):  # type: ignore[no-untyped-def]
        if not removed:
            removed.append(True)
            for p in shm.glob("*.data"):
                p.unlink()
        return real(fd)

    _load(blob)  # a group stands (world 2: it waits for rank 1)
    monkeypatch.setattr(nodeshare, "locked", racing)
    share = nodeshare.shared_buffer(
        str(blob), nodeshare.LocalRanks(1, 2, "job"), threads=2, block_bytes=1 << 20, direct=False
    )
    assert removed and share.read_bytes == blob.stat().st_size  # read anew, alone
    assert bytes(share.buffer) == blob.read_bytes()
