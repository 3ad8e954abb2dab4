"""``gds``: GPUDirect Storage through kvikio — storage to GPU memory without a host copy.

``kvikio.CuFile.pread`` reads each span of requested tensors straight into one
device buffer per file; with GDS set up (``nvidia-fs``, a supported filesystem)
the DMA goes from the disk to the GPU; elsewhere kvikio falls back to its POSIX
compatibility mode (host bounce buffers), which the trial notes say.
Optional: ``pip install 'loadscope[gds]'`` (kvikio for the machine's CUDA).
"""

from __future__ import annotations

import importlib
from typing import Any

from loadscope.loaders import strategy
from loadscope.loaders.cuda import cuda_device
from loadscope.loaders.staged import StagedReadError, device_tensors, plan_file


def kvikio_mode(kvikio: Any) -> str:
    """How this kvikio does I/O (its compatibility-mode setting), as far as it can tell."""
    defaults = getattr(kvikio, "defaults", None)
    getter = getattr(defaults, "get", None)
    if callable(getter):
        try:
            return f"compat_mode={getter('compat_mode')}"
        except (KeyError, ValueError, TypeError, RuntimeError) as exc:
            return f"compat_mode unknown ({type(exc).__name__}: {exc})"
    query = getattr(defaults, "compat_mode", None)
    if callable(query):
        return f"compat_mode={query()}"
    return "compat_mode unknown (this kvikio has no query for it)"


class Gds(strategy.Strategy):
    name = "gds"
    summary = "kvikio CuFile.pread straight into GPU memory (GPUDirect Storage)"
    requires = strategy.Requirements(gpu=True, ram_multiple=0.0, package="kvikio", extra="gds")
    knobs = (
        strategy.Knob("task_bytes", 16 << 20, "bytes per kvikio task (its thread pool's unit)"),
    )

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        import torch

        kvikio: Any = importlib.import_module("kvikio")
        device = cuda_device(ctx.device)
        task = ctx.knob(self, "task_bytes")
        ctx.notes["kvikio"] = f"{getattr(kvikio, '__version__', '?')}, {kvikio_mode(kvikio)}"
        for f in files:
            plan = plan_file(f)
            buffer = torch.empty(plan.device_bytes, dtype=torch.uint8, device=device)
            with kvikio.CuFile(f.path, "r") as handle:
                futures = [
                    (
                        seg,
                        handle.pread(
                            buffer[seg.device_offset : seg.device_offset + seg.nbytes],
                            seg.nbytes,
                            seg.file_offset,
                            task_size=task,
                        ),
                    )
                    for seg in plan.segments
                ]
                for seg, future in futures:
                    got = int(future.get())
                    if got != seg.nbytes:
                        raise StagedReadError(
                            f"{f.path}: short read at offset {seg.file_offset}: got {got} of"
                            f" {seg.nbytes} bytes (truncated, or shrinking while it was read)"
                        )
            yield from device_tensors(plan, buffer)
