"""The user's own load, end to end: ``AutoModelForCausalLM.from_pretrained(path)`` to a model.

Three trials of the code the transformers snippets name, each ending with a usable
model on the CPU (its ``state_dict`` is what the trial yields):

- ``hf-pretrained``: ``from_pretrained(path)`` as users call it — the baseline;
- ``hf-prewarm``: ``loadscope warm`` first (8 threads of 16 MiB blocks into the page
  cache), then the same ``from_pretrained(path)``: the fix that changes no code;
- ``hf-load-model``: the model built from its config, then
  ``model.load_state_dict(loadscope.load_model(path))`` (``loadscope.load_file`` per file).

Correctness: transformers builds the model in the config's dtype and casts each
checkpoint tensor into it, so each parameter is yielded cast back to the dtype the
checkpoint stored (exact for loadscope's synthetic models, whose fp16 and fp32 values
are bf16-representable) and checked against the reference read like every trial.
transformers and the model's code are imported before the clock starts. Needs
``config.json`` beside the weights; loads whole files, so a sampled run skips them.
"""

from __future__ import annotations

import os
from typing import Any

from loadscope.loaders import strategy
from loadscope.loaders.api import load_file
from loadscope.loaders.buffers import torch_dtype
from loadscope.loaders.safetensors_format import read_header
from loadscope.loaders.strategies.prewarm import WARM_KNOBS, warm


def model_dir(files: list[strategy.FileRequest]) -> str:
    """The folder ``from_pretrained`` is given: the one holding the weights and config.json."""
    roots = {os.path.dirname(f.path) for f in files}
    if len(roots) != 1:
        raise ValueError("from_pretrained needs the weight files in one folder")
    root = roots.pop()
    if not os.path.isfile(os.path.join(root, "config.json")):
        raise ValueError(f"no config.json in {root}: transformers cannot build the model")
    return root


class FromPretrained(strategy.Strategy):
    name = "hf-pretrained"
    summary = "transformers AutoModelForCausalLM.from_pretrained(path) to a usable CPU model"
    requires = strategy.Requirements(ram_multiple=1.0, package="transformers", extra="transformers")
    samples = False
    sample_files = False  # from_pretrained loads the model's folder
    preload = ("transformers", "transformers-model")

    def prepare(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> None:
        """Import transformers and the model's code before the clock: the first
        ``from_pretrained`` in a process spends ~1.6 s (here) importing its modeling
        module, which is not the load. Building the model on the meta device does that
        without allocating or reading anything."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        config = AutoConfig.from_pretrained(model_dir(files))
        with torch.device("meta"):
            AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        model = self.build(files, ctx)
        yield from as_stored(model, files)

    def build(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> Any:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(model_dir(files))


class FromPretrainedPrewarmed(FromPretrained):
    name = "hf-prewarm"
    summary = "loadscope warm, then from_pretrained(path): the no-code-change fix, end to end"
    knobs = WARM_KNOBS

    def build(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> Any:
        warm(self, files, ctx)
        return super().build(files, ctx)


class FromConfigLoadModel(FromPretrained):
    name = "hf-load-model"
    summary = "from_config, then model.load_state_dict(loadscope.load_model(path))"

    def build(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> Any:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model_dir(files))
        dtype = config.dtype or torch.float32
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)  # type: ignore[no-untyped-call]
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(f.path))
        model.load_state_dict(state)
        return model


def as_stored(model: Any, files: list[strategy.FileRequest]) -> strategy.Tensors:
    """The model's tensors in the dtypes the checkpoint stored them in (for the digests)."""
    stored: dict[str, str] = {}
    for f in files:
        stored.update({t.name: t.dtype for t in read_header(f.path).tensors})
    for name, tensor in model.state_dict().items():
        if name in stored:
            yield name, tensor.detach().to(torch_dtype(stored[name]))
