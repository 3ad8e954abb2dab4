"""Temporary folders that outlive no one: named by their owner, reaped once it is gone.

A command killed outright (SIGKILL, the OOM killer, a lost node) runs no cleanup, so a
synthetic checkpoint of gigabytes, a demo's model or a run's scratch folder stayed in the
temp dir for good. :func:`owned_tempdir` names each folder after the process and host that
made it (``loadscope-demo-1234@host@x1y2``) and first removes the folders of that prefix
whose process on this host no longer exists. A folder of another host (a shared
``--synth-dir``) or of a live process is never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from pathlib import Path


def _host() -> str:
    """This host's name as it may stand in a file name (no separators)."""
    name = socket.gethostname() or "localhost"
    return "".join(c if c.isascii() and (c.isalnum() or c in ".-_") else "_" for c in name)


def owned_tempdir(prefix: str, parent: str | os.PathLike[str] | None = None) -> Path:
    """A new folder ``{prefix}{pid}@{host}@XXXX`` in ``parent`` (the temp dir by default),
    after removing the ones of the same prefix left there by processes of this host that
    no longer exist. Raises OSError as :func:`tempfile.mkdtemp` does."""
    where = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    reap_stale(prefix, where)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}@{_host()}@", dir=where))


def reap_stale(prefix: str, where: Path) -> list[Path]:
    """Remove the folders ``{prefix}{pid}@{this host}@*`` in ``where`` whose process is gone;
    the ones removed. Best effort: a folder that cannot be listed or removed is left."""
    host = _host()
    removed: list[Path] = []
    with contextlib.suppress(OSError):
        for entry in where.glob(f"{prefix}*@*@*"):
            # "@" is never in a host's part (_host replaces it): "node" is not "node-2".
            parts = entry.name[len(prefix) :].split("@")
            if len(parts) != 3 or not parts[0].isdecimal() or parts[1] != host:
                continue
            pid = parts[0]
            if not entry.is_dir() or entry.is_symlink():
                continue
            if process_alive(int(pid)):
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie waiting for its parent
    to reap it is gone: it runs no cleanup any more)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True  # another user's process, or not a pid: not ours to judge
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            # "pid (comm) S ...": the state follows the last ')' (comm may hold one).
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True
