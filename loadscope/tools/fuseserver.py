"""The emulated slow disk's server: a read-only FUSE passthrough that behaves like network storage.

Runs in the emulator's own process (``loadscope emulate --serve-here``). Every read
request the kernel sends waits a configured latency (plus jitter) and is paced to a
bandwidth cap shared by all requests, as on a network link, while at most
``threads`` requests are worked on at once; injected faults fail or stall reads.
Once the mount appears, :func:`serve` sets its readahead and ``max_background``
through sysfs and prints the ready line (:data:`READY_LINE`) the client waits for.
May import mfusepy (through :func:`~loadscope.tools.emucommon.import_mfusepy`),
``loadscope.probes``, ``loadscope.base`` and the emulator's lower modules
(:mod:`loadscope.tools.emucommon`, :mod:`loadscope.tools.emumounts`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadscope.probes.blockdev import fuse_connection_id
from loadscope.probes.mounts import Mount, mount_of, read_mountinfo
from loadscope.tools.emucommon import (
    EmulatorError,
    EmulatorSettings,
    check_source,
    die_with_parent,
    import_mfusepy,
    require_fuse,
    started_by,
)
from loadscope.tools.emumounts import EMULATOR_SOURCE_PREFIX

#: What the server prints on stdout once it is mounted and configured (then ``MAJOR:MINOR``).
READY_LINE = "loadscope-emulate: ready"
#: How long a mount may take to appear, on the server's side and the client's.
MOUNT_TIMEOUT_S = 15.0


class _Link:
    """Latency, jitter and a shared bandwidth cap, applied to each read request."""

    def __init__(self, settings: EmulatorSettings) -> None:
        self.settings = settings
        self.lock = threading.Lock()
        self.free_at = 0.0
        self.rng = random.Random(settings.seed)

    def wait(self, size: int) -> None:
        s = self.settings
        with self.lock:
            now = time.monotonic()
            start = max(now, self.free_at)
            if s.bandwidth_bytes_per_s:
                self.free_at = start + size / s.bandwidth_bytes_per_s
            else:
                self.free_at = start
            jitter = self.rng.uniform(-s.jitter_s, s.jitter_s) if s.jitter_s else 0.0
            done_at = self.free_at + max(0.0, s.latency_s + jitter)
        delay = done_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)


class _Faults:
    """Injected failures: EIO after N bytes, a stall after N bytes, random EIO."""

    def __init__(self, settings: EmulatorSettings) -> None:
        self.settings = settings
        self.lock = threading.Lock()
        self.served = 0
        self.rng = random.Random(settings.seed + 1)
        self.released = threading.Event()  # set at unmount: stalled reads give up then

    def before_read(self, size: int) -> int | None:
        """The errno to fail this read with, or None to serve it (after a stall, maybe)."""
        s = self.settings
        with self.lock:
            served = self.served
            self.served += size
            unlucky = s.eio_rate > 0 and self.rng.random() < s.eio_rate
        if s.stall_after_bytes is not None and served >= s.stall_after_bytes:
            self.released.wait()  # "never answers": until the mount goes away
            return errno.EIO
        if s.fail_after_bytes is not None and served >= s.fail_after_bytes:
            return errno.EIO
        return errno.EIO if unlucky else None


class _RequestLogWriter:
    def __init__(self, path: str | None) -> None:
        self.lock = threading.Lock()
        # Line-buffered: a reader must see every request at once, and RELEASE (our other
        # flush point) reaches the daemon asynchronously, after close() has returned.
        try:
            self.fh = open(path, "a", buffering=1, encoding="ascii") if path else None  # noqa: SIM115
        except OSError as exc:
            raise EmulatorError(
                f"cannot write the request log {path}: {exc.strerror or exc}"
            ) from None

    def write(self, path: str, offset: int, size: int) -> None:
        if self.fh is None:
            return
        line = f"{time.monotonic_ns()} {offset} {size} {path}\n"
        with self.lock:
            self.fh.write(line)

    def flush(self) -> None:
        if self.fh is not None:
            with self.lock:
                self.fh.flush()


class _SlowPassthrough:
    """The FUSE operations over SRC: metadata passes through, each read crosses the link.

    Mixed in before ``mfusepy.Operations`` by :func:`make_operations` (mfusepy is imported
    only then). Its own state is in ``_``-prefixed attributes: mfusepy takes any attribute
    named like a FUSE callback (``link``, ``flush``, ``lock``) for one.
    """

    use_ns = True

    def __init__(
        self, source: Path, settings: EmulatorSettings, fuse_error: Callable[[int], Exception]
    ) -> None:
        self._source = source
        self._settings = settings
        self._error = fuse_error
        self._link = _Link(settings)
        self._faults = _Faults(settings)
        self._log = _RequestLogWriter(settings.log_requests)
        # libfuse starts worker threads on demand; this caps how many requests the "server"
        # works on at once, like a network filesystem daemon with N threads.
        self._servers = threading.BoundedSemaphore(settings.threads)

    def _real(self, path: str) -> str:
        # FUSE paths are absolute inside the mount; keep them inside SRC.
        return os.path.join(self._source, path.lstrip("/"))

    def init_with_config(self, conn: Any, config: Any) -> None:
        settings = self._settings
        if conn is not None:
            conn.max_background = settings.max_background
            conn.congestion_threshold = max(1, settings.max_background * 3 // 4)
            conn.max_readahead = settings.readahead_kb * 1024
            # libfuse derives the kernel's max_pages (largest request) from max_write.
            conn.max_write = settings.max_read_kb * 1024
            conn.max_read = settings.max_read_kb * 1024
        if config is not None:
            config.kernel_cache = 0 if settings.direct_io else 1
            config.direct_io = 1 if settings.direct_io else 0
            config.entry_timeout = config.attr_timeout = 3600.0

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        try:
            # Follow symlinks: a Hugging Face snapshot is links into ../../blobs, which
            # must be served through the slow disk, not resolved around it.
            st = os.stat(self._real(path))
        except OSError as exc:
            raise self._error(exc.errno or errno.EIO) from None
        out = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid")}
        out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return out

    def readdir(self, path: str, fh: int) -> list[str]:
        try:
            return [".", "..", *os.listdir(self._real(path))]
        except OSError as exc:
            raise self._error(exc.errno or errno.EIO) from None

    def open(self, path: str, flags: int) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise self._error(errno.EROFS)
        try:
            return os.open(self._real(path), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise self._error(exc.errno or errno.EIO) from None

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._log.write(path, offset, size)
        failure = self._faults.before_read(size)
        if failure is not None:
            raise self._error(failure)
        with self._servers:
            self._link.wait(size)
            return os.pread(fh, size, offset)

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        self._log.flush()
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._real(path))
        return {k: getattr(sv, k) for k in _STATVFS_FIELDS}

    def access(self, path: str, amode: int) -> int:
        if amode & os.W_OK:
            raise self._error(errno.EROFS)
        if not os.path.lexists(self._real(path)):
            raise self._error(errno.ENOENT)
        return 0

    def destroy(self, path: str) -> None:
        self._faults.released.set()  # stalled reads give up: the mount is going away
        self._log.flush()


_STATVFS_FIELDS = (
    "f_bsize",
    "f_frsize",
    "f_blocks",
    "f_bfree",
    "f_bavail",
    "f_files",
    "f_ffree",
    "f_namemax",
)


def make_operations(source: Path, settings: EmulatorSettings) -> Any:
    """The mfusepy operations object that serves ``source`` slowly."""
    mfusepy = import_mfusepy()
    operations_base: Any = mfusepy.Operations

    class SlowPassthrough(_SlowPassthrough, operations_base):  # type: ignore[misc]
        pass

    return SlowPassthrough(source, settings, mfusepy.FuseOSError)


def _configure_when_mounted(
    mountpoint: str, settings: EmulatorSettings, ready: threading.Event
) -> None:
    """After INIT, set readahead and max_background through sysfs, then say ready on stdout."""
    deadline = time.monotonic() + MOUNT_TIMEOUT_S
    mount: Mount | None = None
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            found = mount_of(mountpoint, read_mountinfo())
            if found.mount_point == os.path.realpath(mountpoint) and found.fstype.startswith(
                "fuse"
            ):
                mount = found
                break
        time.sleep(0.02)
    if mount is None:
        print("loadscope-emulate: mount did not appear", file=sys.stderr, flush=True)
        return
    # A stat through the mount returns only after INIT, whose reply resets the readahead.
    os.stat(mountpoint)
    problems = apply_connection_settings(mount.major, mount.minor, settings)
    for p in problems:
        print(f"loadscope-emulate: {p}", file=sys.stderr, flush=True)
    print(f"{READY_LINE} {mount.major}:{mount.minor}", flush=True)
    ready.set()


def apply_connection_settings(major: int, minor: int, settings: EmulatorSettings) -> list[str]:
    """Write read_ahead_kb (bdi) and max_background (fusectl); return what could not be set."""
    problems = []
    bdi = Path(f"/sys/class/bdi/{major}:{minor}/read_ahead_kb")
    try:
        bdi.write_text(f"{settings.readahead_kb}\n")
    except OSError as exc:
        problems.append(f"cannot set {bdi}: {exc.strerror}")
    control = Path("/sys/fs/fuse/connections")
    if control.is_dir() and not any(control.iterdir()):
        # fusectl is how max_background is read back (and set on older libfuse); systemd
        # mounts it at boot, minimal containers do not.
        subprocess.run(
            ["mount", "-t", "fusectl", "fusectl", str(control)], capture_output=True, check=False
        )
    conn = control / str(fuse_connection_id(major, minor))
    if conn.is_dir():
        for name, value in (
            ("max_background", settings.max_background),
            ("congestion_threshold", max(1, settings.max_background * 3 // 4)),
        ):
            with contextlib.suppress(OSError):
                (conn / name).write_text(f"{value}\n")
    return problems


def serve(source: str, mountpoint: str, settings: EmulatorSettings) -> None:
    """Mount SRC at MOUNTPOINT and serve it until unmounted or signalled (blocks)."""

    src = check_source(source)
    mountpoint = os.path.abspath(mountpoint)
    if not Path(mountpoint).is_dir():
        raise EmulatorError(f"{mountpoint}: mount point is not a directory")
    require_fuse()
    die_with_parent(started_by())
    ready = threading.Event()
    threading.Thread(
        target=_configure_when_mounted, args=(mountpoint, settings, ready), daemon=True
    ).start()
    options: dict[str, Any] = {
        "foreground": True,
        "ro": True,
        "fsname": f"{EMULATOR_SOURCE_PREFIX}{src}",
        "subtype": "loadscope",
        "default_permissions": True,
        "allow_other": True,
    }
    if settings.max_read_kb:
        options["max_read"] = settings.max_read_kb * 1024
    try:
        import_mfusepy().FUSE(make_operations(src, settings), mountpoint, **options)
    except RuntimeError as exc:
        # fuse_main returns 8 when its loop ended on a signal (SIGINT/SIGTERM/SIGHUP): the
        # normal way to stop; it has unmounted by then. Anything else is a real failure.
        if str(exc) != "8":
            raise EmulatorError(
                f"libfuse could not serve {mountpoint} (fuse_main returned {exc})"
            ) from None
