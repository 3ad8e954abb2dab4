"""Exit codes and the error types every layer raises for problems a user can fix.

Every error a user can cause (a bad path, a corrupt header, a FIFO named like a
checkpoint) is a :class:`LoadscopeError`. The CLI catches exactly this type,
prints its one-line message and exits with its :attr:`exit_code`; anything else
is a bug and is reported as ``INTERNAL``. This module sits at the bottom of the
layer stack so probes, loaders and the core can all raise these.
"""

from __future__ import annotations

import os
from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of the ``loadscope`` command (documented in docs/troubleshooting.md)."""

    OK = 0
    #: A check ran and found a problem (a failed node), or doctor could not measure at all.
    FAILURE = 1
    #: Bad command line (argparse's own code).
    USAGE = 2
    #: The target does not exist: no such path, or a Hugging Face repo not in the local cache.
    NOT_FOUND = 3
    #: The target exists but is not something loadscope reads: a FIFO, a device, a socket,
    #: an unknown file type, a directory without weight files, a pickle that would run code.
    UNSUPPORTED = 4
    #: A checkpoint or index file is malformed (header, offsets, sizes, JSON).
    CORRUPT = 5
    #: The target (or a file in it) cannot be read with this user's permissions.
    PERMISSION = 6
    #: The storage returned an error while reading (EIO and friends).
    IO_ERROR = 7
    #: Not enough memory or disk for what was asked.
    RESOURCES = 8
    #: ``doctor`` found a problem worth fixing (its report says what and how).
    PROBLEM_FOUND = 10
    #: A bug in loadscope: please report it (run with LOADSCOPE_DEBUG=1 for the traceback).
    INTERNAL = 70
    #: Interrupted by Ctrl-C (SIGINT).
    INTERRUPTED = 130
    #: Stopped by SIGTERM.
    TERMINATED = 143


class LoadscopeError(Exception):
    """A problem the user can act on: one line of text and an exit code."""

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)


class PathNotFound(LoadscopeError):
    """A path the user named (or an index pointed at) does not exist."""

    exit_code = ExitCode.NOT_FOUND


class NotARegularFile(LoadscopeError):
    """A FIFO, socket or device where a checkpoint file was expected: refused before reading."""

    exit_code = ExitCode.UNSUPPORTED


class PermissionDenied(LoadscopeError):
    """The file or directory exists but this user may not read it."""

    exit_code = ExitCode.PERMISSION


class ReadFailed(LoadscopeError):
    """The storage failed a read (EIO, ENXIO, ...)."""

    exit_code = ExitCode.IO_ERROR


def error_from_oserror(exc: OSError, path: str | os.PathLike[str]) -> LoadscopeError:
    """Turn an ``OSError`` raised while touching ``path`` into the matching user error."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, FileNotFoundError):
        return PathNotFound("no such file or directory", path=path)
    if isinstance(exc, PermissionError):
        return PermissionDenied(f"permission denied ({reason})", path=path)
    return ReadFailed(f"read failed: {reason} (errno {exc.errno})", path=path)


class NotEnoughMemory(LoadscopeError):
    """What was asked would hold more in RAM than this machine (or its cgroup) has room for."""

    exit_code = ExitCode.RESOURCES
