"""``auto``: loadscope's fast path — map what is resident, read the rest deep and large.

Per file: when the page cache already holds the file, map it (``load_file``:
zero-copy beats every copy warm); when it is cold, issue deep-parallel large
requests — O_DIRECT where the filesystem allows it, buffered ``pread`` threads
otherwise — with the thread count and block size the parallel-scaling probe
found best (passed in as hints) unless knobs override them. A cold file that
would not fit in the memory this process may use (RAM, or the cgroup limit) is
mapped instead. Every choice and its reason are recorded in the trial.
"""

from __future__ import annotations

from loadscope.loaders import strategy
from loadscope.loaders.buffers import byte_ranges, o_direct_ok
from loadscope.loaders.strategies.mmap_file import MmapLoadFile
from loadscope.loaders.strategies.parallel import read_file_parallel
from loadscope.probes.pagecache import sampled_residency
from loadscope.probes.system import memory_headroom

#: A file at least this resident is mapped rather than read.
RESIDENT_ENOUGH = 0.9
#: Kept free beyond a cold file's buffer; a file that does not fit is mapped instead.
MEMORY_MARGIN = 256 << 20


class Auto(strategy.Strategy):
    name = "auto"
    summary = "map resident files; deep-parallel large reads (O_DIRECT when possible) when cold"
    requires = strategy.Requirements(ram_multiple=1.0)
    tuned = True  # the probe's best readers where no knob is given
    doctor_order = 20
    warm_trial = True
    reads = "deep"
    knobs = (
        strategy.Knob("threads", 12, "requests in flight per cold file (default: from the probes)"),
        # A multiple of 4096, as O_DIRECT reads need (as ``direct``'s): any other size would
        # be split into aligned and unaligned reads behind the caller's back.
        strategy.Knob(
            "block_bytes",
            1 << 20,
            "bytes per request for cold files (default: from the probes)",
            multiple=4096,
        ),
        strategy.Knob("direct", "auto", "O_DIRECT for cold files", choices=("auto", "yes", "no")),
        strategy.Knob(
            "huge_pages",
            "no",
            "MADV_HUGEPAGE on the read buffers; off by default: 2 MiB pages can wait on compaction",
            choices=("yes", "no"),
        ),
    )

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        threads, block = ctx.knob_values(self, "threads", "block_bytes")
        want_direct = str(ctx.knob(self, "direct"))
        choices = ctx.notes.setdefault("choices", [])
        for f in files:
            fraction = sampled_residency(f.path, windows=16)
            known = "unknown" if fraction is None else f"{fraction:.0%}"
            mapped_why = None
            if fraction is not None and fraction >= RESIDENT_ENOUGH:
                mapped_why = f"~{fraction:.0%} resident (16 sampled windows): map it"
            else:
                room = memory_headroom()
                need = f.size_bytes
                if f.tensors is not None and need + MEMORY_MARGIN > room:
                    need = sum(b - a for a, b in byte_ranges(f))  # only the sample is held
                if need + MEMORY_MARGIN > room:
                    mapped_why = (
                        f"{known} resident, but {need >> 20} MiB does not fit in the"
                        f" {room >> 20} MiB this process may use: map it (pages can be dropped)"
                    )
            if mapped_why is not None:
                choices.append(
                    {"file": f.path, "choice": "mmap", "reason": mapped_why, "residency": fraction}
                )
                yield from MmapLoadFile().load_one(f, ctx)
                continue
            direct = want_direct == "yes" or (want_direct == "auto" and o_direct_ok(f.path))
            how = "O_DIRECT" if direct else "buffered pread"
            choices.append(
                {
                    "file": f.path,
                    "choice": "direct" if direct else "parallel",
                    "reason": f"{known} resident: {threads} x {block >> 10} KiB {how} reads",
                    "residency": fraction,
                    "threads": threads,
                    "block_bytes": block,
                }
            )
            huge = str(ctx.knob(self, "huge_pages")) == "yes"
            yield from read_file_parallel(
                f, threads=threads, block_bytes=block, direct=direct, huge_pages=huge
            )
