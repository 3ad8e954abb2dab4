"""A rank's reads, each counted by the rank itself: a whole file into CPU memory, a whole
file onto the GPU through pinned buffers, the chunks of a file shared by the node's ranks,
and the stacks' own patterns: a file memory-mapped (the default loaders), read whole with
O_DIRECT (the O_DIRECT peers), the page cache filled as ``loadscope warm`` does; and for a
model in an object store, a whole object fetched with many ranged GETs in flight
(``loaders/rank.py``'s modes use them).

May import: ``loadscope.loaders.nodeshare``, ``loadscope.loaders.pagefill``,
``loadscope.loaders.parallelread``, ``loadscope.loaders.buffers``,
``loadscope.loaders.storeread``, ``loadscope.base``.
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


def read_object(address: str, size: int, reads: Reads, concurrency: int) -> torch.Tensor:
    """The whole object at ``address`` in a store, as a uint8 CPU tensor over fresh
    memory, fetched with ``concurrency`` ranged GETs in flight (each GET counted)."""
    import torch

    from loadscope.loaders.storeread import fetch_objects

    (buffer,), gets = fetch_objects([(address, size)], concurrency)
    reads.bytes += size
    reads.calls += gets
    return torch.frombuffer(buffer, dtype=torch.uint8)


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


def read_mapped(path: str, size: int, reads: Reads) -> torch.Tensor:
    """The file memory-mapped, as ``safetensors.torch.load_file`` maps it (the default of
    transformers, diffusers, vLLM and SGLang): pages come in as they are touched, from
    the page cache every rank shares. Counted as the file's bytes (the pages touched)."""
    import mmap

    import torch

    from loadscope.base.safeio import open_regular

    if not size:
        return torch.empty(0, dtype=torch.uint8)
    fd = open_regular(path)
    try:
        mapped = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    reads.bytes += size
    return torch.frombuffer(mapped, dtype=torch.uint8)


def read_direct(path: str, size: int, reads: Reads) -> torch.Tensor:
    """The whole file read by this rank alone with many large O_DIRECT requests in flight
    (``loadscope.load_file``'s reads with node sharing off): what the O_DIRECT peers,
    fastsafetensors and Run:ai's streamer, do in every rank. Counted as the bytes the reads
    returned."""
    import mmap

    import torch

    from loadscope.base.memory import fresh_memory
    from loadscope.loaders import nodeshare
    from loadscope.loaders.parallelread import parallel_read

    if not size:
        return torch.empty(0, dtype=torch.uint8)
    threads, block, direct = nodeshare.settings(path, {}, {})
    padded = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE if direct else size
    buf = fresh_memory(padded)
    got = parallel_read(
        path,
        memoryview(buf)[:padded],
        [(0, padded)],
        threads=threads,
        block_bytes=block,
        flags=os.O_DIRECT if direct else 0,
        align=mmap.PAGESIZE if direct else 1,
    )
    reads.bytes += min(got, size)
    reads.calls += -(-size // block)
    return torch.frombuffer(buf, dtype=torch.uint8)[:size]


def warm_files(files: list[tuple[str, int]], reads: Reads) -> None:
    """The page cache filled with ``files`` as ``loadscope warm`` fills it (its default
    threads and block size), each block counted."""
    from loadscope.loaders.pagefill import WARM_BLOCK_BYTES, WARM_THREADS, PageFill, whole_files

    fill = PageFill(whole_files(files), threads=WARM_THREADS, block_bytes=WARM_BLOCK_BYTES)
    reads.bytes += fill.run()
    reads.calls += len(fill.jobs)
