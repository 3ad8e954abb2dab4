"""The public loader API: ``loadscope.load_file``, ``load_model`` and ``prewarm``.

What a training script or a server imports to apply loadscope's fix without the CLI:

- :func:`load_file` — a drop-in for ``safetensors.torch.load_file`` (``loaders/api.py``);
- :func:`load_model` — every weight file of a model folder, a sharded index, a single
  file or an ``org/name[@revision]`` from the local Hugging Face cache, as one state
  dict (safetensors through :func:`load_file`; torch checkpoints through
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
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from loadscope.base.errors import LoadscopeError
from loadscope.loaders.api import (
    FileChoice,
    LoadRecord,
    as_api_error,
    check_record,
    import_for_load,
    load_file,
    load_torch_file,
)
from loadscope.loaders.apichecks import (
    check_device,
    check_hints,
    check_knobs,
    check_local_ranks,
)
from loadscope.loaders.pagefill import WARM_BLOCK_BYTES, WARM_THREADS

if TYPE_CHECKING:
    import torch

    from loadscope.actions.warm import WarmReport
    from loadscope.model.targets import Target

__all__ = ["FileChoice", "LoadRecord", "from_pretrained", "load_file", "load_model", "prewarm"]


def _checked_target(target: str | os.PathLike[str]) -> Target:
    from loadscope.model.inspection import check_target
    from loadscope.model.targets import BadTargetSpec, resolve

    spec = os.fspath(target)
    if spec.startswith("synthetic:"):
        raise as_api_error(
            BadTargetSpec("synthetic: targets are for the CLI; give a path or org/name")
        )
    try:
        resolved = resolve(spec)
        check_target(resolved, loads=True)
    except LoadscopeError as exc:
        raise as_api_error(exc) from None
    return resolved


def load_model(
    target: str | os.PathLike[str],
    device: str = "cpu",
    *,
    threads: int | None = None,
    block_bytes: int | None = None,
    direct: str = "auto",
    hints: dict[str, Any] | None = None,
    record: LoadRecord | None = None,
    local_ranks: tuple[int, int] | None = None,
    keep_cache: bool = False,
) -> dict[str, torch.Tensor]:
    """Every tensor of a model as one ``{name: tensor}`` state dict.

    ``target`` is a file, a model folder (its ``*.index.json`` followed when present),
    or ``org/name[@revision]`` in the local Hugging Face cache (never downloaded).
    The knobs are :func:`load_file`'s, applied to every safetensors file (with
    ``local_ranks`` and ``keep_cache``: several local ranks read the model from storage
    once per node). Use it as
    ``model.load_state_dict(loadscope.load_model(path))``; for a transformers model,
    :func:`from_pretrained` builds the model too (tied weights, no random init).
    """
    # Every argument checked before the first shard is read, not after it.
    record = check_record(record)
    import_for_load(record)  # a first call's torch import, in the record's wall time
    check_knobs(threads, block_bytes, direct)
    device = check_device(device)
    check_hints(hints)
    check_local_ranks(local_ranks)
    resolved = _checked_target(target)
    return _read(
        resolved, device, threads, block_bytes, direct, hints, record, local_ranks, keep_cache
    )


def from_pretrained(
    target: str | os.PathLike[str],
    *,
    model_class: Any = None,
    dtype: torch.dtype | str | None = None,
    threads: int | None = None,
    block_bytes: int | None = None,
    direct: str = "auto",
    record: LoadRecord | None = None,
) -> Any:
    """``AutoModelForCausalLM.from_pretrained(folder)``'s model, its weights read by
    :func:`load_model` (the fast cold read) instead of memory-mapped.

    ``target`` is what :func:`load_model` takes; its folder must hold the
    ``config.json``. ``model_class`` is the transformers class to build (an Auto class
    or a model class; default ``AutoModelForCausalLM``), ``dtype`` the parameters'
    (default: from_pretrained's, the config's on transformers 5 and float32 on 4.x;
    ``"auto"``: the config's). The model is built
    with its parameters on the meta device (no random init), the tensors assigned
    without a copy and tied weights tied (``loaders/pretrained.py`` says how, and why
    this is a function and not a snippet). A checkpoint this cannot load as
    from_pretrained would (quantized, keys renamed on load, a tensor missing) is
    loaded by ``model_class.from_pretrained(folder)`` instead, with a WARNING on the
    ``loadscope`` logger and a note in ``record`` saying why.
    """
    from loadscope.loaders.pretrained import load_pretrained

    record = check_record(record)
    import_for_load(record)
    check_knobs(threads, block_bytes, direct)
    resolved = _checked_target(target)
    return load_pretrained(
        resolved.root,
        lambda: _read(resolved, "cpu", threads, block_bytes, direct, None, record),
        model_class=model_class,
        dtype=dtype,
        record=record,
    )


def _read(
    resolved: Target,
    device: str,
    threads: int | None,
    block_bytes: int | None,
    direct: str,
    hints: dict[str, Any] | None,
    record: LoadRecord | None,
    local_ranks: tuple[int, int] | None = None,
    keep_cache: bool = False,
) -> dict[str, torch.Tensor]:
    """Every file of ``resolved``: safetensors through :func:`load_file`, torch checkpoints
    through ``torch.load(weights_only=True, mmap=True)``."""
    state: dict[str, torch.Tensor] = {}
    for wf in resolved.files:
        if wf.format == "safetensors":
            part = load_file(
                wf.path,
                device,
                threads=threads,
                block_bytes=block_bytes,
                direct=direct,
                hints=hints,
                record=record,
                local_ranks=local_ranks,
                keep_cache=keep_cache,
            )
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
