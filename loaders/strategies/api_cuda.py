"""``api-cuda``: ``loadscope.load_file(path, device="cuda:N")`` — the public API to the GPU.

The same call a training script makes to put a checkpoint on its GPU, timed as users
call it: the header check, then the ``staged`` path (large reads into a ring of pinned
buffers, each copied to the device while the next is read, tensors made on the device).
The number the advice puts under ``loadscope.load_model(path, device="cuda")`` comes
from this code. A sampled trial loads the sampled tensors through the same pipeline.
"""

from __future__ import annotations

from loadscope.base import fix_ids
from loadscope.loaders import strategy
from loadscope.loaders.api import load_file
from loadscope.loaders.preload import count_first_call
from loadscope.loaders.strategies.staged_cuda import Staged


class PublicLoadFileCuda(strategy.Strategy):
    name = "api-cuda"
    summary = "loadscope.load_file(path, device='cuda:N'): the public API, staged to the GPU"
    requires = strategy.Requirements(gpu=True, ram_multiple=0.0)
    warm_trial = True
    fixes = frozenset({fix_ids.GPU_STAGED})
    # Measured against safetensors' own device load (the GPU's default load).
    routes = (
        strategy.StackRoute(
            "safetensors",
            "code change",
            "loadscope.load_file(p, device='cuda')",
            "import loadscope  # to the GPU through pinned buffers, copies overlapped with reads\n"
            "state = loadscope.load_model({py}, device='cuda')",
        ),
    )

    def prepare(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> None:
        count_first_call(ctx.notes)  # the printed code runs in a fresh process

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        if any(f.tensors is not None for f in files):
            ctx.notes["sampled"] = "a sample: loaded through the staged pipeline load_file uses"
            # Staged with its own defaults (no probe hints): what load_file(device=) runs.
            yield from Staged().load(
                files, strategy.LoadContext(device=ctx.device, notes=ctx.notes)
            )
            return
        for f in files:
            yield from load_file(f.path, device=ctx.device).items()
