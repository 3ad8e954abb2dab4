"""Where the Hugging Face cache lives, and which setting put it there.

The same precedence as ``huggingface_hub.constants``, read at call time (that
module reads the environment once, at import): ``HF_HUB_CACHE``, then the
deprecated ``HUGGINGFACE_HUB_CACHE``, then ``HF_HOME/hub``, then
``XDG_CACHE_HOME/huggingface/hub``, then ``~/.cache/huggingface/hub``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class HubCacheLocation:
    path: str
    #: The setting that decided it: an environment variable name or "default".
    source: str
    exists: bool
    #: The nearest existing directory (the cache's storage, even before it is created).
    existing_parent: str


def hub_cache_location(env: dict[str, str] | None = None) -> HubCacheLocation:
    env = dict(os.environ) if env is None else env
    path: Path | None = None
    source = "default"
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(var):
            path, source = Path(env[var]).expanduser(), var
            break
    if path is None and env.get("HF_HOME"):
        path, source = Path(env["HF_HOME"]).expanduser() / "hub", "HF_HOME"
    if path is None and env.get("XDG_CACHE_HOME"):
        path, source = Path(env["XDG_CACHE_HOME"]) / "huggingface" / "hub", "XDG_CACHE_HOME"
    if path is None:
        path = Path(os.path.expanduser("~")) / ".cache" / "huggingface" / "hub"
    parent = path
    while not _visible(parent) and parent != parent.parent:
        parent = parent.parent
    return HubCacheLocation(str(path), source, _visible(path, directory=True), str(parent))


def _visible(path: Path, *, directory: bool = False) -> bool:
    """Whether ``path`` exists as far as this user can tell (a private home hides it)."""
    try:
        return path.is_dir() if directory else path.exists()
    except OSError:  # EACCES on a parent: the cache is another user's, not ours to read
        return False
