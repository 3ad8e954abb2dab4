"""Fresh memory for bytes a loader (or the probe's into-RAM point) reads into.

Private anonymous pages, page-aligned (O_DIRECT needs the alignment). Python's
``mmap.mmap(-1, n)`` alone maps *shared* anonymous memory: shmem, whose pages cost more
to fault in and which ``MADV_HUGEPAGE`` does not reach (shmem's huge pages follow
``shmem_enabled``, commonly ``never``). Measured on a 2-core VM, 16 readers of 1 MiB,
O_DIRECT, one 512 MiB shard on an emulated 5 ms FUSE disk: 0.72x the probe's reused-buffer
rate into shared memory, 0.83x into private 4 KiB pages.
May import: the standard library only.
"""

from __future__ import annotations

import contextlib
import mmap


def fresh_memory(nbytes: int, *, huge_pages: bool = True) -> mmap.mmap:
    """Private anonymous memory for ``nbytes``; with ``huge_pages``, marked ``MADV_HUGEPAGE``
    (where transparent huge pages are in ``madvise`` mode, the common default, it is then
    faulted in 2 MiB at a time instead of 4 KiB)."""
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge_pages and hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):
            buf.madvise(mmap.MADV_HUGEPAGE)
    return buf
