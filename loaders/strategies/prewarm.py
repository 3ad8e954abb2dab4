"""``prewarm``: ``loadscope warm`` (or ``loadscope.prewarm``), then the stack's own ``load_file``.

The fix that needs no code change in the user's stack: before the stack starts,
read every weight file into the page cache with a pool of threads taking the next
16 MiB block of any file (many requests in flight even for a one-file model), then
let the stack load as it always does — ``safetensors.torch.load_file``, memory-mapped,
now from RAM. The trial times both steps together: that is the cold-start cost a
user who adds ``loadscope warm MODEL`` before their command pays.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys

from loadscope.base import fix_ids
from loadscope.base.units import format_bytes
from loadscope.loaders import stack_code as code
from loadscope.loaders import strategy
from loadscope.loaders.buffers import fill_ranges
from loadscope.loaders.pagefill import WARM_BLOCK_BYTES, WARM_THREADS, PageFill
from loadscope.loaders.preload import WARM_COMMAND, warm_command_start_s
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
    :data:`WARM_KNOBS`.

    A whole load runs the command itself, as the snippet prints it (``loadscope warm
    TARGET``, its interpreter's start-up included: the user pays it too, ~0.6 s here).
    A sample, which the command cannot read, is filled in this process the way the
    command fills the whole files (:func:`sample_fill`), and the command's start-up,
    timed once, is added to the trial's time (``setup_s``)."""
    threads, block = ctx.knob_values(owner, "threads", "block_bytes")
    target = command_target(files)
    if target is None:
        fill = sample_fill(files, threads, block)
        fill.run()
        start = warm_command_start_s()
        ctx.notes["setup_s"] = float(ctx.notes.get("setup_s") or 0.0) + start
        ctx.notes["warm"] = (
            f"the sample filled in-process in {_blocks(len(fill.jobs))} of"
            f" {format_bytes(fill.block_bytes)} on {threads} threads (the whole files':"
            f" {_blocks(whole_blocks(files, block))}), plus the command's start-up {start:.2f} s"
        )
        return
    argv = [sys.executable, "-m", "loadscope", "warm", target, "--quiet"]
    argv += ["--threads", str(threads), "--block", str(block)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise OSError(f"loadscope warm {target}: {last}")
    ctx.notes["warm"] = f"loadscope warm {target} --threads {threads} --block {block}"


def _blocks(n: int) -> str:
    return f"{n} block" if n == 1 else f"{n} blocks"


#: The smallest block a sample's fill reads (a buffered read well above the readahead).
MIN_SAMPLE_BLOCK = 1 << 20


def whole_blocks(files: list[strategy.FileRequest], block: int) -> int:
    """How many ``block``-sized reads the command makes of these files whole."""
    return sum(-(-f.size_bytes // block) for f in files)


def sample_fill(files: list[strategy.FileRequest], threads: int, block: int) -> PageFill:
    """The fill of a sample, shaped like the command's fill of the whole files: the same
    threads, over as many blocks as the whole files have (each block smaller in
    proportion, at least :data:`MIN_SAMPLE_BLOCK`), so every thread stays busy as it
    does on the whole (with the command's 16 MiB blocks, 2 of 8 threads would read a
    24 MiB sample). On the emulated disk a quarter or a tenth of a 256 MiB file fills at
    1.16-1.18x the whole file's time per byte (``benchmarks/bench_prewarm_sample.py``);
    the sampled trials' two-size fit takes part of that as fixed cost, and the figures
    land within 10% of the command run whole (``benchmarks/RESULTS.md``)."""
    ranges = fill_ranges(files)
    sample = sum(r.end - r.start for r in ranges)
    page = 4096
    per_block = -(-sample // max(1, whole_blocks(files, block)))
    scaled = -(-per_block // page) * page
    return PageFill(ranges, threads=threads, block_bytes=min(block, max(MIN_SAMPLE_BLOCK, scaled)))


def command_target(files: list[strategy.FileRequest]) -> str | None:
    """What ``loadscope warm`` is given to read exactly ``files``: the one file, or their
    folder when its safetensors are those files; None for a sample or any other set."""
    if any(f.tensors is not None for f in files) or not files:
        return None
    if len(files) == 1:
        return files[0].path
    folders = {os.path.dirname(f.path) for f in files}
    if len(folders) != 1:
        return None
    folder = folders.pop()
    present = sorted(glob.glob(os.path.join(glob.escape(folder), "*.safetensors")))
    return folder if present == sorted(f.path for f in files) else None


class Prewarm(strategy.Strategy):
    name = "prewarm"
    rank_mode = "warm-node"
    summary = "loadscope warm (8 threads of 16 MiB blocks), then load_file from the page cache"
    requires = strategy.Requirements(ram_multiple=0.0)
    doctor_order = 50
    on_gpu_box = True
    fixes = frozenset({fix_ids.PARALLEL_READS, fix_ids.PREWARM})
    routes = (
        code.warm_first_transformers(
            unless="hf-pretrained", proxy=code.TIMED_AS_LOAD_FILE, proxy_number=False
        ),
        *code.diffusers(
            "no code change", "loadscope warm first", code.WARM_FIRST, "", code.TIMED_AS_LOAD_FILE
        ),
        strategy.StackRoute(
            "vllm", "no code change", "loadscope warm first", "loadscope warm {sh} && " + code.VLLM
        ),
        strategy.StackRoute(
            "sglang",
            "no code change",
            "loadscope warm first",
            "loadscope warm {sh} && " + code.SGLANG,
        ),
        strategy.StackRoute(
            "shell",
            "no code change",
            "loadscope warm",
            "loadscope warm {sh}   # before the stack starts",
        ),
    )
    knobs = WARM_KNOBS
    # A sample's fill is shaped like the whole one's, the command's start-up timed once
    # in the fork server and added (see warm).
    preload = (WARM_COMMAND,)

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        warm(self, files, ctx)
        yield from MmapLoadFile().load(files, ctx)
