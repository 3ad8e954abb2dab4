"""The public loader API: ``loadscope.load_file``, ``load_model`` and ``prewarm``.

What a training script or a server imports to apply loadscope's fix without the CLI:

- :func:`load_file` — a drop-in for ``safetensors.torch.load_file`` (``loaders/api.py``);
- :func:`load_model` — every weight file of a model folder, a sharded index, a single
  file or an ``org/name[@revision]`` from the local Hugging Face cache, or a model in
  an object store (``s3://``, ``gs://``, ``az://``: many ranged GETs in flight), as one
  state dict (safetensors through :func:`load_file`; torch checkpoints through
  ``torch.load(weights_only=True, mmap=True)``, never executing pickled code);
- :func:`from_pretrained` — the transformers model ``from_pretrained`` returns, its
  weights read by :func:`load_model` and put in without a random init, tied weights
  tied (``loaders/pretrained.py``: the code the ``hf-load-model`` trial runs);
- :func:`prewarm` — the page cache filled for a stack that keeps its own loader
  (vLLM, SGLang, ``from_pretrained``): what ``loadscope warm`` does.

The model is checked first as every loadscope command checks it (each header, the
shards against each other and the index, pickles that would run code). Each call
can say what it chose and why: pass a :class:`LoadRecord` as ``record`` (or read
the ``loadscope`` logger at INFO); :func:`prewarm` returns its report. Errors are
one line naming the file, in the exception family the caller already catches.

May import: ``loadscope.loaders`` (what a load runs), ``loadscope.probes.objclient`` (an
object-store address), ``loadscope.model`` (the target's
checks), ``loadscope.actions.warm`` (the fill :func:`prewarm` runs), ``loadscope.base``;
the last three when a call needs them, so a first call stays light.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from loadscope.base.errors import LoadscopeError
from loadscope.loaders.api import (
    LoadOptions,
    as_api_error,
    check_options,
    load_file,
    load_torch_file,
    to_device,
)
from loadscope.loaders.apichecks import check_knobs
from loadscope.loaders.loadrecord import FileChoice, LoadRecord, timed_call
from loadscope.loaders.requests import WARM_BLOCK_BYTES, WARM_THREADS
from loadscope.loaders.storeread import load_store
from loadscope.probes.objclient import source_of

if TYPE_CHECKING:
    import torch
    from typing_extensions import Unpack

    from loadscope.actions.warm import WarmReport
    from loadscope.model.targets import Target

__all__ = [
    "FileChoice",
    "LoadOptions",
    "LoadRecord",
    "from_pretrained",
    "load_file",
    "load_model",
    "prewarm",
]


def _checked_target(target: str | os.PathLike[str]) -> Target:
    from loadscope.model.inspection import check_target
    from loadscope.model.targets import BadTargetSpec, files_only, resolve

    spec = os.fspath(target)
    if spec.startswith("synthetic:"):
        raise as_api_error(
            BadTargetSpec("synthetic: targets are for the CLI; give a path or org/name")
        )
    try:
        resolved = files_only(resolve(spec), "loadscope.load_model")
        check_target(resolved, loads=True)
    except LoadscopeError as exc:
        raise as_api_error(exc) from None
    return resolved


def load_model(
    target: str | os.PathLike[str], device: str = "cpu", **options: Unpack[LoadOptions]
) -> dict[str, torch.Tensor]:
    """Every tensor of a model as one ``{name: tensor}`` state dict.

    ``target`` is a file, a model folder (its ``*.index.json`` followed when present),
    or ``org/name[@revision]`` in the local Hugging Face cache (never downloaded).
    ``options`` are :func:`load_file`'s (:class:`~loadscope.loaders.api.LoadOptions`),
    applied to every safetensors file (with ``local_ranks`` and ``keep_cache``: several
    local ranks read the model from storage once per node). Use it as
    ``model.load_state_dict(loadscope.load_model(path))``; for a transformers model,
    :func:`from_pretrained` builds the model too (tied weights, no random init).
    """
    # Every argument checked before the first shard is read, not after it.
    with timed_call(options.get("record")):
        checked = check_options(options, "load_model", device)
        spec = os.fspath(target)
        if source_of(spec) is not None:
            # A bucket's model (s3://, gs://, az://): many ranged GETs in flight;
            # ``threads`` are the GETs in flight, ``block_bytes`` the bytes of each.
            try:
                state = load_store(spec, options.get("threads"), options.get("block_bytes"))
            except LoadscopeError as exc:
                raise as_api_error(exc) from None
            return to_device(state, checked.device)
        resolved = _checked_target(target)
        return _read(resolved, checked.device, options, checked.record)


def from_pretrained(
    target: str | os.PathLike[str],
    *,
    model_class: Any = None,
    dtype: torch.dtype | str | None = None,
    **options: Unpack[LoadOptions],
) -> Any:
    """``AutoModelForCausalLM.from_pretrained(folder)``'s model, its weights read by
    :func:`load_model` (the fast cold read) instead of memory-mapped.

    ``target`` is what :func:`load_model` takes; its folder must hold the
    ``config.json``. ``model_class`` is the transformers class to build (an Auto class
    or a model class; default ``AutoModelForCausalLM``), ``dtype`` the parameters'
    (default: from_pretrained's, the config's on transformers 5 and float32 on 4.x;
    ``"auto"``: the config's); ``options`` are :func:`load_model`'s. The model is built
    with its parameters on the meta device (no random init), the tensors assigned
    without a copy and tied weights tied (``loaders/pretrained.py`` says how, and why
    this is a function and not a snippet). A checkpoint this cannot load as
    from_pretrained would (quantized, keys renamed on load, a tensor missing) is
    loaded by ``model_class.from_pretrained(folder)`` instead, with a WARNING on the
    ``loadscope`` logger and a note in ``record`` saying why.
    """
    from loadscope.loaders.pretrained import load_pretrained

    with timed_call(options.get("record")):
        checked = check_options(options, "from_pretrained")
        resolved = _checked_target(target)
        return load_pretrained(
            resolved.root,
            lambda: _read(resolved, "cpu", options, checked.record),
            model_class=model_class,
            dtype=dtype,
            record=checked.record,
        )


def _read(
    resolved: Target, device: str, options: LoadOptions, record: LoadRecord | None
) -> dict[str, torch.Tensor]:
    """Every file of ``resolved``: safetensors through :func:`load_file` (with
    ``options``), torch checkpoints through ``torch.load(weights_only=True, mmap=True)``."""
    state: dict[str, torch.Tensor] = {}
    for wf in resolved.files:
        if wf.format == "safetensors":
            part = load_file(wf.path, device, **options)
        else:
            part = load_torch_file(wf.path, device, record=record)
        state.update(part)
    return state


def prewarm(
    target: str | os.PathLike[str],
    *,
    threads: int = WARM_THREADS,
    block_bytes: int = WARM_BLOCK_BYTES,
) -> WarmReport:
    """Read every weight file into the page cache, ``threads`` blocks of ``block_bytes`` at once.

    For a stack that keeps its own loader: call it (or run ``loadscope warm MODEL``)
    before the stack starts, and its memory-mapped load finds the pages in RAM.
    Refuses (``MemoryError`` family) when the uncached part of the model does not fit
    in available memory or the cgroup limit. Returns each file's residency before and
    after, the bytes read and the time taken.
    """
    from loadscope.actions.warm import warm

    check_knobs(threads, block_bytes, "auto")
    resolved = _checked_target(target)
    try:
        return warm(resolved, threads=threads, block_bytes=block_bytes)
    except LoadscopeError as exc:
        raise as_api_error(exc) from None
