"""Which Hugging Face library a model folder is saved for: transformers or diffusers.

The advice prints ``AutoModelForCausalLM.from_pretrained(folder)`` for a transformers
folder and ``DiffusionPipeline.from_pretrained(folder)`` for a diffusers pipeline; each
fails on the other's folder, so the snippets ask :func:`folder_layout` first. What
each library writes, and what is read here:

- a diffusers pipeline: ``model_index.json`` (its components in subfolders);
- a diffusers model (a ``unet/``, a ``transformer/``): ``config.json`` carrying
  ``_diffusers_version``;
- a transformers model: any other ``config.json``.

Only those small JSON files are read, through :func:`~loadscope.base.safeio.open_regular`
(a FIFO or a device under that name is refused, never waited on).
"""

from __future__ import annotations

import json
import os

from loadscope.base.errors import LoadscopeError
from loadscope.base.safeio import StorageStalled, bounded, open_regular

DIFFUSERS_PIPELINE = "diffusers-pipeline"
DIFFUSERS_MODEL = "diffusers-model"
TRANSFORMERS = "transformers"
#: Neither library's folder (no config, an unreadable one, a file, a repo id not local).
UNKNOWN = ""

#: A config.json larger than this is not read (real ones are a few KiB).
_MAX_CONFIG_BYTES = 4 << 20


#: A folder whose config does not answer within this is of no known layout (a stalled
#: FUSE daemon or NFS server never answers a read, not even to SIGKILL).
LAYOUT_TIMEOUT_S = 5.0


def folder_layout(folder: str | os.PathLike[str]) -> str:
    """:data:`DIFFUSERS_PIPELINE`, :data:`DIFFUSERS_MODEL`, :data:`TRANSFORMERS` or
    :data:`UNKNOWN` for the model saved in ``folder`` (also when its storage does not
    answer within :data:`LAYOUT_TIMEOUT_S`: the read is left behind, never waited on)."""
    try:
        return bounded(lambda: _layout(folder), LAYOUT_TIMEOUT_S, lambda: f"{folder}/config.json")
    except StorageStalled:
        return UNKNOWN


def _layout(folder: str | os.PathLike[str]) -> str:
    if not os.path.isdir(folder):
        return UNKNOWN
    if os.path.isfile(os.path.join(folder, "model_index.json")):
        return DIFFUSERS_PIPELINE
    config = _json_object(os.path.join(folder, "config.json"))
    if config is None:
        return UNKNOWN
    return DIFFUSERS_MODEL if "_diffusers_version" in config else TRANSFORMERS


def _json_object(path: str) -> dict[str, object] | None:
    """The JSON object in ``path``; None when it is missing, not a regular file, too large
    or not a JSON object."""
    try:
        fd = open_regular(path)
    except LoadscopeError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read(_MAX_CONFIG_BYTES + 1)
    except OSError:
        return None
    if len(raw) > _MAX_CONFIG_BYTES:
        return None
    try:
        value = json.loads(raw)
    except ValueError:  # UnicodeDecodeError included
        return None
    return value if isinstance(value, dict) else None
