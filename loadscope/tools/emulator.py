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

This module is the client side (start, configure, read the log, always unmount) and
the emulator's public face: it also exports the settings and checks
(:mod:`loadscope.tools.emucommon`), the mount table's side
(:mod:`loadscope.tools.emumounts`) and the server (:mod:`loadscope.tools.fuseserver`).
May import those, ``loadscope.probes`` and ``loadscope.base``.
"""

from __future__ import annotations

import contextlib
import os
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

from loadscope.base.processes import popen
from loadscope.probes.blockdev import fuse_connection_id
from loadscope.probes.sysfs import read_int
from loadscope.tools.emucommon import (
    PARENT_PID_ENV,
    EmulatorError,
    EmulatorSettings,
    check_source,
    die_with_parent,
    fuse_unavailable_reason,
    require_fuse,
)
from loadscope.tools.emumounts import (
    EMULATOR_FSTYPE,
    EMULATOR_SOURCE_PREFIX,
    check_mountpoint,
    describe_mount,
    describe_path,
    is_emulator_mount,
    is_mounted,
    mounts_at,
    prepare_mount,
    top_mount,
    unmount,
    unmount_emulator,
)
from loadscope.tools.fuseserver import (
    MOUNT_TIMEOUT_S,
    READY_LINE,
    apply_connection_settings,
    serve,
)

__all__ = [
    "EMULATOR_FSTYPE",
    "EMULATOR_SOURCE_PREFIX",
    "READY_LINE",
    "EmulatedDisk",
    "EmulatorError",
    "EmulatorSettings",
    "Request",
    "RequestLog",
    "apply_connection_settings",
    "check_mountpoint",
    "check_source",
    "describe_mount",
    "describe_path",
    "die_with_parent",
    "emulated_disk",
    "fuse_connection_settings",
    "fuse_unavailable_reason",
    "is_emulator_mount",
    "is_mounted",
    "mounts_at",
    "read_ready",
    "serve",
    "start_server",
    "top_mount",
    "unmount",
    "unmount_emulator",
]


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

    def end(self) -> int:
        """Where the log ends now: :meth:`bytes_since` counts the requests after it."""
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def bytes_since(self, at: int) -> int:
        """The bytes of every request logged after position ``at`` (:meth:`end`)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(at)
                text = fh.read().decode("ascii", errors="replace")
        except OSError:
            return 0
        total = 0
        for line in text.splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4 and parts[2].isdecimal():
                total += int(parts[2])
        return total


def request_log_for(path: str | os.PathLike[str]) -> RequestLog | None:
    """The request log of the emulated disk ``path`` lies on, when that disk keeps one
    (:func:`emulated_disk` with ``log_requests`` writes it beside its mount point); None
    elsewhere. What the storage served, counted where no kernel counter sees it (FUSE)."""
    here = Path(os.path.abspath(path))
    for folder in (here, *here.parents):
        if os.path.ismount(folder):
            log = folder.parent / f".{folder.name}.requests.log"
            return RequestLog(log) if folder.parent != folder and log.is_file() else None
    return None


@dataclass
class EmulatedDisk:
    path: Path
    source: Path
    settings: EmulatorSettings
    device: tuple[int, int]
    log: RequestLog | None
    process: subprocess.Popen[str] = field(repr=False)


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
    require_fuse()
    src, mnt = prepare_mount(source, mountpoint)
    log = None
    if log_requests:
        log_path = mnt.parent / f".{mnt.name}.requests.log"
        log_path.write_text("")
        log = RequestLog(log_path)
        settings = _replace(settings, log_requests=str(log_path))
    proc = start_server(src, mnt, settings)
    try:
        major, minor = read_ready(proc, READY_LINE, MOUNT_TIMEOUT_S, "the emulated disk")[0].split(
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
    env = {**os.environ, PARENT_PID_ENV: str(os.getpid())}  # see die_with_parent
    return popen(cmd, env)


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
    ended: int | None = None
    if not line:  # its output closed: it is ending; how, before our own kill
        with contextlib.suppress(subprocess.TimeoutExpired):
            ended = proc.wait(timeout=1)
    proc.kill()
    _, err = proc.communicate(timeout=30)
    late = time.monotonic() > deadline
    lines = [x for x in err.strip().splitlines() if x.strip() and not x.startswith(_FUSE_NOISE)]
    if ended is not None and ended < 0:
        detail = f"its server was killed by signal {-ended}"
    else:
        # The server's own one-line error, without its program-name prefix.
        detail = lines[-1].removeprefix("loadscope: ") if lines else f"exit code {proc.returncode}"
    raise EmulatorError(f"{what} did not come up{' in time' if late else ''}: {detail}")


#: What libfuse says on every start here, never the reason a server did not come up.
_FUSE_NOISE = ("Ignoring invalid max threads value",)


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
