"""The verdict on a model in another source than files (``probes/sources.py``): which of
the source's strategies loaded it fastest, by how much, from their cold trials.

The file rules (readahead, page cache, a local copy, the stacks' routes) read the file
probes, which do not run on another source; a source's own fixes come with its own
rules (an object store's, when it has them). Until then the verdict says what was
measured and that loadscope has no fix to print for this source.
May import: ``loadscope.advice.facts``, ``loadscope.advice.results``, ``loadscope.base``.
"""

from __future__ import annotations

from loadscope.advice.facts import Facts
from loadscope.advice.results import Advice, Verdict
from loadscope.base.units import format_bytes, format_rate, format_speedup


def cold_medians(f: Facts) -> list[tuple[float, str]]:
    """``(median seconds, strategy)`` of every cold trial that has a median, fastest first."""
    return sorted(
        ((s.median_seconds, name) for name, s in f.cold.items() if s.median_seconds),
        key=lambda pair: pair[0],
    )


def unmeasured(source_title: str) -> Advice:
    """The verdict where no trial of the source completed."""
    return Advice(
        Verdict("unmeasured", f"could not measure: no trial of {source_title} completed"), [], []
    )


def advise_source(f: Facts, source_title: str) -> Advice:
    """The verdict from the source's strategies' cold medians (unmeasured without one)."""
    timed = cold_medians(f)
    if not timed:
        return unmeasured(source_title)
    best_s, best = timed[0]
    headline = (
        f"{best} loads the {format_bytes(f.model_bytes)} from {source_title} fastest here:"
        f" {best_s:.3g} s, {format_rate(f.model_bytes / best_s)}"
    )
    if len(timed) > 1:
        slowest_s, slowest = timed[-1]
        headline += f", {format_speedup(slowest_s / best_s)} {slowest}'s time"
    note = f"loadscope prints no fix for {source_title}: its rules read files"
    return Advice(Verdict("healthy", headline, problem=""), [], [note])
