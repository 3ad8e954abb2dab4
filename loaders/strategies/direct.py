"""``direct``: O_DIRECT aligned reads, many in flight, into one aligned buffer per file.

Bypasses the page cache and its readahead entirely, so each request is exactly
as large as asked: measured best on the emulated network disk (1 MiB requests
12 deep: 18x ``load_file`` at 5 ms, benchmarks/RESULTS.md). Unavailable where the filesystem refuses
O_DIRECT.
"""

from __future__ import annotations

from loadscope.loaders import strategy
from loadscope.loaders.buffers import o_direct_ok
from loadscope.loaders.parallelread import read_file_parallel


class Direct(strategy.FileByFile):
    name = "direct"
    summary = "O_DIRECT 1 MiB reads, 12 in flight, into an aligned buffer"
    tuned = True
    requires = strategy.Requirements(ram_multiple=1.0, o_direct=True)
    doctor_order = 25  # beside the parallel family where the filesystem takes O_DIRECT
    reads = "deep"
    knobs = (
        strategy.Knob("threads", 12, "requests in flight per file"),
        strategy.Knob("block_bytes", 1 << 20, "bytes per read request", multiple=4096),
    )

    def load_one(self, f: strategy.FileRequest, ctx: strategy.LoadContext) -> strategy.Tensors:
        threads, block = ctx.knob_values(self, "threads", "block_bytes")
        if not o_direct_ok(f.path):
            raise OSError(f"{f.path}: the filesystem refuses O_DIRECT")
        yield from read_file_parallel(f, threads=threads, block_bytes=block, direct=True)
