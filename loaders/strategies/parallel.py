"""``parallel``: threads of large preads into one buffer per file; tensors are views on it.

Deep parallelism with large requests is what beats per-request latency on
network storage (many requests in flight instead of one); the buffer is read
once and never copied again (the reads: ``loaders/parallelread.py``).
"""

from __future__ import annotations

from loadscope.loaders import strategy
from loadscope.loaders.parallelread import read_file_parallel


class Parallel(strategy.FileByFile):
    name = "parallel"
    summary = "threads of 16 MiB preads into one buffer per file, tensors as views"
    tuned = True
    requires = strategy.Requirements(ram_multiple=1.0)
    doctor_order = 30
    knobs = (
        strategy.Knob("threads", 8, "reader threads per file"),
        strategy.Knob("block_bytes", 16 << 20, "bytes per read request"),
    )

    def load_one(self, f: strategy.FileRequest, ctx: strategy.LoadContext) -> strategy.Tensors:
        threads, block = ctx.knob_values(self, "threads", "block_bytes")
        yield from read_file_parallel(f, threads=threads, block_bytes=block)
