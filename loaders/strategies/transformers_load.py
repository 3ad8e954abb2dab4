"""The user's own load, end to end: ``AutoModelForCausalLM.from_pretrained(path)`` to a model.

Three trials of the code the transformers snippets name, each ending with a usable
model on the CPU (its ``state_dict`` is what the trial yields):

- ``hf-pretrained``: ``from_pretrained(path)`` as users call it — the baseline;
- ``hf-prewarm``: ``loadscope warm`` first (8 threads of 16 MiB blocks into the page
  cache), then the same ``from_pretrained(path)``: the fix that changes no code;
- ``hf-load-model``: ``loadscope.from_pretrained(path)``, the snippet's code: the same
  :func:`~loadscope.loaders.pretrained.load_pretrained` (parameters built on meta, the
  checkpoint's tensors assigned, tied weights tied), given ``loadscope.load_model``'s
  reads (``load_file`` per safetensors file). Only load_model's target resolution and
  header checks are not in the trial: the diagnosis ran them before any trial. Where
  that function falls back to from_pretrained, the trial says so (note ``fallback``).

Correctness: transformers builds the model in the config's dtype and casts each
checkpoint tensor into it, so each parameter is yielded cast back to the dtype the
checkpoint stored (exact for loadscope's synthetic models, whose fp16 and fp32 values
are bf16-representable) and checked against the reference read like every trial.
transformers is imported before the clock starts; the model's construction is inside it
and the import of its modeling module is added to it (measured once), as the call pays
both in a user's fresh process; the worker touches every weight (transformers 5 maps
them and reads at first use). Needs
``config.json`` beside the weights; loads whole files, so a sampled run skips them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from typing import Any

from loadscope.base import fix_ids
from loadscope.loaders import stack_code as code
from loadscope.loaders import strategy
from loadscope.loaders.api import load_file, load_torch_file
from loadscope.loaders.buffers import torch_dtype
from loadscope.loaders.loadrecord import LoadRecord
from loadscope.loaders.preload import PRELOAD_SECONDS, count_first_call
from loadscope.loaders.pretrained import load_pretrained
from loadscope.loaders.safetensors_format import read_header
from loadscope.loaders.strategies.api import PublicLoadFile
from loadscope.loaders.strategies.mmap_file import MmapLoadFile
from loadscope.loaders.strategies.prewarm import WARM_KNOBS, Prewarm, warm


def modeling_module(folder: str) -> str | None:
    """The modeling module transformers imports for the model in ``folder`` (from its
    config.json's ``model_type``), None when it cannot be told."""
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as fh:
            kind = str(json.load(fh)["model_type"]).replace("-", "_")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return f"transformers.models.{kind}.modeling_{kind}" if kind.isidentifier() else None


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
    # Imported once by the fork server; what the model's modeling module's import took
    # there is added to each trial's time (see prepare).
    preload = ("transformers", "transformers-model")
    builds_model = True
    reads_as = MmapLoadFile.name  # safetensors' own mmap, as load_file
    doctor_order = 85  # the user's own load end to end, before the folklore fix
    on_gpu_box = True

    def prepare(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> None:
        """Import transformers before the clock, as the user's script does at its top. The
        first ``from_pretrained`` in a fresh process also imports the model's modeling
        module (1.6-2.3 s on the 2-core VM): the call's cost, not the script's, so the
        trial counts it (``setup_s``, added to its time by the worker) as the fork server
        measured it importing the module once (or as it takes here, without a server).
        The worker then touches every weight inside the clock: transformers 5 returns a
        model whose weights are still mapped, read at their first use."""
        import importlib

        from transformers import AutoModelForCausalLM  # noqa: F401  (the script's import)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        module = modeling_module(model_dir(files))
        took = PRELOAD_SECONDS.get(module) if module else None
        if module and took is None and module not in sys.modules:
            t0 = time.perf_counter()
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
            took = time.perf_counter() - t0
        if took is not None:
            ctx.notes["setup_s"] = took

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
    rank_mode = "warm-node"
    summary = "loadscope warm, then from_pretrained(path): the no-code-change fix, end to end"
    knobs = WARM_KNOBS
    doctor_order = 86
    reads_as = Prewarm.name  # loadscope warm, then load_file's mmap from the page cache
    fixes = frozenset({fix_ids.PARALLEL_READS, fix_ids.PREWARM})
    routes = (code.warm_first_transformers(baseline=FromPretrained.name),)

    def build(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> Any:
        warm(self, files, ctx)
        return super().build(files, ctx)


class FromConfigLoadModel(FromPretrained):
    name = "hf-load-model"
    rank_mode = "node-shared"
    reads = "deep"  # load_model's reads: many large requests in flight
    reads_as = PublicLoadFile.name
    summary = "loadscope.from_pretrained(path): load_model's reads into the model, no random init"
    doctor_order = 87
    own_copy = True
    fixes = frozenset({fix_ids.PARALLEL_READS})
    # Built on the meta device, no random init, loadscope's reads assigned: this trial
    # runs that same function.
    routes = (
        strategy.StackRoute(
            "transformers",
            "code change",
            "loadscope.from_pretrained",
            "import loadscope  # AutoModelForCausalLM.from_pretrained, its weights read by"
            " loadscope\nmodel = loadscope.from_pretrained({py})",
            baseline=FromPretrained.name,
            measure_with="loadscope bench MODEL --strategies hf-pretrained,hf-load-model",
            layouts=code.NOT_DIFFUSERS,
        ),
    )

    def prepare(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> None:
        super().prepare(files, ctx)
        count_first_call(ctx.notes)  # loadscope.from_pretrained's first call's imports too

    def build(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> Any:
        record = LoadRecord()
        model = load_pretrained(model_dir(files), lambda: read_files(files), record=record)
        if record.notes:  # it fell back to from_pretrained: the trial timed that
            ctx.notes["fallback"] = "; ".join(record.notes)
        return model


def read_files(files: list[strategy.FileRequest]) -> dict[str, Any]:
    """``loadscope.load_model``'s read of the files: ``load_file`` per safetensors file,
    ``torch.load(weights_only=True, mmap=True)`` per torch checkpoint, defaults as printed."""
    state: dict[str, Any] = {}
    for f in files:
        state.update(load_file(f.path) if f.format == "safetensors" else load_torch_file(f.path))
    return state


def as_stored(model: Any, files: list[strategy.FileRequest]) -> strategy.Tensors:
    """The model's tensors in the dtypes the checkpoint stored them in (for the digests)."""
    stored: dict[str, str] = {}
    for f in files:
        stored.update({t.name: t.dtype for t in read_header(f.path).tensors})
    for name, tensor in model.state_dict().items():
        if name in stored:
            yield name, tensor.detach().to(torch_dtype(stored[name]))
