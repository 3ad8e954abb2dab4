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

#: How many times a warm trial's files are pre-read before a missing page fails it.
WARM_FILLS = 3


def _short(fraction: float | None, by_sampling: bool) -> bool:
    """A file not wholly resident: mincore's exact count short of every page (a sampled
    answer, where mincore is hidden, is judged by :data:`WARM_ENOUGH` alone)."""
    if fraction is None:
        return False
    return fraction < 1.0 if not by_sampling else fraction < WARM_ENOUGH


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
    short: set[str] = set()
    sampled = False
    if mode == "cold":
        ok = True
        for path, _size in files:
            ev = cold.evict(path)
            fractions.append(ev.after)
            sampled = sampled or "sampling" in ev.method
            if not ev.verified:
                ok = False
                # Memory-backed storage: one note for the model, not one per file.
                said = ev.note if ev.memory_backed else f"{Path(path).name}: {ev.note}"
                if said not in notes:
                    notes.append(said)
    elif mode == "warm":
        # As `loadscope warm` reads: many large requests in flight, so that on slow
        # storage the warm-up costs what the fix costs, not a single-stream read. A page
        # the kernel dropped meanwhile (this VM's DAMON pageout, memory pressure) is one
        # slow storage read inside a "warm" trial: 0.4% missing made a warm load 25x
        # slower on the emulated disk. Missing pages are read again, and a file mincore
        # sees short of every page makes the trial not warm.
        todo = list(files)
        checked: dict[str, tuple[float | None, bool]] = {}
        for _ in range(WARM_FILLS):
            PageFill(whole_files(todo), threads=WARM_THREADS, block_bytes=WARM_BLOCK_BYTES).run()
            checked.update({path: checked_fraction(path) for path, _size in todo})
            todo = [(p, n) for p, n in todo if _short(*checked[p])]
            if not todo:
                break
        short = {p for p, _n in todo}
        for path, _size in files:
            fraction, by_sampling = checked[path]
            fractions.append(fraction)
            sampled = sampled or by_sampling
    else:
        raise ValueError(f"unknown cache state {mode!r} (cold or warm)")
    known = [f for f in fractions if f is not None]
    mean = sum(known) / len(known) if known and len(known) == len(fractions) else None
    if mode == "warm":
        ok = mean is not None and mean >= WARM_ENOUGH and not short
        if not ok:
            notes.append(
                "residency unknown"
                if mean is None
                else f"only {mean:.1%} resident after pre-reading {WARM_FILLS} times"
                f" (not every page: {', '.join(sorted(Path(p).name for p in short))})"
                if short and mean >= WARM_ENOUGH
                else f"only {mean:.0%} resident after pre-reading"
            )
    if ok and sampled:
        notes.append(f"verified {mode} by sampling: {NOWAIT_NOTE}")
    return ok, mean, "; ".join(notes)
