"""Page-cache residency of a file (``mincore``) and ``ColdCache``: evict, then prove it.

"Cold" in every loadscope measurement means evicted *and verified*: the page
cache on this kind of VM even decays on its own, so residency is measured
right before each trial, never assumed.

Two limits are reported rather than papered over:

* Since Linux 5.2 ``mincore`` reports page-cache residency of a file mapping
  only to a caller who owns the file, may write it, or holds CAP_FOWNER (root);
  for anyone else it claims every page resident (measured here as nobody: 4086
  of 4086 pages of an evicted file), so the report says ``unknown``, never a
  false 100% or 0%. Trials still verify their cache state for such a user by
  asking sampled pages with ``RWF_NOWAIT`` reads (:func:`nowait_residency`).
* ``posix_fadvise(DONTNEED)`` drops this machine's cached pages only; an NFS
  server's or FUSE daemon's own cache is out of reach, so such a cold read may
  still be served from the server's RAM.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from dataclasses import dataclass
from typing import Any

from loadscope.base.safeio import bounded, open_regular
from loadscope.probes.result import Unavailable
from loadscope.probes.spec import Lines, block_of, blocks_of, ok

PAGE_BYTES = mmap.PAGESIZE
#: mincore is asked about this many bytes per call, so a 100 GB file needs no 25 MB vector.
_WINDOW_BYTES = 1 << 30
#: Residency at or under this fraction counts as cold (a header page or two may linger).
COLD_FRACTION = 0.01
_DROP_CACHES = "/proc/sys/vm/drop_caches"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_MAP_FAILED = ctypes.c_void_p(-1).value
#: The same libc handle (mmap/munmap/mincore typed) for the other users of raw mappings.
LIBC = _libc
MAP_FAILED = _MAP_FAILED
_LOW_BIT = bytes(b & 1 for b in range(256))


@dataclass(frozen=True, slots=True)
class Residency:
    path: str
    size_bytes: int
    pages_total: int
    #: None when the kernel will not tell us (see module docstring).
    pages_resident: int | None
    note: str = ""

    @property
    def fraction(self) -> float | None:
        if self.pages_resident is None:
            return None
        return 1.0 if self.pages_total == 0 else self.pages_resident / self.pages_total

    @property
    def resident_bytes(self) -> int | None:
        if self.pages_resident is None:
            return None
        return min(self.size_bytes, self.pages_resident * PAGE_BYTES)


def mincore_visible(path: str, st: os.stat_result | None = None) -> bool:
    """Whether mincore will report another process's cached pages of ``path`` to us."""
    st = st or os.stat(path)
    return os.geteuid() == 0 or st.st_uid == os.geteuid() or os.access(path, os.W_OK)


def residency(path: str | os.PathLike[str]) -> Residency:
    """How much of ``path`` is in the page cache now (reads no data, faults no pages)."""
    spath = os.fspath(path)
    fd = open_regular(spath)
    try:
        st = os.fstat(fd)
        size = st.st_size
        pages = (size + PAGE_BYTES - 1) // PAGE_BYTES
        if not mincore_visible(spath, st):
            return Residency(
                spath,
                size,
                pages,
                None,
                "unknown: since Linux 5.2 mincore shows page-cache state only to the file's"
                " owner, a writer or root",
            )
        resident = 0
        for start in range(0, size, _WINDOW_BYTES):
            length = min(_WINDOW_BYTES, size - start)
            resident += _mincore_window(fd, start, length)
        return Residency(spath, size, pages, resident)
    finally:
        os.close(fd)


#: What :func:`keeps_pages` reads, at the file's end (the part probes read least).
KEEP_CHECK_BYTES = 1 << 20


#: How long :func:`keeps_pages` waits for its read: storage that stopped answering must
#: not hang the probe (or ``warm``) that asks.
KEEP_CHECK_TIMEOUT_S = 5.0


def keeps_pages(
    path: str | os.PathLike[str],
    nbytes: int = KEEP_CHECK_BYTES,
    timeout_s: float = KEEP_CHECK_TIMEOUT_S,
) -> bool | None:
    """Whether pages read from ``path`` are still in the page cache at its next open: its
    last ``nbytes`` read, the file closed, opened again and mincore asked. False where
    the mount bypasses the page cache (FUSE ``direct_io``) or its daemon drops the pages
    at each open (no ``keep_cache``): there a load always reads the storage, and warming
    first cannot help. None where mincore is hidden from this user or the file is small.
    A read with no answer within ``timeout_s`` raises
    :class:`~loadscope.base.safeio.StorageStalled` (its thread is left to the kernel, and
    listed among the stuck reads the command names as it ends)."""
    spath = os.fspath(path)
    return bounded(
        lambda: _keeps_pages(spath, nbytes),
        timeout_s,
        lambda: f"{spath} at offset {max(0, os.stat(spath).st_size - nbytes)}",
    )


def _keeps_pages(spath: str, nbytes: int) -> bool | None:
    fd = open_regular(spath)
    try:
        st = os.fstat(fd)
        if st.st_size < 2 * nbytes or not mincore_visible(spath, st):
            return None
        offset = (st.st_size - nbytes) // PAGE_BYTES * PAGE_BYTES
        got = len(os.pread(fd, nbytes, offset))
    finally:
        os.close(fd)
    fd = open_regular(spath)
    try:
        resident = _mincore_window(fd, offset, got)
    finally:
        os.close(fd)
    return resident * PAGE_BYTES >= got // 2


def sampled_residency(
    path: str | os.PathLike[str], windows: int = 64, window_bytes: int = 256 << 10
) -> float | None:
    """Fraction resident, estimated from ``windows`` evenly spaced windows (a decision aid).

    A full ``residency`` of a 1 GiB file costs milliseconds (one mapping, 262,144 page
    flags); a loader deciding "map it or read it" needs an answer in microseconds.
    None when the kernel hides residency from this user.
    """
    spath = os.fspath(path)
    fd = open_regular(spath)
    try:
        st = os.fstat(fd)
        if not mincore_visible(spath, st):
            return None
        size = st.st_size
        if size <= windows * window_bytes:
            pages = (size + PAGE_BYTES - 1) // PAGE_BYTES
            return 1.0 if pages == 0 else _mincore_window(fd, 0, size) / pages
        step = (size - window_bytes) // (windows - 1)
        step -= step % PAGE_BYTES
        # One mapping (no pages are faulted), then one mincore per window.
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            raise Unavailable(f"mmap for mincore failed: {os.strerror(ctypes.get_errno())}")
        try:
            n = window_bytes // PAGE_BYTES
            vec = (ctypes.c_ubyte * n)()
            resident = 0
            for i in range(windows):
                if _libc.mincore(ctypes.c_void_p(addr + i * step), window_bytes, vec) != 0:
                    raise Unavailable(f"mincore failed: {os.strerror(ctypes.get_errno())}")
                resident += bytes(vec).translate(_LOW_BIT).count(1)
        finally:
            _libc.munmap(ctypes.c_void_p(addr), size)
        return resident / (windows * n)
    finally:
        os.close(fd)


def _mincore_window(fd: int, offset: int, length: int) -> int:
    addr = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
    if addr in (None, _MAP_FAILED):
        err = ctypes.get_errno()
        raise Unavailable(f"mmap for mincore failed: {os.strerror(err)}")
    try:
        n = (length + PAGE_BYTES - 1) // PAGE_BYTES
        vec = (ctypes.c_ubyte * n)()
        if _libc.mincore(ctypes.c_void_p(addr), length, vec) != 0:
            err = ctypes.get_errno()
            raise Unavailable(f"mincore failed: {os.strerror(err)}")
        # Only the low bit means "resident" (the others are reserved): keep it, count in C.
        return bytes(vec).translate(_LOW_BIT).count(1)
    finally:
        _libc.munmap(ctypes.c_void_p(addr), length)


#: Pages sampled by :func:`nowait_residency`; a cold verdict needs every one to miss.
NOWAIT_SAMPLES = 64


def _thread_read_bytes() -> int | None:
    """Bytes this thread has caused to be read from storage (``/proc/thread-self/io``)."""
    try:
        with open("/proc/thread-self/io", "rb") as fh:
            for line in fh:
                if line.startswith(b"read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def nowait_residency(path: str | os.PathLike[str], samples: int = NOWAIT_SAMPLES) -> float | None:
    """Fraction of ``samples`` evenly spaced pages in the page cache, asked with RWF_NOWAIT.

    For a user mincore will not answer: ``preadv2(RWF_NOWAIT)`` of one byte returns
    the byte when its page is cached and EAGAIN when it is not, for any reader. A
    miss still starts a read of that page (and, without FADV_RANDOM, a readahead
    window: measured, 64 probes of a cold 16 MiB file left up to 89% of it cached),
    so readahead is off for our descriptor, each missed page is read to completion
    and dropped again: the file is left as cold as it was. None where the filesystem
    does not support RWF_NOWAIT.

    A miss the device serves fast enough comes back as data, not EAGAIN (seen in the
    suite: a just-evicted file sampled 100% "resident" after other tests had warmed
    the host's cache of the virtual disk). So a probe counts as a hit only when this
    thread's storage reads (``read_bytes`` of /proc/thread-self/io, counted as bios
    are submitted) did not move during it; None where that counter is unreadable.
    """
    flag = getattr(os, "RWF_NOWAIT", None)
    if flag is None:
        return None
    spath = os.fspath(path)
    fd = open_regular(spath)
    try:
        size = os.fstat(fd).st_size
        pages = (size + PAGE_BYTES - 1) // PAGE_BYTES
        if pages == 0:
            return 1.0
        n = min(samples, pages)
        # The middle of each of n equal stretches: never page 0, whose header a loader
        # or an inspection may have just read (mincore's 1% tolerance covers it there).
        picks = sorted({(2 * i + 1) * pages // (2 * n) for i in range(n)})
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        buf = bytearray(1)
        hits = 0
        missed: list[int] = []
        for page in picks:
            before = _thread_read_bytes()
            try:
                os.preadv(fd, [buf], page * PAGE_BYTES, flag)
            except BlockingIOError:
                missed.append(page)
                continue
            except OSError:  # EOPNOTSUPP and friends: this filesystem cannot be asked
                return None
            after = _thread_read_bytes()
            if before is None or after is None:
                return None
            if after > before:
                missed.append(page)  # served, but by a read this probe started
            else:
                hits += 1
        for page in missed:
            # Wait for the read the probe started (a page under I/O cannot be dropped).
            os.pread(fd, 1, page * PAGE_BYTES)
            os.posix_fadvise(fd, page * PAGE_BYTES, PAGE_BYTES, os.POSIX_FADV_DONTNEED)
        return hits / len(picks)
    finally:
        os.close(fd)


def checked_fraction(path: str | os.PathLike[str]) -> tuple[float | None, bool]:
    """(fraction resident, sampled): mincore's answer, or where mincore is hidden from this
    user the :func:`nowait_residency` sample (None only when neither can tell)."""
    fraction = residency(path).fraction
    if fraction is not None:
        return fraction, False
    sampled = nowait_residency(path)
    return sampled, sampled is not None


#: The filesystems whose files live only in memory.
_MEMORY_FSTYPES = ("tmpfs", "ramfs", "hugetlbfs")


def memory_backed(path: str | os.PathLike[str]) -> str | None:
    """The filesystem's type (``tmpfs``, ``ramfs``, ``hugetlbfs``) when ``path`` lives in
    memory-backed storage, else None (or when the mount table cannot say).

    Such a file's pages are its only copy: no eviction makes it cold, and dropping the
    host's page cache cannot either. Asked of the mount table, not of the filesystem: a
    FUSE daemon or NFS server whose reads stalled would not answer a ``statfs`` either, so
    a path whose own mount is neither in memory nor on a block device is not followed.
    """
    from loadscope.probes.mounttable import mount_of, read_mountinfo

    try:
        table = read_mountinfo()
    except Unavailable:
        return None
    where = os.path.abspath(path)
    parts = [p for p in where.split("/") if p]
    lexical, depth = None, -1
    for m in table:  # the longest mount point over the path as written (the last on ties)
        point = [p for p in os.path.normpath(m.mount_point).split("/") if p]
        if parts[: len(point)] == point and len(point) >= depth:
            lexical, depth = m, len(point)
    if lexical is None or (lexical.major == 0 and lexical.fstype not in _MEMORY_FSTYPES):
        return None  # FUSE, NFS, overlay...: not followed (see above)
    try:
        real = mount_of(where, table)  # symlinks resolved: a local or memory filesystem
    except (Unavailable, OSError):
        return None
    return real.fstype if real.fstype in _MEMORY_FSTYPES else None


def no_cold_state_note(fstype: str) -> str:
    """What a person is told, once, about eviction on memory-backed storage."""
    return (
        f"{fstype} is memory-backed storage: its pages are the files' only copy, so it has no"
        " cold state (no eviction, and no --allow-drop-caches, can take them out of RAM);"
        " every load here reads from memory (or swap)"
    )


@dataclass(frozen=True, slots=True)
class Eviction:
    path: str
    method: str  # "fadvise" or "fadvise+drop_caches"
    before: float | None
    after: float | None
    verified: bool
    note: str = ""
    #: The memory-backed filesystem the file is on (``tmpfs``...), else None: nothing evicts it.
    memory_backed: str | None = None


class ColdCache:
    """Evict files from this machine's page cache and verify that they are cold.

    ``allow_drop_caches`` permits writing ``/proc/sys/vm/drop_caches`` when
    ``posix_fadvise`` leaves pages behind (they are mapped by some process); it is
    host-wide, so only with the user's explicit ``--allow-drop-caches``.
    ``remote_note`` is added to every result for storage with a cache we cannot
    reach (NFS server, FUSE daemon).
    """

    def __init__(self, *, allow_drop_caches: bool = False, remote_note: str = "") -> None:
        self.allow_drop_caches = allow_drop_caches
        self.remote_note = remote_note

    def evict(self, path: str | os.PathLike[str]) -> Eviction:
        spath = os.fspath(path)
        before = residency(spath).fraction
        notes = [self.remote_note] if self.remote_note else []
        fd = open_regular(spath)
        try:
            # DONTNEED skips dirty pages (a file just written or copied): write them back
            # first. fdatasync changes no data; it only flushes what is already there.
            try:
                os.fdatasync(fd)
            except OSError as exc:
                notes.append(f"fdatasync failed ({exc.strerror}); dirty pages stay cached")
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        after, sampled = checked_fraction(spath)
        method = "fadvise"
        in_memory = memory_backed(spath) if after is None or after > COLD_FRACTION else None
        if in_memory is not None:
            # Nothing drops these pages: said once, in place of the hints below.
            notes.append(no_cold_state_note(in_memory))
            verified = after is not None and after <= COLD_FRACTION
            return Eviction(spath, method, before, after, verified, "; ".join(notes), in_memory)
        if after is not None and after > COLD_FRACTION and self.allow_drop_caches:
            try:
                drop_caches()
                after, sampled = checked_fraction(spath)
                method = "fadvise+drop_caches"
            except Unavailable as exc:
                notes.append(f"--allow-drop-caches: unavailable: {exc} (needs root)")
        if sampled:
            method += "; verified by sampling"
            notes.append(
                f"residency hidden from this user (mincore): {NOWAIT_SAMPLES} pages sampled"
                " with RWF_NOWAIT reads instead"
            )
        if after is None:
            notes.append("residency unknown to this user: eviction not verifiable")
        elif after > COLD_FRACTION:
            notes.append(
                f"{after:.0%} still resident after eviction (pages mapped by a running process?"
                " --allow-drop-caches drops them host-wide)"
            )
        verified = after is not None and after <= COLD_FRACTION
        return Eviction(spath, method, before, after, verified, "; ".join(notes))


def drop_caches() -> None:
    """Drop the whole host's clean page cache (needs root; affects every process)."""
    os.sync()
    try:
        with open(_DROP_CACHES, "w") as fh:
            fh.write("1\n")
    except OSError as exc:
        raise Unavailable(f"cannot write {_DROP_CACHES}: {exc.strerror}") from None


#: What a mount that keeps no pages means (:func:`keeps_pages` False).
NOT_KEPT = (
    "a page read is gone at the next open (FUSE direct_io, or a daemon that drops"
    " cached pages): every load reads the storage, and warming first cannot help"
)


def residency_lines(files: Any) -> Lines:
    """The model's page-cache residency before probing, from the files' blocks in the
    probe report's JSON: the mean of the files measured, else why it is unknown."""
    found = blocks_of(files)
    known = [
        float(r["fraction"])
        for f in found
        if ok(r := block_of(f.get("residency"))) and r.get("fraction") is not None
    ]
    kept = [f.get("keeps_pages") for f in found if f.get("keeps_pages") is not None]
    not_kept: Lines = (
        [("page cache", "not kept by this mount: " + NOT_KEPT)] if False in kept else []
    )
    if known:
        mean = sum(known) / len(known)
        return [
            ("page cache", f"{mean:.0%} resident before probing ({len(known)} file(s))"),
            *not_kept,
        ]
    if found:
        first = block_of(found[0].get("residency"))
        why = first.get("reason") or (first.get("note") if ok(first) else "") or ""
        return [("page cache", f"unknown: {why}")]
    return []


def residency_per_file(files: Any) -> list[tuple[str, str]]:
    """``(residency, path)`` of each file's block in the probe report's JSON: "42%", or
    "unknown (why)"."""
    out = []
    for f in blocks_of(files):
        r = block_of(f.get("residency"))
        frac = r.get("fraction")
        shown = (
            f"{frac:.0%}"
            if isinstance(frac, int | float)
            else f"unknown ({r.get('reason') or r.get('note')})"
        )
        out.append((shown, str(f.get("path"))))
    return out
