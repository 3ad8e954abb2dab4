"""Code that several strategies' stack routes share (a strategy's own routes sit on it).

The templates take ``{py}``/``{sh}`` (the model as safetensors names it) and
``{dir_py}``/``{dir_sh}`` (the folder the HF stacks and servers take); see
:class:`~loadscope.loaders.strategy.StackRoute`.
"""

from __future__ import annotations

from typing import Any

from loadscope.base.hf_layout import DIFFUSERS_MODEL, DIFFUSERS_PIPELINE, TRANSFORMERS, UNKNOWN
from loadscope.loaders.strategy import StackRoute

#: transformers' code fails on a diffusers folder; unknown folders keep their lines.
NOT_DIFFUSERS = (TRANSFORMERS, UNKNOWN)

#: from_pretrained as users call it (the ``hf-pretrained`` trial's code).
TRANSFORMERS_PRETRAINED = (
    "from transformers import AutoModelForCausalLM\n"
    "model = AutoModelForCausalLM.from_pretrained({dir_py})"
)
#: ``loadscope warm`` before the stack's own unchanged load.
WARM_FIRST = "# run first: loadscope warm {sh}\n"
#: A stand-in's number said beside it: the same reads, timed without the stack's call.
TIMED_AS_LOAD_FILE = "the same reads timed with load_file; from_pretrained itself not timed here"
TIMED_AS_FULL_READ = "the same reads timed as load(f.read()); from_pretrained itself not timed here"
VLLM = "vllm serve {dir_sh}"
SGLANG = "python -m sglang.launch_server --model-path {dir_sh}"


def warm_first_transformers(**kw: Any) -> StackRoute:
    """``loadscope warm`` before transformers' own unchanged ``from_pretrained``."""
    return StackRoute(
        "transformers",
        "no code change",
        "loadscope warm first",
        WARM_FIRST + TRANSFORMERS_PRETRAINED,
        layouts=NOT_DIFFUSERS,
        **kw,
    )


def diffusers(route: str, what: str, first: str, args: str, proxy: str) -> tuple[StackRoute, ...]:
    """The same change for a diffusers pipeline's folder and for a single model's: each
    class's ``from_pretrained(folder{args})``, after ``first``."""
    return tuple(
        StackRoute(
            "diffusers",
            route,
            what,
            f"{first}from diffusers import {cls}{note}\n"
            f"{var} = {cls}.from_pretrained({{dir_py}}{args})",
            proxy=proxy,
            layouts=(layout,),
        )
        for cls, var, layout in (
            ("DiffusionPipeline", "pipe", DIFFUSERS_PIPELINE),
            ("AutoModel", "model", DIFFUSERS_MODEL),
        )
        for note in ["  # disable_mmap: diffusers >= 0.37" if "disable_mmap" in args else ""]
    )
