"""An emulated slow disk: a read-only FUSE passthrough that behaves like network storage.

Every read request the kernel sends waits a configured latency (plus jitter)
and is paced to a bandwidth cap shared by all requests, as on a network link,
while several server threads let parallel readers overlap. The kernel page
cache is kept between opens (``kernel_cache``), so a second load is warm as on
a real network client. The mount's readahead (``/sys/class/bdi/<dev>/read_ahead_kb``)
and the connection's ``max_background`` are set explicitly, because they — not
the latency alone — decide which loader strategy wins (measured in
``benchmarks/RESULTS.md``): readahead 0 reproduces page-by-page faults, 128 KiB is
the common FUSE default, 8 MiB lets mmap stream.

The filesystem runs in its own process (``loadscope emulate``), so a test or a
benchmark can kill it without taking itself down; :func:`emulated_disk` starts
one, waits until it is mounted and configured, and always unmounts. The child
dies with its parent (``PR_SET_PDEATHSIG``) and unmounts on SIGINT/SIGTERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadscope.base.errors import ExitCode, LoadscopeError, PathNotFound
from loadscope.probes.blockdev import fuse_connection_id
from loadscope.probes.mounts import Mount, mount_of, read_mountinfo
from loadscope.probes.sysfs import read_int

READY_LINE = "loadscope-emulate: ready"
_MOUNT_TIMEOUT_S = 15.0


class EmulatorError(LoadscopeError):
    """The emulated disk cannot be mounted or configured here."""

    exit_code = ExitCode.UNSUPPORTED


@dataclass(frozen=True, slots=True)
class EmulatorSettings:
    """How slow the emulated disk is, and how the kernel is allowed to talk to it."""

    latency_s: float = 0.002
    jitter_s: float = 0.0005
    #: Shared by all requests, like a network link; None for no cap.
    bandwidth_bytes_per_s: float | None = None
    #: FUSE server threads: how many requests can wait their latency at once.
    threads: int = 16
    #: The mount's kernel readahead (0 = page-by-page faults, 128 = common default).
    readahead_kb: int = 128
    #: Largest read request the kernel may send (FUSE ``max_read``; 1 MiB = ``max_pages`` 256).
    max_read_kb: int = 1024
    #: Asynchronous requests the kernel keeps in flight (readahead is asynchronous).
    max_background: int = 12
    #: Bypass the page cache entirely (every read goes to the "network").
    direct_io: bool = False
    log_requests: str | None = None
    seed: int = 0
    #: Faults, for hardening tests: every read after this many bytes served fails with EIO;
    #: every read after this many bytes never answers (until unmount); this fraction of
    #: reads fails with EIO at random (seeded).
    fail_after_bytes: int | None = None
    stall_after_bytes: int | None = None
    eio_rate: float = 0.0

    def cli_args(self) -> list[str]:
        """The ``loadscope emulate`` options that reproduce these settings."""
        args = [
            f"--latency={self.latency_s * 1e3:g}ms",
            f"--jitter={self.jitter_s * 1e3:g}ms",
            f"--threads={self.threads}",
            f"--readahead-kb={self.readahead_kb}",
            f"--max-read-kb={self.max_read_kb}",
            f"--max-background={self.max_background}",
            f"--seed={self.seed}",
        ]
        if self.bandwidth_bytes_per_s:
            args.append(f"--bandwidth={self.bandwidth_bytes_per_s:.0f}B/s")
        if self.direct_io:
            args.append("--direct-io")
        if self.log_requests:
            args.append(f"--log-requests={self.log_requests}")
        if self.fail_after_bytes is not None:
            args.append(f"--fail-after={self.fail_after_bytes}B")
        if self.stall_after_bytes is not None:
            args.append(f"--stall-after={self.stall_after_bytes}B")
        if self.eio_rate:
            args.append(f"--eio-rate={self.eio_rate:g}")
        return args


# -- availability ----------------------------------------------------------------------------


def fuse_unavailable_reason() -> str | None:
    """Why the emulator cannot run here, or None when it can."""
    if not Path("/dev/fuse").exists():
        return "/dev/fuse is missing (no FUSE in this kernel or container)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not accessible to this user"
    if shutil.which("fusermount3") is None and shutil.which("fusermount") is None:
        return "fusermount3 is missing (Debian/Ubuntu: apt-get install fuse3)"
    try:
        _import_mfusepy()
    except (ImportError, OSError) as exc:
        return f"the FUSE binding is unavailable ({exc}); pip install 'loadscope[emulate]'"
    if os.geteuid() != 0:
        return "setting the mount's readahead needs root (sysfs is root-only)"
    return None


def _import_mfusepy() -> Any:
    """mfusepy, bound to libfuse 3 even where libfuse 2 is installed too (mfusepy prefers 2).

    libfuse 3 is needed for ``kernel_cache`` in the init config and requests over 128 KiB.
    """
    import ctypes.util

    if "mfusepy" not in sys.modules and not os.environ.get("FUSE_LIBRARY_PATH"):
        lib = ctypes.util.find_library("fuse3")
        if lib:
            os.environ["FUSE_LIBRARY_PATH"] = lib
    import mfusepy

    if mfusepy.fuse_version_major != 3:
        raise ImportError(
            f"libfuse {mfusepy.fuse_version_major} loaded; the emulator needs libfuse 3"
        )
    return mfusepy


# -- the filesystem (runs in the emulator process) --------------------------------------------


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
        self.fh = open(path, "a", buffering=1, encoding="ascii") if path else None  # noqa: SIM115

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


def _make_operations(source: Path, settings: EmulatorSettings) -> Any:
    mfusepy = _import_mfusepy()

    link = _Link(settings)
    faults = _Faults(settings)
    log = _RequestLogWriter(settings.log_requests)
    # libfuse starts worker threads on demand; this caps how many requests the "server"
    # works on at once, like a network filesystem daemon with N threads.
    servers = threading.BoundedSemaphore(settings.threads)

    def real(path: str) -> str:
        # FUSE paths are absolute inside the mount; keep them inside SRC.
        return os.path.join(source, path.lstrip("/"))

    operations_base: Any = mfusepy.Operations

    class SlowPassthrough(operations_base):  # type: ignore[misc]
        use_ns = True

        def init_with_config(self, conn: Any, config: Any) -> None:
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
                st = os.stat(real(path))
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None
            out = {
                k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid")
            }
            out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
            return out

        def readdir(self, path: str, fh: int) -> list[str]:
            try:
                return [".", "..", *os.listdir(real(path))]
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None

        def open(self, path: str, flags: int) -> int:
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise mfusepy.FuseOSError(errno.EROFS)
            try:
                return os.open(real(path), os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            log.write(path, offset, size)
            failure = faults.before_read(size)
            if failure is not None:
                raise mfusepy.FuseOSError(failure)
            with servers:
                link.wait(size)
                return os.pread(fh, size, offset)

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            log.flush()
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(real(path))
            return {
                k: getattr(sv, k)
                for k in (
                    "f_bsize",
                    "f_frsize",
                    "f_blocks",
                    "f_bfree",
                    "f_bavail",
                    "f_files",
                    "f_ffree",
                    "f_namemax",
                )
            }

        def access(self, path: str, amode: int) -> int:
            if amode & os.W_OK:
                raise mfusepy.FuseOSError(errno.EROFS)
            if not os.path.lexists(real(path)):
                raise mfusepy.FuseOSError(errno.ENOENT)
            return 0

        def destroy(self, path: str) -> None:
            faults.released.set()  # stalled reads give up: the mount is going away
            log.flush()

    return SlowPassthrough()


def die_with_parent() -> None:
    """PR_SET_PDEATHSIG: when whoever started us dies, we get SIGTERM (and unmount)."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        # The parent died before the request took effect (we were reparented): act now.
        os.kill(os.getpid(), signal.SIGTERM)


def _configure_when_mounted(
    mountpoint: str, settings: EmulatorSettings, ready: threading.Event
) -> None:
    """After INIT, set readahead and max_background through sysfs, then say ready on stdout."""
    deadline = time.monotonic() + _MOUNT_TIMEOUT_S
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


def check_source(source: str | os.PathLike[str]) -> Path:
    """The directory to serve, absolute; a missing or non-directory SRC is refused."""
    src = Path(source)
    if not src.exists():
        raise PathNotFound("no such directory to emulate", path=source)
    if not src.is_dir():
        raise EmulatorError(f"{os.fspath(source)}: not a directory to emulate")
    return src.resolve()


def serve(source: str, mountpoint: str, settings: EmulatorSettings) -> None:
    """Mount SRC at MOUNTPOINT and serve it until unmounted or signalled (blocks)."""

    src = check_source(source)
    mountpoint = os.path.abspath(mountpoint)
    if not Path(mountpoint).is_dir():
        raise EmulatorError(f"{mountpoint}: mount point is not a directory")
    reason = fuse_unavailable_reason()
    if reason:
        raise EmulatorError(f"cannot emulate a slow disk here: {reason}")
    die_with_parent()
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
        _import_mfusepy().FUSE(_make_operations(src, settings), mountpoint, **options)
    except RuntimeError as exc:
        # fuse_main returns 8 when its loop ended on a signal (SIGINT/SIGTERM/SIGHUP): the
        # normal way to stop; it has unmounted by then. Anything else is a real failure.
        if str(exc) != "8":
            raise EmulatorError(
                f"libfuse could not serve {mountpoint} (fuse_main returned {exc})"
            ) from None


# -- the client side: start, configure, read the log, always unmount --------------------------


@dataclass(frozen=True, slots=True)
class Request:
    t_ns: int
    offset: int
    size: int
    path: str


@dataclass
class RequestLog:
    """The emulator's record of every read request the kernel sent it."""

    path: Path

    def requests(self) -> list[Request]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="ascii", errors="replace").splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4:
                out.append(Request(int(parts[0]), int(parts[1]), int(parts[2]), parts[3]))
        return out

    def size_histogram(self) -> Counter[int]:
        return Counter(r.size for r in self.requests())

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError), open(self.path, "w"):
            pass


@dataclass
class EmulatedDisk:
    path: Path
    source: Path
    settings: EmulatorSettings
    device: tuple[int, int]
    log: RequestLog | None
    process: subprocess.Popen[str] = field(repr=False)


#: What the emulator's mounts look like in mountinfo: ``fuse.loadscope``, and a source
#: naming the directory served. Nothing else is ever unmounted by loadscope.
EMULATOR_FSTYPE = "fuse.loadscope"
EMULATOR_SOURCE_PREFIX = "loadscope-emulate:"


def is_mounted(mountpoint: str | os.PathLike[str]) -> bool:
    target = os.path.realpath(mountpoint)
    with contextlib.suppress(Exception):
        return any(m.mount_point == target for m in read_mountinfo())
    return False


def mounts_at(mountpoint: str | os.PathLike[str]) -> list[Mount]:
    """Every mount whose mount point is exactly ``mountpoint`` (stacked ones too)."""
    target = os.path.realpath(mountpoint)
    with contextlib.suppress(Exception):
        return [m for m in read_mountinfo() if m.mount_point == target]
    return []


def is_emulator_mount(mount: Mount) -> bool:
    """True for a mount the emulator made (live, or stale after its server died)."""
    return mount.full_fstype == EMULATOR_FSTYPE and mount.source.startswith(EMULATOR_SOURCE_PREFIX)


def describe_mount(mount: Mount) -> str:
    """A mount in a few words: "a tmpfs mount (source tmpfs)"."""
    return f"a {mount.full_fstype} mount (source {mount.source})"


def describe_path(path: str | os.PathLike[str]) -> str:
    """What ``path`` is, for a refusal: missing, not a directory, a mount, a directory."""
    target = os.fspath(path)
    if not os.path.lexists(target):
        return "does not exist"
    if not os.path.isdir(target):
        return "is not a directory"
    found = mounts_at(target)
    if found:
        return f"is {describe_mount(found[-1])}"
    return "is a directory, not a mount point"


def check_mountpoint(mountpoint: str | os.PathLike[str]) -> None:
    """Refuse a mount point that is not an empty directory, or that is already a mount.

    Mounting over a non-empty directory hides its files for as long as the emulator runs,
    and stacking on a live mount takes the mount below down when this one stops.
    """
    target = os.fspath(mountpoint)
    # The mount table first: a stale FUSE mount (its server gone) fails every stat.
    found = mounts_at(target)
    if found:
        stale = " (stale: emulate --unmount removes it)" if is_emulator_mount(found[-1]) else ""
        raise EmulatorError(
            f"{target}: already {describe_mount(found[-1])}{stale}; choose an empty directory"
        )
    if not os.path.lexists(target):
        return  # emulated_disk creates it
    if not os.path.isdir(target):
        raise EmulatorError(f"{target}: mount point is not a directory")
    try:
        with os.scandir(target) as entries:
            nonempty = any(True for _ in entries)
    except OSError as exc:
        raise EmulatorError(f"{target}: cannot list the mount point ({exc.strerror})") from None
    if nonempty:
        raise EmulatorError(
            f"{target}: mount point is not empty (mounting would hide its files);"
            " choose an empty directory"
        )


def unmount(mountpoint: str | os.PathLike[str]) -> bool:
    """Unmount the emulator's mount there (also a stale one whose process died).

    Only a mount the emulator made is touched (:func:`is_emulator_mount`); True when no
    emulator mount is left at ``mountpoint``. Use :func:`unmount_emulator` for a user's
    request, which also says what a path it refuses is.
    """
    target = os.fspath(mountpoint)

    def ours() -> bool:
        found = mounts_at(target)
        return bool(found) and is_emulator_mount(found[-1])

    for cmd in (
        ["fusermount3", "-u", target],
        ["fusermount3", "-uz", target],
        ["umount", "-l", target],
    ):
        if not ours():
            return True
        if shutil.which(cmd[0]):
            subprocess.run(cmd, capture_output=True, check=False, timeout=30)
    return not ours()


def unmount_emulator(mountpoint: str | os.PathLike[str]) -> None:
    """``emulate --unmount``: unmount an emulator mount, or refuse saying what the path is."""
    target = os.fspath(mountpoint)
    found = mounts_at(target)
    if not found:
        what = describe_path(target)
        error: type[LoadscopeError] = PathNotFound if what == "does not exist" else EmulatorError
        raise error(f"{target}: not unmounted: it {what}")
    if not is_emulator_mount(found[-1]):
        raise EmulatorError(
            f"{target}: not unmounted: it is {describe_mount(found[-1])}, not one loadscope's"
            " emulator made"
        )
    if not unmount(target):
        raise EmulatorError(f"{target}: still mounted (busy? close files under it)")


@contextlib.contextmanager
def emulated_disk(
    source: str | os.PathLike[str],
    mountpoint: str | os.PathLike[str],
    settings: EmulatorSettings | None = None,
    *,
    log_requests: bool = False,
) -> Iterator[EmulatedDisk]:
    """Mount ``source`` slowly at ``mountpoint`` for the ``with`` block; always unmounts."""
    settings = settings or EmulatorSettings()
    reason = fuse_unavailable_reason()
    if reason:
        raise EmulatorError(f"cannot emulate a slow disk here: {reason}")
    src = check_source(source)
    check_mountpoint(mountpoint)
    mnt = Path(os.path.abspath(mountpoint))
    mnt.mkdir(parents=True, exist_ok=True)
    log = None
    if log_requests:
        log_path = mnt.parent / f".{mnt.name}.requests.log"
        log_path.write_text("")
        log = RequestLog(log_path)
        settings = _replace(settings, log_requests=str(log_path))
    proc = start_server(src, mnt, settings)
    try:
        major, minor = read_ready(proc, READY_LINE, _MOUNT_TIMEOUT_S, "the emulated disk")[0].split(
            ":"
        )
        yield EmulatedDisk(mnt, src, settings, (int(major), int(minor)), log, proc)
    finally:
        # A server with stalled reads cannot finish its loop (they wait for the unmount
        # it would do after): do not wait long for it before the kill.
        _stop(proc, mnt, grace_s=2.0 if settings.stall_after_bytes is not None else 10.0)


def _replace(settings: EmulatorSettings, **changes: Any) -> EmulatorSettings:
    import dataclasses

    return dataclasses.replace(settings, **changes)


def start_server(
    src: Path, mnt: Path, settings: EmulatorSettings, *mode: str
) -> subprocess.Popen[str]:
    """``loadscope emulate [MODE] --serve-here SRC MNT`` in its own session, with pipes."""
    cmd = [
        sys.executable,
        "-m",
        "loadscope",
        "emulate",
        *mode,
        "--serve-here",
        str(src),
        str(mnt),
        *settings.cli_args(),
    ]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def read_ready(proc: subprocess.Popen[str], ready: str, timeout_s: float, what: str) -> list[str]:
    """The words after ``ready`` on the server's first line; else it is killed and the
    last line of its stderr is the error (``what`` "did not come up")."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    # readline blocks; the child prints the ready line or exits, both within the timeout.
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        line = proc.stdout.readline()
    finally:
        timer.cancel()
    if line.startswith(ready):
        return line[len(ready) :].split()
    proc.kill()
    _, err = proc.communicate(timeout=30)
    late = time.monotonic() > deadline
    lines = [x for x in err.strip().splitlines() if x.strip()]
    # The server's own one-line error, without its program-name prefix.
    detail = lines[-1].removeprefix("loadscope: ") if lines else f"exit code {proc.returncode}"
    raise EmulatorError(f"{what} did not come up{' in time' if late else ''}: {detail}")


def _stop(proc: subprocess.Popen[str], mnt: Path, grace_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # libfuse's handler exits the loop and unmounts
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    with contextlib.suppress(Exception):
        proc.communicate(timeout=5)
    if not unmount(mnt):
        raise EmulatorError(
            f"{mnt}: the emulated disk could not be unmounted (fusermount3 -uz {mnt})"
        )


def fuse_connection_settings(major: int, minor: int) -> dict[str, int | None]:
    """What the kernel uses for this mount now: readahead and background requests."""
    conn = Path("/sys/fs/fuse/connections") / str(fuse_connection_id(major, minor))
    return {
        "read_ahead_kb": read_int(f"/sys/class/bdi/{major}:{minor}/read_ahead_kb"),
        "max_background": read_int(conn / "max_background"),
        "congestion_threshold": read_int(conn / "congestion_threshold"),
    }
