"""``api``: ``loadscope.load_file(path)`` per file — the public API, timed as users call it.

The same function a training script imports (``loaders/api.py``, exported as
``loadscope.load_file``): its header check, its residency sampling, its choice per
file and its error mapping are all inside the trial, so the number the advice puts
under ``loadscope.load_file`` comes from that code. A sampled trial loads the
sampled tensors through the same per-file choice (the ``auto`` path), since the
public call always loads whole files.
"""

from __future__ import annotations

from loadscope.base import fix_ids
from loadscope.loaders import strategy
from loadscope.loaders.api import load_file
from loadscope.loaders.autoread import KNOBS
from loadscope.loaders.preload import count_first_call
from loadscope.loaders.strategies.auto import Auto


class PublicLoadFile(strategy.Strategy):
    name = "api"
    rank_mode = "node-shared"
    summary = "loadscope.load_file(path): the public API (auto's choices, safetensors' output)"
    requires = strategy.Requirements(ram_multiple=1.0)
    doctor_order = 40
    on_gpu_box = True
    warm_trial = True
    reads = "deep"
    own_copy = True
    fixes = frozenset({fix_ids.PARALLEL_READS})
    routes = (
        strategy.StackRoute(
            "safetensors",
            "code change",
            "loadscope.load_file",
            "import loadscope  # loadscope.load_file(p) is a drop-in for load_file(p)\n"
            "state = loadscope.load_model({py})",
        ),
    )
    knobs = tuple(k for k in KNOBS if k.name != "huge_pages")  # load_file: auto's default

    def prepare(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> None:
        count_first_call(ctx.notes)  # the printed code runs in a fresh process

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        threads, block = ctx.knob_values(self, "threads", "block_bytes")
        direct = str(ctx.knob(self, "direct"))
        if any(f.tensors is not None for f in files):
            ctx.notes["sampled"] = "a sample: loaded through auto's per-file path"
            # With load_file's own settings, never the probe's hints (auto would take them).
            own = strategy.LoadContext(knobs=ctx.settings(self), notes=ctx.notes)
            yield from Auto().load(files, own)
            return
        for f in files:
            yield from load_file(f.path, threads=threads, block_bytes=block, direct=direct).items()
