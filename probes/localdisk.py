"""How fast a local directory takes a copy of the model and reads it back cold.

The copy-to-local-disk advice needs two numbers the model's own storage cannot
give: the candidate's write rate (the copy's cost) and its cold read rate (what
each later load would run at). Both are measured on a small temporary file in
that directory (never a user file): written in 4 MiB blocks, fsynced, evicted
and *verified* cold, then read back in 1 MiB blocks. The file is removed in
every case.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

from loadscope.probes.pagecache import ColdCache
from loadscope.probes.result import Unavailable

#: Big enough to get past the first readahead windows, small enough to cost < 1 s locally.
SAMPLE_BYTES = 64 << 20
_WRITE_BLOCK = 4 << 20
_READ_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class DiskSpeed:
    directory: str
    free_bytes: int
    sample_bytes: int
    write_bytes_per_s: float
    cold_read_bytes_per_s: float
    cold_verified: bool
    note: str = ""


def free_bytes(directory: str) -> int:
    return shutil.disk_usage(directory).free


def measure_dir(directory: str, sample_bytes: int = SAMPLE_BYTES) -> DiskSpeed:
    """Write, fsync, evict, verify and read back a temporary file in ``directory``."""
    if not os.path.isdir(directory):
        raise Unavailable(f"{directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise Unavailable(f"{directory} is not writable by this user")
    free = free_bytes(directory)
    if free < 2 * sample_bytes:
        raise Unavailable(f"{directory} has only {free} bytes free")
    fd, path = tempfile.mkstemp(prefix=".loadscope-probe-", dir=directory)
    try:
        block = os.urandom(_WRITE_BLOCK)  # incompressible, so no filesystem shortcut
        start = time.perf_counter()
        written = 0
        while written < sample_bytes:
            written += os.write(fd, block[: min(_WRITE_BLOCK, sample_bytes - written)])
        os.fsync(fd)
        write_s = time.perf_counter() - start
        os.close(fd)
        fd = -1
        eviction = ColdCache().evict(path)
        rfd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        buf = mmap.mmap(-1, _READ_BLOCK)
        try:
            done = 0
            start = time.perf_counter()
            while done < sample_bytes:
                n = os.preadv(rfd, [buf], done)
                if n <= 0:
                    break
                done += n
            read_s = time.perf_counter() - start
        finally:
            buf.close()
            os.close(rfd)
    finally:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
    return DiskSpeed(
        directory=directory,
        free_bytes=free,
        sample_bytes=sample_bytes,
        write_bytes_per_s=written / max(write_s, 1e-9),
        cold_read_bytes_per_s=done / max(read_s, 1e-9),
        cold_verified=eviction.verified,
        note=eviction.note,
    )
