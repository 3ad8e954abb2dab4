"""The same model in the other format beside the one a user named.

A folder often holds a model twice (many Hub repos: ``pytorch_model*.bin`` and
``model*.safetensors``): :func:`other_format` finds the torch files beside chosen
safetensors, or the safetensors twins of a chosen torch model, by HF's names.
May import: :mod:`loadscope.model.weightfiles`, ``loadscope.base``.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from loadscope.base.errors import LoadscopeError
from loadscope.model.weightfiles import (
    INDEX_NAMES,
    INDEX_SUFFIXES,
    NOT_WEIGHTS,
    TORCH_SUFFIXES,
    ShardMissing,
    WeightFile,
    WeightFormat,
    read_index,
    shard_file,
    weight_file,
)


@dataclass(frozen=True, slots=True)
class Other:
    """The other format's files, why they cannot be used ("" when they can, or are none),
    and the index that names them."""

    files: tuple[WeightFile, ...] = ()
    problem: str = ""
    index: Path | None = None


def safetensors_twin(name: str) -> str:
    """The name HF's libraries give the safetensors form of a torch file or index:
    ``pytorch_model*.bin`` -> ``model*.safetensors`` (transformers),
    ``diffusion_pytorch_model*.bin`` -> ``diffusion_pytorch_model*.safetensors``
    (diffusers), ``x.bin`` -> ``x.safetensors``; ``*.bin.index.json`` likewise."""
    head, base = posixpath.split(name)
    index = base.lower().endswith(INDEX_SUFFIXES[1])
    stem = base[: -len(INDEX_SUFFIXES[1])] if index else posixpath.splitext(base)[0]
    if stem.startswith("pytorch_model"):
        stem = "model" + stem[len("pytorch_model") :]
    return posixpath.join(head, stem + (INDEX_SUFFIXES[0] if index else ".safetensors"))


def other_format(root: Path, files: tuple[WeightFile, ...], index: Path | None) -> Other:
    """The files of the other format in the model's folder (the Target's two fields): the
    torch files beside chosen safetensors (by their own index when there is one), or the
    safetensors twins of a chosen torch model (:func:`safetensors_twin`: by the twin of
    its index, else file by file, all of them or none, so that a variant's or an
    adapter's safetensors are never taken for the model's); none when there are none,
    and why when they cannot be used. The chosen format is what every command loads; the
    other is measured beside it (and safetensors already there are named in place of
    "convert to safetensors")."""
    formats = {f.format for f in files}
    try:
        if formats == {"torch"}:
            return _safetensors_twins(root, files, index)
        if formats != {"safetensors"}:
            return Other()
        names = sorted(e.name for e in os.scandir(root))
        if INDEX_NAMES[1] in names:
            return _by_index(root, root / INDEX_NAMES[1], "torch")
        picked = [n for n in names if n.lower().endswith(TORCH_SUFFIXES) and n not in NOT_WEIGHTS]
        return Other(tuple(weight_file(root / n, "torch") for n in picked))
    except (OSError, LoadscopeError) as exc:
        other = "torch" if formats == {"safetensors"} else "safetensors"
        return Other(problem=f"the {other} files beside the model cannot be used: {exc}")


def _safetensors_twins(root: Path, files: tuple[WeightFile, ...], index: Path | None) -> Other:
    if index is not None:
        twin_index = root / safetensors_twin(os.path.relpath(index, root))
        if os.path.lexists(twin_index):
            return _by_index(root, twin_index, "safetensors")
    twins = [root / safetensors_twin(os.path.relpath(f.path, root)) for f in files]
    present = [t for t in twins if os.path.lexists(t)]
    if not present:
        return _resharded_twin(root, files)
    if len(present) < len(twins):
        missing = next(t for t in twins if not os.path.lexists(t))
        raise ShardMissing(
            f"is missing, though {len(present)} of the {len(twins)} safetensors twins of the"
            " torch files are there",
            path=missing,
        )
    return Other(tuple(weight_file(t, "safetensors") for t in twins))


#: The shard part of HF's file names: ``pytorch_model-00001-of-00002.bin``.
_SHARD_PART = re.compile(r"-\d{5}-of-\d{5}(?=\.bin$)")
#: The torch names HF's libraries save under (transformers, diffusers).
_HF_TORCH = ("pytorch_model", "diffusion_pytorch_model")


def _resharded_twin(root: Path, files: tuple[WeightFile, ...]) -> Other:
    """HF's safetensors of a model saved by HF's libraries, sharded otherwise than its
    pickles (a repo saved once with 10 GB shards, and again as safetensors with 5 GB
    ones): by HF's unsharded name, its index first (``model.safetensors.index.json``,
    then ``model.safetensors``). Only for files under HF's torch names: any other
    ``.safetensors`` in the folder may be a variant's or an adapter's."""
    bases = {_SHARD_PART.sub("", os.path.relpath(f.path, root)) for f in files}
    base = bases.pop() if len(bases) == 1 else ""
    if not base.endswith(".bin") or not posixpath.basename(base).startswith(_HF_TORCH):
        return Other()
    whole = safetensors_twin(base)
    index = root / (whole[: -len(".safetensors")] + INDEX_SUFFIXES[0])
    if os.path.lexists(index):
        return _by_index(root, index, "safetensors")
    if os.path.lexists(root / whole):
        return Other((weight_file(root / whole, "safetensors"),))
    return Other()


def _by_index(root: Path, index: Path, fmt: WeightFormat) -> Other:
    """The shards ``index`` names, each once, as the other format's files."""
    shards = sorted({posixpath.normpath(s) for s in read_index(index).values()})
    return Other(tuple(shard_file(root, index, s, fmt) for s in shards), index=index)
