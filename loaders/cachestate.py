"""A trial's page-cache state, set up and verified: what ``bench`` and ``bench --ranks`` do
before each trial (the parent before a worker starts, rank 0 while the others wait).

Owns :func:`prepare_cache`: cold is every file evicted (``ColdCache.evict``, which says
how and whether it worked); warm is every file pre-read as ``loadscope warm`` reads
(:class:`~loadscope.loaders.pagefill.PageFill`: many large requests in flight) and then
checked resident. Residency is mincore's, or sampled with RWF_NOWAIT reads where mincore
is hidden from this user (``checked_fraction``); either way the note says how.

May import: ``loadscope.loaders.pagefill``, ``loadscope.probes``, ``loadscope.base``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from loadscope.loaders.pagefill import WARM_BLOCK_BYTES, WARM_THREADS, PageFill, whole_files
from loadscope.probes.pagecache import NOWAIT_SAMPLES, ColdCache, checked_fraction

#: A warm trial counts as warm when at least this fraction of the model is resident.
WARM_ENOUGH = 0.95

NOWAIT_NOTE = (
    f"mincore is hidden from this user, so {NOWAIT_SAMPLES} pages per file were asked"
    " with RWF_NOWAIT reads"
)


def prepare_cache(
    files: Sequence[tuple[str, int]], mode: str, cold: ColdCache
) -> tuple[bool, float | None, str]:
    """Put every (path, size) in ``mode`` (cold or warm) and verify it: (verified, mean
    residency, note). A file that changes while it is pre-read fails the fill, the
    error naming the file (``ReadFailed``)."""
    notes: list[str] = []
    fractions: list[float | None] = []
    sampled = False
    if mode == "cold":
        ok = True
        for path, _size in files:
            ev = cold.evict(path)
            fractions.append(ev.after)
            sampled = sampled or "sampling" in ev.method
            if not ev.verified:
                ok = False
                notes.append(f"{Path(path).name}: {ev.note}")
    elif mode == "warm":
        # As `loadscope warm` reads: many large requests in flight, so that on slow
        # storage the warm-up costs what the fix costs, not a single-stream read.
        PageFill(whole_files(files), threads=WARM_THREADS, block_bytes=WARM_BLOCK_BYTES).run()
        for path, _size in files:
            fraction, by_sampling = checked_fraction(path)
            fractions.append(fraction)
            sampled = sampled or by_sampling
    else:
        raise ValueError(f"unknown cache state {mode!r} (cold or warm)")
    known = [f for f in fractions if f is not None]
    mean = sum(known) / len(known) if known and len(known) == len(fractions) else None
    if mode == "warm":
        ok = mean is not None and mean >= WARM_ENOUGH
        if not ok:
            notes.append(
                "residency unknown"
                if mean is None
                else f"only {mean:.0%} resident after pre-reading"
            )
    if ok and sampled:
        notes.append(f"verified {mode} by sampling: {NOWAIT_NOTE}")
    return ok, mean, "; ".join(notes)
