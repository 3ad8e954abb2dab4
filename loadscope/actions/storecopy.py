"""``loadscope copy s3://... DEST``: a bucket's model to a local disk with many ranged GETs
in flight, verified, resumable, never touching the bucket.

What is copied: the model's safetensors objects (as the source lists them: the index's
shards, or every ``*.safetensors`` under the prefix) and the small objects beside them a
loader needs (``*.json``, ``*.txt``, ``*.model``, ``*.tiktoken``, ``*.py``).

How, for each object: free space for everything still to copy is checked before the
first byte is written; the object is fetched as ranged GETs of ``chunk_bytes``,
``concurrency`` of them in flight across the object, each written in place (``pwrite``)
into ``NAME.loadscope-partial`` with its crc32 kept; the file is fsynced, evicted from the
page cache and read back to compare each block's crc32 with what arrived, and only then
renamed to its final name (then the folder is fsynced). Each object's ETag, size and crc32 go
into ``.loadscope-store.json`` in DEST once it is verified: a rerun after an interruption
skips the objects whose final file still has that size and crc32 and whose ETag the
store still gives,
removes stale partial files and copies the rest; a final file that differs is never
overwritten without ``force``. DEST is locked with ``flock`` for the whole copy
(:mod:`loadscope.actions.copydest`).

May import: ``loadscope.probes`` (the object-store client), ``loadscope.base``,
:mod:`loadscope.actions.copydest`, :mod:`loadscope.actions.localcopy` (its report).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import zlib
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from loadscope.actions.copydest import CopyError, CopyRefused, _prepare_dest
from loadscope.actions.localcopy import (
    PARTIAL_SUFFIX,
    SPACE_MARGIN,
    CopyReport,
    FileCopy,
    Ticker,
)
from loadscope.base.units import format_bytes
from loadscope.probes.objclient import call, folder_objects, listing, object_key
from loadscope.probes.sources import object_address

#: The small objects beside the weights that a loader needs.
SMALL_SUFFIXES = (".json", ".txt", ".model", ".tiktoken", ".py")
#: What each verified object was when copied: its ETag and size, by relative name.
STATE_NAME = ".loadscope-store.json"
CONCURRENCY = 32
CHUNK_BYTES = 8 << 20

Progress = Callable[[int, int, float], None]


class StoreCopyCancelled(CopyError):
    """Stopped before every object was copied (a rerun resumes)."""


def _objects(address: str, only: Collection[str] | None = None) -> list[tuple[str, int, str]]:
    """``(name, size, etag)`` of the model's weights and the small objects beside them
    (its one object alone, where the address names one; the weights named in ``only``
    alone, where it is given)."""
    weights = {o.name for o in listing(address)}
    if only is not None:
        return [o for o in folder_objects(address) if o[0] in weights and o[0] in only]
    one = address.endswith(".safetensors")
    return [
        (name, size, etag)
        for name, size, etag in folder_objects(address)
        if name in weights or (not one and name.lower().endswith(SMALL_SUFFIXES))
    ]


def copy_from_store(
    address: str,
    dest: str | os.PathLike[str],
    *,
    concurrency: int = CONCURRENCY,
    chunk_bytes: int = CHUNK_BYTES,
    force: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    only: Collection[str] | None = None,
) -> CopyReport:
    """Copy the model at ``address`` into ``dest`` (see the module's docstring); ``only``:
    these weight objects of it alone (the doctor's copy trial copies a sample)."""
    dest_dir = Path(dest)
    base = address if not address.endswith(".safetensors") else address.rpartition("/")[0]
    objects = _objects(address, only)
    files = [FileCopy(object_address(base, n), n, size) for n, size, _ in objects]
    etags = {n: e for n, _, e in objects}
    report = CopyReport(address, str(dest_dir), files, threads=concurrency, block_bytes=chunk_bytes)
    stop = cancel or threading.Event()
    created, lock_fd = _prepare_dest(dest_dir)
    try:
        state_path = dest_dir / STATE_NAME
        state = _read_state(state_path)
        todo = _still_to_copy(files, dest_dir, state, etags, force)
        need = sum(f.size_bytes for f in todo)
        free = shutil.disk_usage(dest_dir).free
        if todo and need + SPACE_MARGIN > free:
            raise CopyError(
                f"{dest_dir}: the copy needs {format_bytes(need)} (+{format_bytes(SPACE_MARGIN)}"
                f" margin) and it has {format_bytes(free)} free; nothing was written"
            )
        tick = Ticker(need, progress)
        try:
            settings = (concurrency, chunk_bytes)
            _fetch_all(todo, dest_dir, settings, tick, stop, report, (state, etags))
        finally:
            report.seconds = time.monotonic() - tick.start
            report.bytes_copied = report.source_bytes_read = tick.done
        if stop.is_set() and any(f.status == "pending" for f in files):
            raise StoreCopyCancelled(
                "stopped: some objects not copied yet; rerun the same command to resume"
                " (the ones already verified are kept)"
            )
        report.notes.append(
            f"read from the store as ranged GETs of {format_bytes(chunk_bytes)},"
            f" {concurrency} in flight"
        )
        return report
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                dest_dir.rmdir()  # only if nothing was written into it
        raise
    finally:
        os.close(lock_fd)


def _fetch_all(
    todo: list[FileCopy],
    dest_dir: Path,
    settings: tuple[int, int],
    tick: Callable[[int], None],
    stop: threading.Event,
    report: CopyReport,
    recorded: tuple[dict[str, Any], dict[str, str]],
) -> None:
    """Every object of ``todo`` into DEST (``settings``: GETs in flight, bytes per GET);
    each one verified goes into the ``recorded`` state with its ETag, written at once."""
    concurrency, chunk_bytes = settings
    state, etags = recorded
    state_path = dest_dir / STATE_NAME
    # Every object's GETs in one pool, so that the GETs in flight stay at
    # ``concurrency`` across objects; each object is verified as its last
    # block lands, while the others' GETs go on.
    fetches: list[_Fetch] = []
    try:
        with ThreadPoolExecutor(max(1, concurrency)) as pool:
            try:
                for f in todo:  # one by one: a failure leaves the earlier ones listed
                    fetches.append(_Fetch(f, dest_dir, chunk_bytes, tick, stop))
                jobs = [(job, offset) for job in fetches for offset in job.offsets()]
                for job in pool.map(lambda j: j[0].fetch(j[1]), jobs):
                    if job is not None and not stop.is_set():
                        report.verify_seconds += job.finish()
                        state[job.f.relative] = {
                            "etag": etags[job.f.relative],
                            "size": job.f.size_bytes,
                            "crc32": job.f.crc32,
                        }
                        _write_state(state_path, state)
            except BaseException:
                stop.set()  # the GETs queued return at once; those in flight end
                raise
    finally:
        # Only once no thread writes to them: their descriptors closed, and the
        # partial files of what was not verified removed (never a final name).
        for job in fetches:
            job.close()
            if job.f.status != "copied":
                job.partial.unlink(missing_ok=True)


class _Fetch:
    """One object fetched block by block into its partial file (from any thread), then
    fsynced, verified and renamed by :meth:`finish` once its last block has landed."""

    def __init__(
        self,
        f: FileCopy,
        dest_dir: Path,
        chunk_bytes: int,
        tick: Callable[[int], None],
        stop: threading.Event,
    ) -> None:
        self.f, self.dest_dir, self.chunk, self.tick, self.stop = (
            f,
            dest_dir,
            chunk_bytes,
            tick,
            stop,
        )
        self.final = dest_dir / f.relative
        self.partial = self.final.with_name(self.final.name + PARTIAL_SUFFIX)
        self.store, self.key = object_key(f.source)
        self.crcs: dict[int, tuple[int, int]] = {}
        self.left = len(self.offsets())
        self.lock = threading.Lock()
        self.fd: int | None = os.open(
            self.partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644
        )
        os.ftruncate(self.fd, f.size_bytes)

    def offsets(self) -> range:
        return range(0, max(self.f.size_bytes, 1), self.chunk)

    def fetch(self, offset: int) -> _Fetch | None:
        """One block; this object when it was its last one (else None)."""
        import obstore

        if self.stop.is_set() or self.fd is None:
            return None
        length = min(self.chunk, self.f.size_bytes - offset)
        if length > 0:
            data = call(
                self.f.source,
                lambda: obstore.get_range(self.store, self.key, start=offset, length=length),
            )
            view = memoryview(data)
            if len(view) != length:
                raise CopyError(
                    f"{self.f.source}: ended at {offset + len(view)} of {self.f.size_bytes}"
                )
            written = 0
            try:
                while written < length:
                    written += os.pwrite(self.fd, view[written:], offset + written)
            except OSError as exc:  # a full disk, a quota: said with the file's name
                raise CopyError(f"{self.final}: cannot write it: {exc.strerror}") from None
            self.crcs[offset] = (length, zlib.crc32(view))
            self.tick(length)
        with self.lock:
            self.left -= 1
            return self if self.left == 0 else None

    def finish(self) -> float:
        """fsync, read back against what arrived, rename; the seconds it took."""
        started = time.monotonic()
        assert self.fd is not None
        os.fsync(self.fd)
        self.close()
        bad, crc = _verify(self.partial, self.crcs)
        if bad is not None:
            self.partial.unlink()
            raise CopyError(f"{self.final}: read back, {bad}; the partial copy was removed")
        os.replace(self.partial, self.final)
        dir_fd = os.open(self.dest_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self.f.status, self.f.crc32, self.f.read = "copied", f"{crc:08x}", "ranged GETs"
        return time.monotonic() - started

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _verify(path: Path, crcs: dict[int, tuple[int, int]]) -> tuple[str | None, int]:
    """Each block of ``path``, evicted from the page cache and read back, against the
    crc32 of what arrived: why not (None when every one matches), and the whole file's
    crc32 as read back."""
    whole = 0
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        for offset, (length, crc) in sorted(crcs.items()):
            data = os.pread(fd, length, offset)
            if zlib.crc32(data) != crc:
                return f"bytes {offset}-{offset + length} differ from what the store sent", 0
            whole = zlib.crc32(data, whole)
    finally:
        os.close(fd)
    return None, whole


def _still_to_copy(
    files: list[FileCopy],
    dest_dir: Path,
    state: dict[str, Any],
    etags: dict[str, str],
    force: bool,
) -> list[FileCopy]:
    """The files DEST does not hold yet as verified copies (the others marked so); a
    final file that differs is refused unless ``force``; stale partial files removed."""
    todo = []
    for f in files:
        final = dest_dir / f.relative
        stale = final.with_name(final.name + PARTIAL_SUFFIX)
        if stale.exists():
            stale.unlink()  # ours, from an interrupted run
        if final.exists() or final.is_symlink():
            kept = state.get(f.relative) or {}
            if (
                final.is_file()
                and final.stat().st_size == f.size_bytes
                and kept.get("etag") == etags[f.relative]
                and kept.get("size") == f.size_bytes
                and kept.get("crc32") == _crc_of(final)
            ):
                f.status, f.crc32 = "already-there", kept.get("crc32")
                continue
            if not force:
                raise CopyRefused(
                    f"{final} exists and is not this copy of {f.source}: refusing to"
                    " overwrite it (--force to replace it)"
                )
        todo.append(f)
    return todo


def _crc_of(path: Path) -> str:
    """The crc32 of the file at ``path`` (a kept copy, checked against its record)."""
    crc = 0
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            crc = zlib.crc32(block, crc)
    return f"{crc:08x}"


def _read_state(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _write_state(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + PARTIAL_SUFFIX)
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, path)
