"""Weight files and indexes: what a model's files are, read no further than ``stat``.

Owns the names a weight file or an index goes by (suffixes, HF's index names, files that
are never weights), :class:`WeightFile`, the index parser (a ``weight_map`` checked: no
shard outside the model folder, none missing), and the errors a target can raise.
May import: ``loadscope.base``.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from loadscope.base.errors import (
    ExitCode,
    LoadscopeError,
    PathNotFound,
    error_from_oserror,
)
from loadscope.base.safeio import open_regular, pread_exact, stat_regular
from loadscope.base.units import format_bytes

WeightFormat = Literal["safetensors", "torch"]

SAFETENSORS_SUFFIXES = (".safetensors",)

TORCH_SUFFIXES = (".bin", ".pt", ".pth")
#: Index files in the order they are preferred.

INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
#: An index named as the target: the safetensors kind first (see index_files).

INDEX_SUFFIXES = (".safetensors.index.json", ".bin.index.json")
#: Torch files in model folders that are not model weights.

NOT_WEIGHTS = ("training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")

MAX_INDEX_BYTES = 64 << 20


class TargetError(LoadscopeError):
    """The target cannot be turned into weight files."""

    exit_code = ExitCode.UNSUPPORTED


class UnsupportedFile(TargetError):
    """A file whose name is not a weight format loadscope reads."""


class NoWeightFiles(TargetError):
    """A directory holding no weight files."""


class HubCacheMiss(PathNotFound):
    """A Hugging Face repo id that is not in the local cache (loadscope never downloads)."""


class BadTargetSpec(TargetError):
    """A ``synthetic:`` spec or repo id that does not parse."""

    exit_code = ExitCode.USAGE


class InvalidIndex(TargetError):
    """An index JSON that is malformed, names missing shards, or points outside the model."""

    exit_code = ExitCode.CORRUPT


class ShardMissing(InvalidIndex):
    """The index names a shard file that is not there (an incomplete download?)."""


class ShardOutsideModel(InvalidIndex):
    """The index names a shard by an absolute path or one that climbs out with ``..``."""


class NotEnoughSpace(TargetError):
    """No room to build a synthetic checkpoint."""

    exit_code = ExitCode.RESOURCES


@dataclass(frozen=True, slots=True)
class WeightFile:
    path: Path
    size_bytes: int
    format: WeightFormat


def format_of(path: Path) -> WeightFormat | None:
    """The weight format a file name promises, or None."""
    name = path.name.lower()
    if name.endswith(SAFETENSORS_SUFFIXES):
        return "safetensors"
    if name.endswith(TORCH_SUFFIXES):
        return "torch"
    return None


def index_files(root: Path, index: Path) -> tuple[dict[str, str], tuple[WeightFile, ...]]:
    """The weight map of ``index`` and the shards it names under ``root``, each once."""
    weight_map = read_index(index)
    fmt: WeightFormat = "safetensors" if index.name.lower().endswith(INDEX_SUFFIXES[0]) else "torch"
    # "./a.safetensors" and "a.safetensors" are one file: read it once.
    shards = sorted({posixpath.normpath(s) for s in weight_map.values()})
    return weight_map, tuple(shard_file(root, index, s, fmt) for s in shards)


def weight_file(path: Path, fmt: WeightFormat | None = None) -> WeightFile:
    fmt = fmt or format_of(path)
    if fmt is None:
        raise UnsupportedFile(
            "is not a weight file loadscope reads (expected .safetensors, .bin, .pt or .pth,"
            " a model directory, or its *.safetensors.index.json)",
            path=path,
        )
    st = stat_regular(path)
    if not os.access(path, os.R_OK):
        raise error_from_oserror(PermissionError(13, "Permission denied"), path)
    return WeightFile(path=path, size_bytes=st.st_size, format=fmt)


def read_index(index: Path) -> dict[str, str]:
    """Read an index JSON's ``weight_map`` (tensor name -> shard file name), validated."""
    fd = open_regular(index)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_INDEX_BYTES:
            raise InvalidIndex(f"is {format_bytes(size)}, too large for an index file", path=index)
        raw = pread_exact(fd, size, 0, path=index)
    finally:
        os.close(fd)
    return parse_index(raw, path=index)


def parse_index(raw: bytes, *, path: Path) -> dict[str, str]:
    """Validate index JSON bytes; each shard must be a plain relative path inside the model."""
    twice: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in items:
            if key in out and not twice:
                twice.append(key)
            out[key] = value
        return out

    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=pairs)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidIndex(
            f"is not valid JSON ({str(exc).splitlines()[0][:100]})", path=path
        ) from None
    if twice:
        raise InvalidIndex(
            f"has the key {twice[0]!r} twice (a tensor listed in two shards? JSON would"
            " silently keep the last); fix or download the index again",
            path=path,
        )
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise InvalidIndex("has no 'weight_map' object of tensor name -> shard file", path=path)
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise InvalidIndex(f"tensor {tensor!r} maps to {shard!r}, not a file name", path=path)
        check_shard_name(shard, index=path)
    return weight_map


def check_shard_name(shard: str, *, index: Path) -> None:
    """Refuse shard names that could leave the model directory (absolute, ``..``, NUL, ``\\``)."""
    pure = PurePosixPath(shard)
    if (
        "\0" in shard
        or "\\" in shard
        or pure.is_absolute()
        or ".." in pure.parts
        or shard.startswith("~")
    ):
        raise ShardOutsideModel(
            f"names shard {shard!r}, which is outside the model directory; refusing to follow it",
            path=index,
        )


def shard_file(root: Path, index: Path, shard: str, fmt: WeightFormat) -> WeightFile:
    path = root / shard
    if not os.path.lexists(path):
        raise ShardMissing(
            f"names shard {shard!r}, which is missing (incomplete download?)", path=index
        )
    try:
        exists = path.exists()
    except OSError as exc:  # e.g. a symlink whose target name is too long to stat
        raise error_from_oserror(exc, path) from None
    if not exists:
        raise ShardMissing(
            f"names shard {shard!r}, a broken symlink (incomplete download?)", path=index
        )
    return weight_file(path, fmt)


# -- Hugging Face cache ----------------------------------------------------------------------


#: A repo id without an organisation, as classic models are named (``gpt2``).
