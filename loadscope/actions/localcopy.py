"""``loadscope copy``: the model to a local disk, verified, resumable, never touching the source.

What is copied: the weight files of TARGET and the small files beside them
that a loader needs (``config.json``, tokenizer files, ``*.json``, ``*.txt``,
``*.model``, ``*.tiktoken``, ``*.py``), with their paths relative to the model
folder (a Hugging Face snapshot's layout is preserved; its symlinks into
``blobs/`` are followed, so DEST holds regular files a loader can open).

How, for each file: free space for everything still to copy is checked before
the first byte is written; the source is read as the ``auto`` strategy reads a cold
file (many large requests in flight: ``O_DIRECT`` where the filesystem allows it,
buffered ``pread`` where it refuses it or the page cache already holds the file); the
file is written under a temporary name
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

May import: ``loadscope.model``, ``loadscope.loaders`` (how ``auto`` reads),
``loadscope.probes``, ``loadscope.base``, :mod:`loadscope.actions.throughput` and
:mod:`loadscope.actions.copydest` (the destination folder) and
:mod:`loadscope.actions.blockcopy` (one file's blocks copied and read back).
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

from loadscope.actions.blockcopy import ALIGN, BlockCopy, CopyRun, verify_back
from loadscope.actions.copydest import CopyError, CopyRefused, _prepare_dest
from loadscope.actions.throughput import rate, timing_fields
from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.base.safeio import STALL_TIMEOUT_S, open_regular
from loadscope.base.units import format_bytes
from loadscope.loaders.autoread import KNOBS, RESIDENT_ENOUGH
from loadscope.model.targets import Target, read_index
from loadscope.probes.pagecache import sampled_residency
from loadscope.probes.result import Unavailable


def _auto_default(name: str) -> int:
    """The ``auto`` strategy's default for a cold file's reads (``threads``, ``block_bytes``)."""
    return int(next(k.default for k in KNOBS if k.name == name))


PARTIAL_SUFFIX = ".loadscope-partial"
#: The source is read as ``auto`` reads a cold file: this many requests in flight, each
#: this large (12 x 1 MiB: on an emulated 5 ms disk, 18x a single-stream load).
DEFAULT_BLOCK = _auto_default("block_bytes")
DEFAULT_THREADS = _auto_default("threads")
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
    #: How its source was read: "O_DIRECT", or "buffered pread" and why.
    read: str | None = None


@dataclass(slots=True)
class CopyReport:
    source_root: str
    dest: str
    files: list[FileCopy]
    bytes_copied: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: The source's bytes read (the copies', and the checks of files already in DEST), and
    #: the wall time with at least one source read in flight: the rate the source gave.
    source_bytes_read: int = 0
    read_seconds: float = 0.0
    #: The wall time with at least one write or fsync into DEST in flight.
    write_seconds: float = 0.0
    #: Reading the copies back from DEST to compare them with the source.
    verify_seconds: float = 0.0
    #: Requests in flight and bytes per request of the source's reads.
    threads: int = DEFAULT_THREADS
    block_bytes: int = DEFAULT_BLOCK

    @property
    def bytes_per_s(self) -> float | None:
        return rate(self.bytes_copied, self.seconds)

    @property
    def read_bytes_per_s(self) -> float | None:
        """The source's read rate while it was being read (not the whole copy's)."""
        return rate(self.source_bytes_read, self.read_seconds)

    @property
    def write_bytes_per_s(self) -> float | None:
        """DEST's write rate (writes and fsync) while it was being written."""
        return rate(self.bytes_copied, self.write_seconds)

    def read_methods(self) -> dict[str, int]:
        """How the source was read -> the bytes read that way (files may differ: one the
        page cache holds is read buffered, as ``auto`` maps it)."""
        out: dict[str, int] = {}
        for f in self.files:
            if f.read:
                out[f.read] = out.get(f.read, 0) + f.size_bytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def to_dict(self) -> dict[str, object]:
        return {
            "schema_version": 1,
            "source": self.source_root,
            "dest": self.dest,
            **timing_fields("bytes_copied", self.bytes_copied, self.seconds),
            "source_read": {
                **timing_fields("bytes", self.source_bytes_read, self.read_seconds),
                "how": self.read_methods(),
                "threads": self.threads,
                "block_bytes": self.block_bytes,
            },
            "write": timing_fields("bytes", self.bytes_copied, self.write_seconds),
            "verify_seconds": round(self.verify_seconds, 4),
            "files": [
                {
                    "relative": f.relative,
                    "size_bytes": f.size_bytes,
                    "status": f.status,
                    "crc32": f.crc32,
                    "read": f.read,
                }
                for f in self.files
            ],
            "notes": self.notes,
        }


class Ticker:
    """The bytes a copy has written so far, from any thread, said to ``progress``
    (done, of ``need``, seconds since the start) at each block."""

    def __init__(self, need: int, progress: Progress | None) -> None:
        self.need, self.progress = need, progress
        self.done, self.start, self.lock = 0, time.monotonic(), threading.Lock()

    def __call__(self, n: int) -> None:
        with self.lock:
            self.done += n
        if self.progress is not None:
            self.progress(self.done, self.need, time.monotonic() - self.start)


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
    if threads < 1 or block_bytes < ALIGN:
        raise LoadscopeError(f"threads must be >= 1 and block_bytes >= {ALIGN}")
    files = plan(target)
    report = CopyReport(str(root), str(dest_dir), files, threads=threads, block_bytes=block_bytes)
    run = CopyRun(threads, block_bytes, cancel or threading.Event(), stall_timeout_s)
    created, lock_fd = _prepare_dest(dest_dir)
    try:
        return _copy_into(files, report, dest_dir, created, force, progress, run)
    finally:
        os.close(lock_fd)  # releases the flock
        report.source_bytes_read = run.source_bytes
        report.read_seconds = run.reads.seconds
        report.write_seconds = run.writes.seconds
        report.verify_seconds = run.verify_seconds


def _copy_into(
    files: list[FileCopy],
    report: CopyReport,
    dest_dir: Path,
    created: bool,
    force: bool,
    progress: Progress | None,
    run: CopyRun,
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
                crc = _same_as_source(f, final, run)
                if crc is not None:
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
    stop = run.stop
    tick = Ticker(need, progress)
    try:
        for f in todo:
            if stop.is_set():
                break
            _copy_one(f, dest_dir, run, tick)
    finally:
        report.seconds = time.monotonic() - tick.start
        report.bytes_copied = tick.done
    if stop.is_set() and any(f.status == "pending" for f in files):
        left = sum(1 for f in files if f.status == "pending")
        raise CopyCancelled(
            f"stopped: {left} file(s) not copied yet; rerun the same command to resume"
            " (files already verified are kept)"
        )
    return report


def _open_source(path: str, block_bytes: int) -> tuple[int, int | None, str]:
    """``path`` opened to be read as ``auto`` reads it: (its fd, an O_DIRECT fd on the same
    file or None, how it is read). Buffered where the page cache already holds most of it
    (as ``auto`` maps such a file), where the filesystem refuses O_DIRECT, or where the
    request size is not a multiple of the page size."""
    src = open_regular(path)
    try:
        try:
            fraction = sampled_residency(path, windows=16)
        except (Unavailable, OSError):
            fraction = None
        if fraction is not None and fraction >= RESIDENT_ENOUGH:
            return src, None, "buffered pread (already in the page cache)"
        if block_bytes % ALIGN:
            return src, None, "buffered pread (requests not a multiple of the page size)"
        try:
            direct = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            return src, None, f"buffered pread (the filesystem refuses O_DIRECT: {exc.strerror})"
        a, b = os.fstat(src), os.fstat(direct)
        if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
            os.close(direct)
            raise SourceChanged("replaced while it was opened", path=path)
        os.set_blocking(direct, True)
        return src, direct, "O_DIRECT"
    except BaseException:
        os.close(src)
        raise


def _same_as_source(f: FileCopy, final: Path, run: CopyRun) -> str | None:
    """The crc32 of ``final`` when its every block equals the source's, else None: the
    source read as a copy reads it (blocks in parallel, O_DIRECT where allowed), ``final``
    read back from DEST."""
    src, direct, how = _open_source(f.source, run.block_bytes)
    blocks: BlockCopy | None = None
    try:
        size = os.fstat(src).st_size
        if size != f.size_bytes:
            return None
        blocks = BlockCopy(src, direct, None, f.source, None, size, run, lambda n: None)
        blocks.run()
        f.read = blocks.said(how)
        if run.stop.is_set():
            raise CopyCancelled(
                "stopped while checking the files already there; rerun the same command"
                " to resume (files already verified are kept)"
            )
    finally:
        if blocks is None or not blocks.stuck:
            os.close(src)
            if direct is not None:
                os.close(direct)
    began = time.monotonic()
    try:
        return verify_back(final, blocks.crcs, run.block_bytes) if size else _EMPTY_CRC
    finally:
        run.verify_seconds += time.monotonic() - began


_EMPTY_CRC = f"{zlib.crc32(b''):08x}"


def _copy_one(f: FileCopy, dest_dir: Path, run: CopyRun, tick: Callable[[int], None]) -> None:
    final = dest_dir / f.relative
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(final.name + PARTIAL_SUFFIX)
    src, direct, how = _open_source(f.source, run.block_bytes)
    f.read = how
    try:
        out = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    except BaseException:
        os.close(src)
        if direct is not None:
            os.close(direct)
        raise
    completed = False
    blocks: BlockCopy | None = None
    try:
        before = _identity(os.fstat(src))
        size = before[2]
        if size != f.size_bytes:
            raise SourceChanged(
                f"changed size since it was checked ({f.size_bytes} -> {size} bytes)",
                path=f.source,
            )
        os.ftruncate(out, size)
        blocks = BlockCopy(src, direct, out, f.source, partial, size, run, tick)
        blocks.run()
        f.read = blocks.said(how)
        if run.stop.is_set():
            return
        f.crc32 = _commit(blocks, final, before)
        f.status = "copied"
        completed = True
    finally:
        # A copier stuck in pread() may still pwrite(): never reuse its fds.
        if blocks is None or not blocks.stuck:
            os.close(src)
            if direct is not None:
                os.close(direct)
            os.close(out)
        if not completed and partial.exists():
            partial.unlink()


def _commit(blocks: BlockCopy, final: Path, before: tuple[int, int, int, int, int]) -> str:
    """The copied file checked, made durable, read back and renamed to ``final``; its crc32.

    Every block was read from the file as it was when the copy began, or it is not the
    same file: a write in the middle would give a copy of neither version.
    """
    src, out, source, partial = blocks.src, blocks.out, blocks.source, blocks.partial
    assert out is not None and partial is not None  # a copy's blocks, not a check's
    _check_unchanged(src, source, before)
    with blocks.copy_run.writes:
        os.fsync(out)
    os.posix_fadvise(out, 0, 0, os.POSIX_FADV_DONTNEED)  # read back what is on disk
    began = time.monotonic()
    crc = verify_back(partial, blocks.crcs, blocks.block_bytes) if blocks.size else _EMPTY_CRC
    blocks.copy_run.verify_seconds += time.monotonic() - began
    if crc is None or os.fstat(out).st_size != blocks.size:
        raise CopyError(f"{partial}: read back differs from {source}; not renamed")
    _check_unchanged(src, source, before)
    os.replace(partial, final)
    _fsync_dir(final.parent)
    return crc


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
