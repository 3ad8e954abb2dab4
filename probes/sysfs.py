"""Small readers for sysfs/procfs files, rooted anywhere so tests can use fake trees."""

from __future__ import annotations

import os
from pathlib import Path


def read_text(path: str | os.PathLike[str]) -> str | None:
    """The stripped contents of a small pseudo-file, or None when it is absent or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(1 << 16).strip()
    except OSError:
        return None


def read_int(path: str | os.PathLike[str]) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def under(root: Path, absolute: str) -> Path:
    """``/sys/block/x`` re-rooted under ``root`` (``root`` is ``/`` on a live system)."""
    return root / absolute.lstrip("/")
