"""``loadscope copy``: the model to a local disk, verified, resumable, never touching the source.

What is copied: the weight files of TARGET and the small files beside them
that a loader needs (``config.json``, tokenizer files, ``*.json``, ``*.txt``,
``*.model``, ``*.tiktoken``, ``*.py``), with their paths relative to the model
folder (a Hugging Face snapshot's layout is preserved; its symlinks into
``blobs/`` are followed, so DEST holds regular files a loader can open).

How, for each file: free space for everything still to copy is checked before
the first byte is written; the file is written under a temporary name
(``NAME.loadscope-partial``) in parallel blocks, fsynced, evicted from the page
cache and read back to compare its size and crc32 with the source's (read once,
while copying), and only then renamed to its final name (``os.replace``, then
the directory is fsynced). So a file under its final name is always complete and
verified. The source's identity (device, inode, size, mtime, ctime) is taken when
its copy begins and checked again before the rename: a file another process wrote
to meanwhile is not passed off as a copy (:class:`SourceChanged`). DEST is locked
with ``flock`` on the directory for the whole copy, so a second copy into it is
refused instead of truncating the first one's partial files. A rerun after an
interruption (Ctrl-C, SIGKILL, a reboot) skips the files already there whose size
and digest match the source, removes stale partial files, and copies the rest; a
final file that differs from the source is never overwritten without ``force``.

The source is opened read-only, never written, moved or deleted; DEST may not
be inside the model folder, nor the model inside DEST.

May import: ``loadscope.model``, ``loadscope.base``, :mod:`loadscope.actions.throughput`
and :mod:`loadscope.actions.copydest` (the destination folder).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loadscope.actions.copydest import CopyError, CopyRefused, _prepare_dest
from loadscope.actions.throughput import rate, timing_fields
from loadscope.base.errors import ExitCode, LoadscopeError, ReadFailed
from loadscope.base.safeio import STALL_TIMEOUT_S, note_stuck, open_regular, pread_exactly
from loadscope.base.units import format_bytes
from loadscope.model.targets import Target, read_index

PARTIAL_SUFFIX = ".loadscope-partial"
DEFAULT_BLOCK = 16 << 20
DEFAULT_THREADS = 4
#: Room kept free on DEST beyond the files (metadata, other writers).
SPACE_MARGIN = 64 << 20
SIDECAR_SUFFIXES = (".json", ".txt", ".model", ".tiktoken", ".py", ".jinja")

Progress = Callable[[int, int, float], None]  # bytes done, bytes total, seconds


class NotEnoughSpace(CopyError):
    exit_code = ExitCode.RESOURCES


class CopyCancelled(CopyError):
    exit_code = ExitCode.INTERRUPTED


@dataclass(slots=True)
class FileCopy:
    source: str
    relative: str
    size_bytes: int
    status: str = "pending"  # copied | already-there | pending
    crc32: str | None = None


@dataclass(slots=True)
class CopyReport:
    source_root: str
    dest: str
    files: list[FileCopy]
    bytes_copied: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def bytes_per_s(self) -> float | None:
        return rate(self.bytes_copied, self.seconds)

    def to_dict(self) -> dict[str, object]:
        return {
            "schema_version": 1,
            "source": self.source_root,
            "dest": self.dest,
            **timing_fields("bytes_copied", self.bytes_copied, self.seconds),
            "files": [
                {
                    "relative": f.relative,
                    "size_bytes": f.size_bytes,
                    "status": f.status,
                    "crc32": f.crc32,
                }
                for f in self.files
            ],
            "notes": self.notes,
        }


def plan(target: Target) -> list[FileCopy]:
    """The weight files and the loader's small files beside them, relative to the model root."""
    root = target.root if target.root.is_dir() else target.root.parent
    out: dict[str, FileCopy] = {}
    for wf in target.files:
        rel = os.path.relpath(wf.path, root)
        out[rel] = FileCopy(str(wf.path), rel, wf.size_bytes)
    for entry in sorted(root.iterdir()) if root.is_dir() else []:
        if entry.name in out or not entry.name.endswith(SIDECAR_SUFFIXES):
            continue
        if entry.name.endswith(".index.json") and not _indexes_copied_weights(entry, out):
            continue
        try:
            st = entry.stat()  # follows a snapshot's symlinks into blobs/
        except OSError:
            continue
        if entry.is_file() and st.st_size <= 256 << 20:
            out[entry.name] = FileCopy(str(entry), entry.name, st.st_size)
    return [out[k] for k in sorted(out)]


def _indexes_copied_weights(index: Path, copied: dict[str, FileCopy]) -> bool:
    """Whether every shard ``index`` names is among the files copied: an index of shards
    left behind (the other format's, or the rest of a model one shard of which was named)
    would send a loader to files DEST does not hold."""
    try:
        shards = {posixpath.normpath(s) for s in read_index(index).values()}
    except LoadscopeError:
        return False  # not an index a loader could follow either
    return shards <= set(copied)


def _check_paths(root: Path, dest: Path) -> None:
    src = root.resolve()
    dst = dest.resolve() if dest.exists() else dest.absolute()
    if dst == src or src in dst.parents:
        raise CopyRefused(f"{dest} is inside the model folder {root}: choose another destination")
    if dst in src.parents:
        raise CopyRefused(f"the model {root} is inside {dest}: choose another destination")


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What says a file is still the one that was read: device, inode, size, mtime, ctime."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class SourceChanged(CopyError):
    """The source file was modified (or replaced) while it was copied."""

    exit_code = ExitCode.IO_ERROR


def _check_unchanged(fd: int, path: str, before: tuple[int, int, int, int, int]) -> None:
    after_open = _identity(os.fstat(fd))
    try:
        after_path = _identity(os.stat(path))
    except OSError:
        after_path = None
    if after_open != before or after_path != before:
        raise SourceChanged(
            "changed while it was copied (size, modification time or inode differ from when"
            " the copy began): the copy is not renamed; rerun when nothing writes to it",
            path=path,
        )


def _crc_of(path: str, block: int = DEFAULT_BLOCK) -> str:
    fd = open_regular(path)
    try:
        crc = 0
        while chunk := os.read(fd, block):
            crc = zlib.crc32(chunk, crc)
        return f"{crc:08x}"
    finally:
        os.close(fd)


def _source_crc_and_size(path: str) -> tuple[str, int]:
    return _crc_of(path), os.stat(path).st_size


def copy_model(
    target: Target,
    dest: str | os.PathLike[str],
    *,
    threads: int = DEFAULT_THREADS,
    block_bytes: int = DEFAULT_BLOCK,
    force: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    stall_timeout_s: float = STALL_TIMEOUT_S,
) -> CopyReport:
    root = target.root if target.root.is_dir() else target.root.parent
    dest_dir = Path(dest)
    _check_paths(root, dest_dir)
    files = plan(target)
    report = CopyReport(str(root), str(dest_dir), files)
    created, lock_fd = _prepare_dest(dest_dir)
    try:
        return _copy_into(
            files,
            report,
            dest_dir,
            created,
            threads,
            block_bytes,
            force,
            progress,
            cancel,
            stall_timeout_s,
        )
    finally:
        os.close(lock_fd)  # releases the flock


def _copy_into(
    files: list[FileCopy],
    report: CopyReport,
    dest_dir: Path,
    created: bool,
    threads: int,
    block_bytes: int,
    force: bool,
    progress: Progress | None,
    cancel: threading.Event | None,
    stall_timeout_s: float,
) -> CopyReport:
    # What is already there: verified files are kept, differing ones refuse (unless force).
    todo: list[FileCopy] = []
    for f in files:
        final = dest_dir / f.relative
        stale = final.with_name(final.name + PARTIAL_SUFFIX)
        if stale.exists():
            stale.unlink()  # ours, from an interrupted run: never a final name
        if final.exists() or final.is_symlink():
            if final.is_file() and final.stat().st_size == f.size_bytes:
                crc, _ = _source_crc_and_size(f.source)
                if _crc_of(str(final)) == crc:
                    f.status, f.crc32 = "already-there", crc
                    continue
            if not force:
                raise CopyRefused(
                    f"{final} exists and differs from the source: refusing to overwrite it"
                    " (--force to replace it)"
                )
        todo.append(f)
    need = sum(f.size_bytes for f in todo)
    probe_dir = next((p for p in (dest_dir, *dest_dir.absolute().parents) if p.exists()), Path("/"))
    free = shutil.disk_usage(probe_dir).free
    if todo and need + SPACE_MARGIN > free:
        if created:
            with contextlib.suppress(OSError):
                dest_dir.rmdir()
        raise NotEnoughSpace(
            f"{dest_dir}: the copy needs {format_bytes(need)} (+{format_bytes(SPACE_MARGIN)}"
            f" margin) and {probe_dir} has {format_bytes(free)} free:"
            f" {format_bytes(need + SPACE_MARGIN - free)} missing; nothing was written"
        )
    stop = cancel or threading.Event()
    start = time.monotonic()
    done = [0]
    lock = threading.Lock()

    def tick(n: int) -> None:
        with lock:
            done[0] += n
        if progress is not None:
            progress(done[0], need, time.monotonic() - start)

    try:
        for f in todo:
            if stop.is_set():
                break
            _copy_one(f, dest_dir, threads, block_bytes, stop, tick, stall_timeout_s)
    finally:
        report.seconds = time.monotonic() - start
        report.bytes_copied = done[0]
    if stop.is_set() and any(f.status == "pending" for f in files):
        left = sum(1 for f in files if f.status == "pending")
        raise CopyCancelled(
            f"stopped: {left} file(s) not copied yet; rerun the same command to resume"
            " (files already verified are kept)"
        )
    return report


def _copy_one(
    f: FileCopy,
    dest_dir: Path,
    threads: int,
    block_bytes: int,
    stop: threading.Event,
    tick: Callable[[int], None],
    stall_timeout_s: float = STALL_TIMEOUT_S,
) -> None:
    final = dest_dir / f.relative
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    src = open_regular(f.source)
    out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    completed = False
    blocks: _BlockCopy | None = None
    try:
        before = _identity(os.fstat(src))
        size = before[2]
        if size != f.size_bytes:
            raise SourceChanged(
                f"changed size since it was checked ({f.size_bytes} -> {size} bytes)",
                path=f.source,
            )
        os.ftruncate(out, size)
        blocks = _BlockCopy(src, out, f.source, partial, size, block_bytes, stop, tick)
        blocks.run(threads, stall_timeout_s)
        if stop.is_set():
            return
        f.crc32 = _commit(blocks, final, before)
        f.status = "copied"
        completed = True
    finally:
        # A copier stuck in pread() may still pwrite(): never reuse its fds.
        if blocks is None or not blocks.stuck:
            os.close(src)
            os.close(out)
        if not completed and partial.exists():
            partial.unlink()


class _BlockCopy:
    """One file's blocks copied from ``src`` to ``out`` by a pool of threads, each block's
    crc32 kept (offset -> (crc32, length)) to check the copy read back."""

    def __init__(
        self,
        src: int,
        out: int,
        source: str,
        partial: Path,
        size: int,
        block_bytes: int,
        stop: threading.Event,
        tick: Callable[[int], None],
    ) -> None:
        self.src, self.out, self.source, self.partial = src, out, source, partial
        self.size, self.block_bytes, self.stop, self.tick = size, block_bytes, stop, tick
        self.crcs: dict[int, tuple[int, int]] = {}
        self.errors: list[BaseException] = []
        self.abort = threading.Event()  # set when the caller is interrupted (Ctrl-C)
        #: Set when the copiers stopped answering: their fds must stay open (see _copy_one).
        self.stuck = False
        self._offsets = iter(range(0, size, block_bytes))
        self._lock = threading.Lock()
        self._in_flight: dict[int, int] = {}  # copier -> the offset it reads
        self._moved = time.monotonic()

    def run(self, threads: int, stall_timeout_s: float) -> None:
        """Copy every block (or stop early with ``stop``); the first copier's error, or
        :class:`ReadFailed` when no byte moved for ``stall_timeout_s``, is raised."""
        pool = [threading.Thread(target=self._worker, daemon=True) for _ in range(max(1, threads))]
        try:
            for t in pool:
                t.start()
            while any(t.is_alive() for t in pool):
                for t in pool:
                    t.join(timeout=0.1)
                if time.monotonic() - self._moved > stall_timeout_s:
                    self._give_up(pool, stall_timeout_s)
        except BaseException:
            self.abort.set()  # no thread may write after the caller closes the fds
            if not self.stuck:
                for t in pool:
                    if t.ident is not None:  # a signal may land between two start() calls
                        t.join()
            raise
        if self.errors:
            raise self.errors[0]

    def _give_up(self, pool: list[threading.Thread], stall_timeout_s: float) -> None:
        self.abort.set()
        self.stuck = True  # copiers blocked in the kernel keep their fds
        where = ", ".join(str(o) for o in sorted(set(self._in_flight.values()))[:3])
        note_stuck(f"{self.source} at offset {where}", pool)
        raise ReadFailed(
            f"no byte copied for {stall_timeout_s:g} s (reading at offset {where}):"
            " the storage stopped answering; nothing renamed",
            path=self.source,
        )

    def _worker(self) -> None:
        try:
            while not self.stop.is_set() and not self.abort.is_set() and not self.errors:
                with self._lock:
                    off = next(self._offsets, None)
                if off is None:
                    return
                self._in_flight[threading.get_ident()] = off
                if not self._copy_block(off):
                    return
        except BaseException as exc:  # noqa: BLE001  (re-raised by run)
            self.errors.append(exc)

    def _copy_block(self, off: int) -> bool:
        """The block at ``off`` read, written and counted; False when aborted meanwhile."""
        length = min(self.block_bytes, self.size - off)
        data = bytearray(length)
        pread_exactly(self.src, memoryview(data), off, self.source)
        if self.abort.is_set():
            return False
        view = memoryview(data)
        written = 0
        try:
            while written < length:
                written += os.pwrite(self.out, view[written:], off + written)
        except OSError as exc:
            raise CopyError(
                f"writing at offset {off + written}: {exc.strerror}", path=self.partial
            ) from None
        self.crcs[off] = (zlib.crc32(data), length)
        self._moved = time.monotonic()
        self.tick(length)
        return True


def _commit(blocks: _BlockCopy, final: Path, before: tuple[int, int, int, int, int]) -> str:
    """The copied file checked, made durable, read back and renamed to ``final``; its crc32.

    Every block was read from the file as it was when the copy began, or it is not the
    same file: a write in the middle would give a copy of neither version.
    """
    src, out, source, partial = blocks.src, blocks.out, blocks.source, blocks.partial
    _check_unchanged(src, source, before)
    os.fsync(out)
    os.posix_fadvise(out, 0, 0, os.POSIX_FADV_DONTNEED)  # read back what is on disk
    crc = (
        _verify_back(partial, blocks.crcs, blocks.block_bytes)
        if blocks.size
        else f"{zlib.crc32(b''):08x}"
    )
    if crc is None or os.fstat(out).st_size != blocks.size:
        raise CopyError(f"{partial}: read back differs from {source}; not renamed")
    _check_unchanged(src, source, before)
    os.replace(partial, final)
    _fsync_dir(final.parent)
    return crc


def _verify_back(path: Path, crcs: dict[int, tuple[int, int]], block_bytes: int) -> str | None:
    """Read ``path`` back block by block: each block's crc32 must equal the source's.
    Returns the whole file's crc32, or None at the first difference."""
    fd = open_regular(path)
    try:
        whole = 0
        for off in sorted(crcs):
            want, length = crcs[off]
            chunk = os.pread(fd, length, off)
            if len(chunk) != length or zlib.crc32(chunk) != want:
                return None
            whole = zlib.crc32(chunk, whole)
        if os.pread(fd, 1, sum(n for _, n in crcs.values())):
            return None  # longer than the source
        return f"{whole:08x}"
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pointer_lines(dest: str, weights: Sequence[str] = ()) -> list[str]:
    """How to point the user's stack at the copy: safe to paste (the path quoted for
    Python and for the shell, so a space or a quote in it survives). ``weights`` are the
    copied weight files, relative to ``dest``: the library lines name the ones there."""
    import shlex

    sh = shlex.quote(dest)
    root = dest.rstrip("/") or "/"
    st = [w for w in weights if w.lower().endswith(".safetensors")]
    pt = [w for w in weights if not w.lower().endswith(".safetensors")]
    if len(st) == 1:
        library = f"safetensors: load_file({os.path.join(root, st[0])!r})"
    elif len(pt) == 1 and not st:
        library = f"torch: torch.load({os.path.join(root, pt[0])!r}, weights_only=True)"
    else:  # shards (or not said): the one call that reads every one of them
        shards = f"  # its {len(st or pt)} shards" if st or pt else ""
        library = (
            f"{'torch' if pt and not st else 'safetensors'}: loadscope.load_model({dest!r}){shards}"
        )
    return [
        f"transformers: AutoModel.from_pretrained({dest!r})",
        f"vLLM: vllm serve {sh}   (or --model {sh})",
        f"SGLang: python -m sglang.launch_server --model-path {sh}",
        library,
        "HF_HUB_CACHE: leave it as it is; pass the copy's path where the repo id went",
    ]


def break_even(copy_s: float, cold_here_s: float, cold_copy_s: float) -> int | None:
    """Loads after which the copy has paid for itself; None when it never does."""
    saved = cold_here_s - cold_copy_s
    if saved <= 0:
        return None
    import math

    return max(1, math.ceil(copy_s / saved))
