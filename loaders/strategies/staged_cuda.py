"""``staged``: our fast path to the GPU — parallel preads into a pinned ring, async copies.

Reader threads fill a few pinned host slots with large preads while the copy
stream sends the slots already full to the device; tensors are views on one
device buffer per file. Host memory is the ring (slots x slot_bytes), never the
model. The pipeline itself, with the device abstracted, is ``loaders/staged.py``.
"""

from __future__ import annotations

from loadscope.loaders import staged, strategy


class Staged(strategy.Strategy):
    name = staged.NAME
    summary = "parallel preads into a ring of pinned buffers, async H2D copies overlapping reads"
    requires = strategy.Requirements(gpu=True, ram_multiple=0.0)
    tuned = True
    warm_trial = True
    knobs = staged.KNOBS

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        yield from staged.staged_load(
            files,
            staged.CudaDevice(ctx.device),
            slots=ctx.knob(self, "slots"),
            slot_bytes=ctx.knob(self, "slot_bytes"),
            threads=ctx.knob(self, "threads"),
            block_bytes=ctx.knob(self, "block_bytes"),
            notes=ctx.notes,
        )
