"""Fresh memory for bytes a loader (or the probe's into-RAM point) reads into.

Private anonymous pages, page-aligned (O_DIRECT needs the alignment), in 4 KiB pages
unless asked. Python's ``mmap.mmap(-1, n)`` alone maps *shared* anonymous memory: shmem,
whose pages cost more to fault in and which ``MADV_HUGEPAGE`` does not reach (shmem's
huge pages follow ``shmem_enabled``, commonly ``never``). Measured on a 2-core VM
(``benchmarks/bench_fresh_memory.py``), a fresh 1 GiB written once by one thread: 1.9 GB/s
shared, 2.2 GB/s private in 4 KiB pages, 0.4-1.8 GB/s (median 0.8) private in 2 MiB pages,
which the kernel must first find or compact; a cold 2 GiB ``auto`` load on an emulated
5 ms FUSE disk ran at 0.41x with huge pages asked for (``benchmarks/bench_auto_ceiling.py``).
May import: the standard library only.
"""

from __future__ import annotations

import contextlib
import mmap


def fresh_memory(nbytes: int, *, huge_pages: bool = False) -> mmap.mmap:
    """Private anonymous memory for ``nbytes``; with ``huge_pages``, marked ``MADV_HUGEPAGE``
    (where transparent huge pages are in ``madvise`` mode, the common default, it is then
    faulted in 2 MiB at a time instead of 4 KiB: fewer faults, but each may wait for the
    kernel to compact memory into a free 2 MiB block)."""
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge_pages and hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):
            buf.madvise(mmap.MADV_HUGEPAGE)
    return buf
