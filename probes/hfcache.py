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
from typing import Any

from loadscope.probes.sources import EVERY_SOURCE
from loadscope.probes.spec import Lines, ProbeContext, ProbeSpec


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


@dataclass(slots=True)
class HubCacheProbe:
    """Where the cache is, and the storage under it (its nearest existing folder's)."""

    location: HubCacheLocation
    storage_class: str | None
    reason: str | None


def _run(ctx: ProbeContext) -> HubCacheProbe:
    location = hub_cache_location()
    klass, reason = ctx.classify(location.existing_parent)
    return HubCacheProbe(location, klass, reason)


def _lines(block: dict[str, Any]) -> Lines:
    where = block.get("location") or {}
    path = str(where.get("path")) + ("" if where.get("exists") else " (not created yet)")
    return [("hf cache", f"{path} [{where.get('source')}] on {block.get('storage_class')}")]


#: The Hugging Face cache probe's declaration (``probes/spec.py``).
SPEC = ProbeSpec(
    "hf_cache",
    "Hugging Face cache",
    HubCacheProbe,
    _run,
    _lines,
    label="hf cache",
    sources=EVERY_SOURCE,
)
