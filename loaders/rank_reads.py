"""A rank's reads, each counted by the rank itself: a whole file into CPU memory, a whole
file onto the GPU through pinned buffers, or its range of a file shared by the node's
ranks (``loaders/rank.py``'s modes use them).

May import: ``loadscope.loaders.nodeshare``, ``loadscope.loaders.buffers``,
``loadscope.base``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(slots=True)
class Reads:
    bytes: int = 0
    calls: int = 0


def read_file(path: str, size: int, reads: Reads, chunk: int) -> torch.Tensor:
    """The whole file in a fresh uint8 CPU tensor, read in ``chunk``-byte preads."""
    import torch

    from loadscope.base.safeio import open_regular

    fd = open_regular(path)
    try:
        actual = os.fstat(fd).st_size
        if actual != size:
            raise RuntimeError(f"{path}: is {actual} bytes, the plan says {size} (changed?)")
        buf = torch.empty(size, dtype=torch.uint8)
        view = buf.numpy().data if size else memoryview(b"")
        for off in range(0, size, chunk):
            _read_counted(fd, view[off : off + chunk], off, path, size, reads)
        return buf
    finally:
        os.close(fd)


def _read_counted(
    fd: int, view: memoryview, offset: int, path: str, size: int, reads: Reads
) -> None:
    """Fill ``view`` from ``offset``, every pread counted in ``reads``; a file that ends
    early (changed under the rank) is a RuntimeError naming how far it got."""
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        reads.calls += 1
        if n <= 0:
            raise RuntimeError(
                f"{path}: read {offset + got} of {size} bytes, then end of file (changed?)"
            )
        got += n
        reads.bytes += n


def read_to_device(
    path: str, size: int, dev: Any, reads: Reads, chunk: int, slots: int = 4
) -> torch.Tensor:
    """The whole file in a fresh uint8 buffer on ``dev``'s device (a
    :class:`~loadscope.loaders.staged.StagingDevice`): each ``chunk`` lands in one of
    ``slots`` pinned host buffers and is copied to the device while the next is read,
    instead of a whole pageable CPU copy moved with ``.to()`` after the read."""
    from loadscope.base.safeio import open_regular

    buf: torch.Tensor = dev.alloc_device(size)
    chunk = max(1, min(chunk, size)) if size else 1
    ring = dev.alloc_ring(slots, chunk)
    fd = open_regular(path)
    try:
        actual = os.fstat(fd).st_size
        if actual != size:
            raise RuntimeError(f"{path}: is {actual} bytes, the plan says {size} (changed?)")
        off, i = 0, 0
        while off < size:
            slot = i % slots
            dev.wait(slot)  # the slot's last copy is done: it may be filled again
            n = min(chunk, size - off)
            _read_counted(fd, ring[slot][:n], off, path, size, reads)
            dev.copy_async(buf, off, slot, 0, n)
            dev.record(slot)
            off += n
            i += 1
        dev.synchronize()
    finally:
        os.close(fd)
    return buf


def node_shared(f: dict[str, Any], rank: int, world: int, reads: Reads, job: str) -> torch.Tensor:
    """What ``loadscope.load_file`` does for local ranks (``loaders/nodeshare.py``), with
    its settings (``auto``'s reads): this rank reads the chunks it claims into one
    shared-memory file, every rank maps it copy-on-write. Its reads are counted as the
    bytes they returned."""
    import torch

    from loadscope.loaders import nodeshare

    path, size = str(f["path"]), int(f["size_bytes"])
    ranks = nodeshare.LocalRanks(rank, world, job)
    threads, block, direct = nodeshare.settings(path, {}, {})
    try:
        share = nodeshare.shared_buffer(
            path, ranks, threads=threads, block_bytes=block, direct=direct
        )
    except nodeshare.NotShared:
        # Loaded alone, as load_file would (a file too small to share, no room).
        return read_file(path, size, reads, block)
    reads.bytes += share.read_bytes
    reads.calls += 1
    if not size:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(share.buffer, dtype=torch.uint8)
