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
from pathlib import Path

#: The most reports kept; older ones are removed as new ones are written.
KEEP = 50


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
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / f"doctor-{stamp}-{_slug(spec)}.json"
        n = 1
        while path.exists():
            n += 1
            path = folder / f"doctor-{stamp}-{_slug(spec)}-{n}.json"
        partial = path.with_name(path.name + ".partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        return None, f"{folder}: {exc.strerror or exc}"
    _prune(folder)
    return path, ""


def _prune(folder: Path) -> None:
    for old in saved(folder)[:-KEEP]:
        with contextlib.suppress(OSError):
            old.unlink()


def saved(folder: Path | None = None) -> list[Path]:
    """The reports kept, oldest first."""
    dated = []
    try:
        for path in (folder or reports_dir()).glob("doctor-*.json"):
            dated.append((path.stat().st_mtime, path.name, path))
    except OSError:  # no folder yet, or one removed while it was listed
        pass
    return [path for _, _, path in sorted(dated)]


def last() -> Path | None:
    """The newest report kept, or None."""
    found = saved()
    return found[-1] if found else None
