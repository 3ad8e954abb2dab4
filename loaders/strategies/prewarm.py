"""``prewarm``: ``loadscope warm`` (or ``loadscope.prewarm``), then the stack's own ``load_file``.

The fix that needs no code change in the user's stack: before the stack starts,
read every weight file into the page cache with a pool of threads taking the next
16 MiB block of any file (many requests in flight even for a one-file model), then
let the stack load as it always does — ``safetensors.torch.load_file``, memory-mapped,
now from RAM. The trial times both steps together: that is the cold-start cost a
user who adds ``loadscope warm MODEL`` before their command pays.
"""

from __future__ import annotations

from loadscope.loaders import strategy
from loadscope.loaders.buffers import fill_ranges
from loadscope.loaders.pagefill import WARM_BLOCK_BYTES, WARM_THREADS, PageFill
from loadscope.loaders.strategies.mmap_file import MmapLoadFile

#: ``loadscope warm``'s own options, as the knobs of a strategy that warms first.
WARM_KNOBS = (
    strategy.Knob("threads", WARM_THREADS, "loadscope warm --threads"),
    strategy.Knob("block_bytes", WARM_BLOCK_BYTES, "loadscope warm --block"),
)


def warm(
    owner: strategy.Strategy, files: list[strategy.FileRequest], ctx: strategy.LoadContext
) -> None:
    """``loadscope warm`` of the bytes ``files`` ask for, with ``owner``'s
    :data:`WARM_KNOBS`."""
    threads, block = ctx.knob_values(owner, "threads", "block_bytes")
    PageFill(fill_ranges(files), threads=threads, block_bytes=block).run()


class Prewarm(strategy.Strategy):
    name = "prewarm"
    summary = "loadscope warm (8 threads of 16 MiB blocks), then load_file from the page cache"
    requires = strategy.Requirements(ram_multiple=0.0)
    knobs = WARM_KNOBS

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        warm(self, files, ctx)
        yield from MmapLoadFile().load(files, ctx)
