"""What every part of the emulated slow disk shares: its settings, its error, and the checks.

Owns :class:`EmulatorSettings` (and the ``loadscope emulate`` options that reproduce
them), :class:`EmulatorError`, whether FUSE can run here (:func:`fuse_unavailable_reason`,
the libfuse 3 binding), the check of the directory to serve, and :func:`die_with_parent`,
which every emulator process calls.
May import ``loadscope.base`` only; the server (:mod:`loadscope.tools.fuseserver`), the
mount table's side (:mod:`loadscope.tools.emumounts`) and the client
(:mod:`loadscope.tools.emulator`) import it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadscope.base.errors import ExitCode, LoadscopeError, PathNotFound


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
        import_mfusepy()
    except (ImportError, OSError) as exc:
        return f"the FUSE binding is unavailable ({exc}); pip install 'loadscope[emulate]'"
    if os.geteuid() != 0:
        return "setting the mount's readahead needs root (sysfs is root-only)"
    return None


def require_fuse() -> None:
    """Refuse to go on where the emulator cannot run, saying why."""
    reason = fuse_unavailable_reason()
    if reason:
        raise EmulatorError(f"cannot emulate a slow disk here: {reason}")


def import_mfusepy() -> Any:
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


def check_source(source: str | os.PathLike[str]) -> Path:
    """The directory to serve, absolute; a missing or non-directory SRC is refused."""
    src = Path(source)
    if not src.exists():
        raise PathNotFound("no such directory to emulate", path=source)
    if not src.is_dir():
        raise EmulatorError(f"{os.fspath(source)}: not a directory to emulate")
    return src.resolve()


#: Set by the emulator's client for the server it starts: the pid of the parent that must be
#: alive when the server asks to die with it (it may die while the server still imports).
PARENT_PID_ENV = "LOADSCOPE_EMULATOR_PARENT_PID"


def die_with_parent(parent: int | None = None) -> None:
    """PR_SET_PDEATHSIG: when whoever started us dies, we get SIGTERM (and unmount).

    ``parent`` is the pid that must still be our parent (default: the one we have now).
    A server passes the client's own pid (:func:`started_by`): a client killed before
    this call has already handed it to init (or a subreaper), which getppid() would name.
    """
    parent = os.getppid() if parent is None else parent
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        # The parent died before the request took effect (we were reparented): act now.
        os.kill(os.getpid(), signal.SIGTERM)


def started_by() -> int | None:
    """The client pid :data:`PARENT_PID_ENV` names, taken out of the environment so that
    nothing this process starts inherits it; None when unset or not a pid."""
    value = os.environ.pop(PARENT_PID_ENV, "")
    try:
        pid = int(value)
    except ValueError:
        return None
    return pid if pid > 0 else None
