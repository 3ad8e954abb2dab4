"""``vllm-prefetch``: what ``vllm serve --safetensors-load-strategy prefetch`` does.

vLLM starts a background thread with a pool of ``--safetensors-prefetch-num-threads``
readers (default 8); each reader takes one whole file and reads it front to back with
``read(--safetensors-prefetch-block-size)`` calls (default 16 MiB), only to fill the
page cache. Meanwhile the load proceeds as usual — ``safe_open`` and ``get_tensor``
per file, memory-mapped — so its page faults meet pages the prefetch has already
brought in, or wait for them. With one file there is one sequential reader, whatever
the thread count. Measured here as that code runs, so the advice's vLLM line rests on
this trial and not on another strategy's number.
"""

from __future__ import annotations

from loadscope.base import fix_ids
from loadscope.loaders import stack_code as code
from loadscope.loaders import strategy
from loadscope.loaders.buffers import fill_ranges
from loadscope.loaders.pagefill import prefetch_files_sequentially
from loadscope.loaders.strategies.mmap_file import MmapLoadFile


class VllmPrefetch(strategy.Strategy):
    name = "vllm-prefetch"
    summary = "vLLM's prefetch: one reader per file (8 threads, 16 MiB reads) while mmap loads"
    requires = strategy.Requirements(ram_multiple=0.0)
    doctor_order = 60
    on_gpu_box = True
    reads = "buffered"
    fixes = frozenset({fix_ids.PARALLEL_READS, fix_ids.PREWARM})
    routes = (
        strategy.StackRoute(
            "vllm",
            "a flag",
            "--safetensors-load-strategy prefetch",
            code.VLLM + " --safetensors-load-strategy prefetch",
        ),
    )
    sample_shards = False  # one reader per file: a sample must touch every file
    knobs = (
        strategy.Knob("threads", 8, "--safetensors-prefetch-num-threads: files read at once"),
        strategy.Knob("block_bytes", 16 << 20, "--safetensors-prefetch-block-size: bytes per read"),
    )

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        threads, block = ctx.knob_values(self, "threads", "block_bytes")
        ordered = sorted(files, key=lambda f: _natural_key(f.path))
        prefetch_files_sequentially(fill_ranges(ordered), threads=threads, block_bytes=block)
        ctx.notes["prefetch"] = {"threads": threads, "block_bytes": block, "files": len(ordered)}
        yield from MmapLoadFile().load(ordered, ctx)


def _natural_key(path: str) -> list[object]:
    """vLLM sorts shard names naturally (shard 2 before shard 10)."""
    import re

    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]
