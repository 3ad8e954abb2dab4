"""Threads of large preads into one buffer per file; tensors are views on it.

Deep parallelism with large requests is what beats per-request latency on network
storage (many requests in flight instead of one); the buffer is read once and never
copied again. The ``parallel``, ``direct`` and ``auto`` strategies, the public API and
the node-shared reads all read with these.

May import: ``loadscope.loaders.strategy`` (its types), ``loadscope.loaders.buffers``,
``loadscope.loaders.safetensors_format``, ``loadscope.loaders.requests``, ``loadscope.base``.
"""

from __future__ import annotations

import os
import threading

from loadscope.base.memory import fresh_memory
from loadscope.loaders.buffers import group_by_span, selected, tensors_from_buffer
from loadscope.loaders.requests import FileRequest, Tensors
from loadscope.loaders.safetensors_format import read_header

#: The smallest request a span is split into so that every reader thread has one.
MIN_SPLIT_BYTES = 1 << 20


def parallel_read(
    path: str,
    view: memoryview,
    ranges: list[tuple[int, int]],
    *,
    threads: int,
    block_bytes: int,
    flags: int = 0,
    align: int = 1,
) -> int:
    """Fill ``view`` with the byte ``ranges`` of ``path``, laid out back to back, by ``threads``;
    the bytes the reads returned.

    Each range ``(start, end)`` lands at the running offset in ``view``. With O_DIRECT
    (``flags``), requests are aligned to ``align`` and the tail of each range that
    cannot be read directly is read with a plain pread.
    """
    jobs: list[tuple[int, int, int]] = []  # (file offset, length, view offset)
    span = sum(end - start for start, end in ranges)
    if threads > 1 and span < threads * block_bytes:
        # Fewer bytes than the threads' blocks: smaller requests (not under 1 MiB), so
        # that every thread has one and the requests in flight match a big file's (a
        # 10 MiB span read as one 16 MiB job used one thread of eight: 3x slower).
        per = -(-span // threads)
        block_bytes = min(block_bytes, max(MIN_SPLIT_BYTES, -(-per // 4096) * 4096))
    at = 0
    for start, end in ranges:
        for off in range(start, end, block_bytes):
            jobs.append((off, min(block_bytes, end - off), at + off - start))
        at += end - start
    lock = threading.Lock()
    nxt = iter(jobs)
    errors: list[BaseException] = []
    got = [0]

    def worker() -> None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | flags)
        plain = os.open(path, os.O_RDONLY | os.O_CLOEXEC) if flags else fd
        try:
            while not errors:
                with lock:
                    job = next(nxt, None)
                if job is None:
                    return
                off, length, dst = job
                n = read_into(fd, plain, view[dst : dst + length], off, align)
                with lock:
                    got[0] += n
        except BaseException as exc:  # noqa: BLE001  (handed to the caller, re-raised below)
            errors.append(exc)
        finally:
            os.close(fd)
            if plain != fd:
                os.close(plain)

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, threads))]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return got[0]


def read_into(fd: int, plain: int, dst: memoryview, offset: int, align: int) -> int:
    """Fill ``dst`` from ``offset`` (O_DIRECT through ``fd`` for its aligned part, ``plain``
    for the rest); the bytes the reads returned."""
    done = 0
    length = len(dst)
    if align > 1 and offset % align == 0:
        direct_len = length - length % align
        while done < direct_len:
            n = os.preadv(fd, [dst[done:direct_len]], offset + done)
            if n <= 0:
                break
            done += n
    while done < length:
        n = os.preadv(plain, [dst[done:]], offset + done)
        if n <= 0:
            # End of file: only the alignment padding of the last range lies past it.
            # (A truncated file is caught by the digests, not hidden.)
            return done
        done += n
    return done


def read_file_parallel(
    f: FileRequest,
    *,
    threads: int,
    block_bytes: int,
    direct: bool = False,
    huge_pages: bool = False,
) -> Tensors:
    import mmap

    header = read_header(f.path)
    align = mmap.PAGESIZE
    layout = []
    for span_start, span_end, entries in group_by_span(header, selected(header, f)):
        if direct:
            # O_DIRECT offsets and lengths must be page multiples: widen each span to page
            # boundaries (the data section itself starts wherever the header ends).
            layout.append((span_start - span_start % align, -(-span_end // align) * align, entries))
        else:
            layout.append((span_start, span_end, entries))
    total = sum(end - start for start, end, _ in layout)
    if total == 0:
        return
    buf = fresh_memory(total + align, huge_pages=huge_pages)
    view = memoryview(buf)
    parallel_read(
        f.path,
        view,
        [(start, end) for start, end, _ in layout],
        threads=threads,
        block_bytes=block_bytes,
        flags=os.O_DIRECT if direct else 0,
        align=align if direct else 1,
    )
    at = 0
    for start, end, entries in layout:
        # Views on the shared buffer: the tensors keep it alive.
        yield from tensors_from_buffer(view[at : at + end - start], start, header, entries)
        at += end - start
