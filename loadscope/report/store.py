"""Where a diagnosis's full report is kept when the terminal shows only the answer: one
JSON file per run in a per-user folder, the newest found again by ``loadscope report
--last`` and opened in the app with ``loadscope tui --report``.

The folder is ``$LOADSCOPE_REPORTS``, else ``$XDG_STATE_HOME/loadscope/reports``, else
``~/.local/state/loadscope/reports``; it is created private (0700). A report that cannot
be written there (a read-only home, a full disk) is said in one line, never an error:
the answer on the screen stands, and ``--json FILE`` writes it elsewhere.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import re
import time
from pathlib import Path

#: The most reports kept; older ones are removed as new ones are written.
KEEP = 50
#: The store's own names (doctor-YYYY-...): never a user's file.
_NAMES = "doctor-[0-9][0-9][0-9][0-9]-*"


def reports_dir() -> Path:
    env = os.environ.get("LOADSCOPE_REPORTS")
    if env:
        return Path(env).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "loadscope" / "reports"


def _slug(spec: str) -> str:
    name = spec.rstrip("/").rsplit("/", 1)[-1] or "model"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name)[:40].strip("-.") or "model"


def save(text: str, spec: str) -> tuple[Path | None, str]:
    """Write ``text`` (a report's JSON) as a new file in :func:`reports_dir`; returns its
    path, or None and why it could not be written."""
    folder = reports_dir()
    stamp = _dt.datetime.now().strftime("%Y-%m-%dT%H-%M-%S")
    path: Path | None = None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = _reserve(folder, f"doctor-{stamp}-{_slug(spec)}")
        partial = path.with_name(f".{path.name}.partial")
        try:
            # 0600 like the name it replaces (write_text's 0644 would let others read the
            # host's and the model's names in a shared or pre-existing folder).
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(partial, path)
        finally:
            with contextlib.suppress(OSError):
                partial.unlink()
    except OSError as exc:
        if path is not None:  # the name taken, nothing written: give it back
            with contextlib.suppress(OSError):
                path.unlink()
        return None, f"{folder}: {exc.strerror or exc}"
    _prune(folder)
    return path, ""


def _reserve(folder: Path, stem: str) -> Path:
    """A new file's name, taken (created empty, exclusively): two runs in the same second
    never write one file. An empty file is not a report (:func:`saved` skips it)."""
    for n in range(1, 1000):
        path = folder / (f"{stem}.json" if n == 1 else f"{stem}-{n}.json")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            continue
        return path
    raise OSError(f"no free name for {stem}")


#: An empty report older than this is a name a killed run took and never wrote.
ABANDONED_S = 3600.0


def _prune(folder: Path) -> None:
    for old in saved(folder)[:-KEEP]:
        with contextlib.suppress(OSError):
            old.unlink()
    now = time.time()
    for path in folder.glob(f"{_NAMES}.json"):
        with contextlib.suppress(OSError):
            st = path.stat()
            if not st.st_size and now - st.st_mtime > ABANDONED_S:
                path.unlink()


def saved(folder: Path | None = None) -> list[Path]:
    """The reports kept, oldest first."""
    dated = []
    try:
        # The store's own names only (doctor-YYYY-MM-DDTHH-MM-SS-...): never a user's file.
        found = list((folder or reports_dir()).glob(f"{_NAMES}.json"))
    except OSError:  # no folder yet
        return []
    for path in found:
        try:
            st = path.stat()
        except OSError:  # removed while it was listed (another run's pruning)
            continue
        if st.st_size:  # an empty one is a name another run has taken, not yet written
            dated.append((st.st_mtime, path.name, path))
    return [path for _, _, path in sorted(dated)]


def last() -> Path | None:
    """The newest report kept, or None."""
    found = saved()
    return found[-1] if found else None
