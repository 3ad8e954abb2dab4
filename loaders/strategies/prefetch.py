"""``prefetch``: fill the page cache with large sequential reads, then ``load_file``.

The maintainer's second fix: the reads are large and sequential (so a network
disk sees few big requests), and the load that follows maps pages already in
RAM. File by file: each file is read ahead and then loaded, so its pages are
mapped seconds after they were read (and the first tensors come one file in,
not one model in). Needs each file to fit in the page cache. On a sampled trial
only the sampled tensors' bytes are read ahead, so the time scales with the
sample.
"""

from __future__ import annotations

import os

from loadscope.loaders import strategy
from loadscope.loaders.buffers import byte_ranges
from loadscope.loaders.strategies.mmap_file import MmapLoadFile


class Prefetch(strategy.Strategy):
    name = "prefetch"
    summary = "sequential 16 MiB reads into the page cache, then load_file, file by file"
    requires = strategy.Requirements(ram_multiple=0.0)
    doctor_order = 100
    reads = "buffered"
    knobs = (strategy.Knob("block_bytes", 16 << 20, "size of each prefetch read"),)

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        block = ctx.knob(self, "block_bytes")
        view = memoryview(bytearray(block))
        loader = MmapLoadFile()
        for f in files:
            fd = os.open(f.path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                for start, end in byte_ranges(f):
                    offset = start
                    while offset < end and (
                        n := os.preadv(fd, [view[: min(block, end - offset)]], offset)
                    ):
                        offset += n
            finally:
                os.close(fd)
            # Each file is loaded right after its read-ahead, not after every file's:
            # pages read ahead and left idle for a whole model's read can be reclaimed
            # before load_file maps them, and each is then read again through the slow
            # path the prefetch was meant to avoid (a 4 GiB model on the emulated disk
            # with the test suite running beside it: 1-5% of the first files gone and
            # the whole load 1.3x as long; on the idle machine nothing was reclaimed
            # and both orders took the same time: benchmarks/bench_prefetch_order.py).
            yield from loader.load_one(f, ctx)
