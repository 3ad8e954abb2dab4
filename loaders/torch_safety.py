"""Whether the torch here may load pickles: torch older than 2.6 may not (its
``weights_only`` loader had a remote-code execution hole, CVE-2025-32434).

The parent asks the installed torch's package metadata (without importing torch) before
it plans any load of a pickle; a worker asks the torch it imported. Outside the
strategies' package so that inspecting a model does not import every strategy.

May import: ``loadscope.loaders.errors``.
"""

from __future__ import annotations

import re
from importlib import metadata

from loadscope.loaders.errors import TorchTooOld

MIN_SAFE_TORCH = (2, 6)


def _too_old(version: str) -> str | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is not None and (int(match[1]), int(match[2])) >= MIN_SAFE_TORCH:
        return None
    return (
        f"torch {version} is older than 2.6: its weights_only loader can execute"
        " code (CVE-2025-32434); refusing to load pickles"
    )


def torch_too_old() -> str | None:
    """Why the imported torch may not load pickles (in the worker), or None."""
    import torch

    return _too_old(torch.__version__)


def installed_torch_version() -> str | None:
    """The installed torch's version from its package metadata (torch is not imported)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def refuse_unsafe_torch() -> None:
    """Raise :class:`TorchTooOld` when the installed torch cannot load pickles safely.

    For the parent, before it plans loads of a torch checkpoint; a missing torch is
    left to the strategies (they say it is not installed)."""
    version = installed_torch_version()
    why = None if version is None else _too_old(version)
    if why is not None:
        raise TorchTooOld(
            f"{why}: upgrade it (pip install -U 'torch>=2.6') or convert the checkpoint"
            " to safetensors"
        )
