"""The repository's own Python sources, for the tests that read the code itself (the
structure limits, the strategy-name count)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_here

ROOT = Path(__file__).resolve().parents[1]


def sources(exempt: tuple[str, ...]) -> list[Path]:
    """Every tracked or new (not ignored) ``.py`` file, except those under ``exempt``."""
    listed = run_here(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        check=True,
        timeout=None,
    ).stdout.split()
    return [ROOT / p for p in listed if not p.startswith(exempt) and (ROOT / p).exists()]
