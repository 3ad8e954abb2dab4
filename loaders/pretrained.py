"""A transformers model from a state dict loadscope read, built without a random init.

``loadscope.from_pretrained(path)`` (``loadscope/api.py``) is :func:`load_pretrained`
given ``loadscope.load_model(path)``'s read of the weights, and the ``hf-load-model``
trial (``strategies/transformers_load.py``) runs the same function on the same reads,
so the number the advice prints under the transformers snippet is this code's.

Why a library function rather than code in the snippet: putting a state dict into the
model ``AutoModelForCausalLM.from_pretrained(folder)`` would return takes more than
``from_config`` and ``load_state_dict``, which paid a random init of every weight and
refused any model whose config ties weights (``Missing key(s): lm_head.weight``: GPT-2,
small Llama, Qwen and Gemma checkpoints store the embedding once). Here:

- parameters are made on the meta device while each module's own ``__init__`` computes
  its non-persistent buffers (rotary ``inv_freq``, masks) on the CPU: what
  ``accelerate.init_empty_weights(include_buffers=False)`` does, written here so
  accelerate is not needed. Nothing is initialised at random (init on a meta tensor
  does nothing), and no buffer is left without values (a model built wholly on meta
  fails its first forward with "Cannot copy out of meta tensor");
- the checkpoint's tensors are *assigned* (no copy), each cast to its parameter's dtype,
  which is the one from_pretrained would give: ``dtype`` resolved as it resolves it (by
  default the config's on transformers 5, whose default is ``dtype="auto"``, and
  float32 on 4.x; "auto" the config's, else the checkpoint's own);
- tied weights are tied again, the model is put in ``eval()`` and the folder's
  ``generation_config.json`` read, as from_pretrained does;
- what from_pretrained does that this does not (quantized checkpoints, keys renamed on
  load, modules kept in float32, a tensor missing or left over, tied tensors that
  differ) is not guessed at: it falls back to ``model_class.from_pretrained(folder)``
  and says why: a WARNING on the ``loadscope`` logger and a note in the ``record``.

Works on transformers 4.45 to 5.x (``torch_dtype`` was renamed ``dtype`` in 4.56).
Swapping ``nn.Module.register_parameter`` while the model is built is process-wide:
build one model at a time per process (as from_pretrained's own meta init does).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import chain
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from loadscope.loaders.loadrecord import LoadRecord

log = logging.getLogger("loadscope")

#: Reads the model's weights, called only when they will be used.
StateReader = Callable[[], "dict[str, torch.Tensor]"]


def load_pretrained(
    folder: str | os.PathLike[str],
    read_state: StateReader,
    *,
    model_class: Any = None,
    dtype: torch.dtype | str | None = None,
    record: LoadRecord | None = None,
) -> Any:
    """The model ``model_class.from_pretrained(folder)`` returns, its weights from
    ``read_state()`` (``AutoModelForCausalLM`` when ``model_class`` is None)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = os.fspath(folder)
    cls = model_class if model_class is not None else AutoModelForCausalLM
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise FileNotFoundError(
            f"{folder}: no config.json, so transformers cannot build the model"
            " (loadscope.load_model reads the weights alone)"
        )
    config = AutoConfig.from_pretrained(folder)
    want = _dtype_asked(dtype, config)
    if getattr(config, "quantization_config", None) is not None:
        return _fallback(cls, folder, want, "the checkpoint is quantized", record)
    state = None
    if want is None:  # no dtype in the config: the checkpoint's (from_pretrained's "auto")
        state = read_state()
        want = next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)
    if not want.is_floating_point:
        return _fallback(cls, folder, None, f"dtype {want} is not a floating type", record)
    with _parameters_on_meta():
        model = _from_config(cls, config, want)
    why = _kept_in_float32(model, want)
    if why is None:
        if state is None:
            state = read_state()
        why = _fill(model, state)
    if why is not None:
        del model, state  # the memory goes back before from_pretrained reads again
        return _fallback(cls, folder, want, why, record)
    model.eval()
    if os.path.isfile(os.path.join(folder, "generation_config.json")) and model.can_generate():
        from transformers import GenerationConfig

        model.generation_config = GenerationConfig.from_pretrained(folder)
    return model


def _transformers_at_least(*release: int) -> bool:
    import transformers
    from packaging.version import Version

    return Version(transformers.__version__).release >= release


def _dtype_keyword() -> str:
    """``dtype`` from transformers 4.56 on, ``torch_dtype`` before."""
    return "dtype" if _transformers_at_least(4, 56) else "torch_dtype"


def _dtype_asked(dtype: torch.dtype | str | None, config: Any) -> torch.dtype | None:
    """``dtype`` as the installed from_pretrained resolves it: None is its default
    ("auto" from transformers 5 on, ``torch.get_default_dtype()`` before), "auto" the
    config's dtype (None when the config names none: then the checkpoint's)."""
    import torch

    value: object = dtype
    if value is None:
        value = "auto" if _transformers_at_least(5) else torch.get_default_dtype()
    if value == "auto":
        value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(value, str):
        value = getattr(torch, value, value)
    if value is None or isinstance(value, torch.dtype):
        return value
    raise ValueError(f"dtype must be a torch.dtype, its name or 'auto', not {dtype!r}")


@contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Every parameter registered in this block moved to the meta device at once (its
    init then does nothing); buffers stay where their module computed them."""
    import torch

    register = torch.nn.Module.register_parameter

    def on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        register(module, name, param)
        made = module._parameters[name]
        if made is not None and not made.is_meta:
            moved = torch.nn.Parameter(made.to("meta"), requires_grad=made.requires_grad)
            moved.__dict__.update(made.__dict__)
            module._parameters[name] = moved

    torch.nn.Module.register_parameter = on_meta  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def _from_config(cls: Any, config: Any, dtype: torch.dtype) -> Any:
    """``cls`` built from ``config`` in ``dtype``: an Auto class's ``from_config``, or a
    model class's ``_from_config`` (what ``from_pretrained`` itself calls)."""
    build = getattr(cls, "from_config", None) or getattr(cls, "_from_config", None)
    if build is None:
        raise TypeError(
            f"model_class must be a transformers Auto class or model class, not {cls!r}"
        )
    return build(config, **{_dtype_keyword(): dtype})


def _kept_in_float32(model: Any, dtype: torch.dtype) -> str | None:
    """Why from_pretrained would keep some modules in float32 where from_config does not."""
    import torch

    kept = (
        list(getattr(model, "_keep_in_fp32_modules", None) or []) if dtype == torch.float16 else []
    )
    if dtype in (torch.float16, torch.bfloat16):
        kept += list(getattr(model, "_keep_in_fp32_modules_strict", None) or [])
    if kept:
        return f"{type(model).__name__} keeps {', '.join(kept)} in float32 at {dtype}"
    return None


def _fill(model: Any, state: dict[str, torch.Tensor]) -> str | None:
    """Assign ``state`` to ``model`` (built on meta) and tie its weights; why not, if not."""
    import torch

    expected = model.state_dict()  # meta tensors: names, shapes and dtypes, no data
    for name, tensor in state.items():
        want = expected.get(name)
        if want is not None and tensor.is_floating_point() and tensor.dtype != want.dtype:
            state[name] = tensor.to(want.dtype)
    try:
        result = model.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as exc:  # a shape that differs from the config's
        first = str(exc).strip().splitlines()[-1].strip()
        return f"the checkpoint does not fit the model its config.json describes ({first})"
    ignored = [
        re.compile(p) for p in getattr(model, "_keys_to_ignore_on_load_unexpected", None) or []
    ]
    unexpected = [k for k in result.unexpected_keys if not any(p.search(k) for p in ignored)]
    if unexpected:
        return f"{_some(unexpected)} in the checkpoint are not the model's (renamed on load?)"
    model.tie_weights()
    missing = [n for n, t in chain(model.named_parameters(), model.named_buffers()) if t.is_meta]
    if missing:
        return f"{_some(missing)} of the model are not in the checkpoint"
    now = model.state_dict()
    differ = [
        k
        for k, t in state.items()
        if k in now and now[k].data_ptr() != t.data_ptr() and not torch.equal(now[k], t)
    ]
    if differ:  # tied in the config, stored apart with other values: from_pretrained unties
        return f"{_some(differ)} differ from the weights they are tied to"
    return None


def _some(names: list[str]) -> str:
    more = f" and {len(names) - 1} more" if len(names) > 1 else ""
    return f"{names[0]}{more}"


def _fallback(
    cls: Any, folder: str, dtype: torch.dtype | None, why: str, record: LoadRecord | None
) -> Any:
    """``cls.from_pretrained(folder)`` in ``dtype`` (the config's when None), saying why."""
    name = getattr(cls, "__name__", str(cls))
    note = f"loadscope.from_pretrained: {why}; loaded with {name}.from_pretrained({folder!r})"
    log.warning("%s", note)
    if record is not None:
        record.notes.append(note)
    return cls.from_pretrained(folder, **{_dtype_keyword(): dtype or "auto"})
