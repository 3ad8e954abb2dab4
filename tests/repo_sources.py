"""The repository's own Python sources, for the tests that read the code itself (the
structure limits, the strategy-name count)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sources(exempt: tuple[str, ...]) -> list[Path]:
    """Every tracked or new (not ignored) ``.py`` file, except those under ``exempt``."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / p for p in listed if not p.startswith(exempt) and (ROOT / p).exists()]
