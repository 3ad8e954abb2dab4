"""The advice: every rule run over the facts, the fixes ranked, and the verdict.

Every recommendation rests on numbers measured here — the trial ids and times
it compares, the probe figures it reads — and never on folklore alone: where a
rule of thumb is contradicted by the trials (a full read slower than mmap on
this mount), the advice follows the measurement and says so. "Nothing to fix"
is a verdict of its own: when the default load already runs near the storage's
measured limit on local or memory storage, smaller gains are optional tips.

This module is the advice's entry point: :func:`advise` (reports in) and
:func:`advise_facts` (facts in) give the :class:`Advice`, :func:`advice_dict` its
JSON form. The rules themselves live by what they change: :mod:`storage_rules`
(the mount), :mod:`load_rules` (the loading code), :mod:`placement_rules` (prewarm,
copy), :mod:`memory_format_rules` (memory, pickles); the names callers use from
here (the result types, the facts, ``copy_destination``) are re-exported.
May import: the other modules of :mod:`loadscope.advice`, ``loadscope.engine`` and
``loadscope.actions`` (their report types), ``loadscope.loaders.strategies``,
``loadscope.probes.localdisk``, ``loadscope.base``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadscope.actions.convert import ConversionTrial
from loadscope.advice.facts import DISAGREEING_REPEATS, Facts, facts_from
from loadscope.advice.load_rules import (
    rank_comparison,
    rule_broadcast,
    rule_fullread,
    rule_gpu_staged,
    rule_parallel,
)
from loadscope.advice.memory_format_rules import rule_memory_fit, rule_pickle
from loadscope.advice.placement_rules import copy_destination, rule_copy_local, rule_prewarm
from loadscope.advice.results import (
    HEALTHY_FRACTION,
    WORTH_IT,
    Advice,
    Evidence,
    Recommendation,
    Rule,
    Verdict,
)
from loadscope.advice.storage_rules import rule_readahead, rule_stalled, rule_wsl
from loadscope.base import fix_ids
from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.bench import BenchReport
from loadscope.engine.broadcast import BroadcastReport
from loadscope.engine.probing import ProbeReport
from loadscope.loaders.strategies import (
    DEFAULT,
    DEFAULT_LOADS,
    GPU_DEFAULT,
    GPU_TORCH_DEFAULT,
    TORCH_DEFAULT,
    WHOLE_FILE_READ,
)
from loadscope.probes.localdisk import LocalDiskFacts

__all__ = [
    "BASELINES",
    "NETWORK_LIKE_LATENCY_US",
    "RULES",
    "WORTH_IT",
    "Advice",
    "Evidence",
    "Facts",
    "LocalDiskFacts",
    "Recommendation",
    "Verdict",
    "advice_dict",
    "advise",
    "advise_facts",
    "contradictions",
    "copy_destination",
    "facts_from",
    "network_like",
    "problem_headline",
    "problem_words",
    "rank_key",
    "rule_copy_local",
    "unmeasured_reason",
]

RULES: tuple[Rule, ...] = (
    rule_parallel,
    rule_readahead,
    rule_fullread,
    rule_prewarm,
    rule_copy_local,
    rule_broadcast,
    rule_gpu_staged,
    rule_wsl,
    rule_pickle,
    rule_memory_fit,
)


def contradictions(f: Facts) -> list[str]:
    """Where the measurements here contradict a rule of thumb."""
    notes = []
    gain = f.speedup(WHOLE_FILE_READ)
    if gain is not None and gain < 1:
        notes.append(
            f"the folklore fix (read whole files instead of mmap) measured {1 / gain:.1f}x"
            " slower than mmap here: not recommended on this storage"
        )
    elif (
        gain is not None
        and gain >= WORTH_IT
        and f.headroom_bytes is not None
        and 2 * f.model_bytes > f.headroom_bytes
    ):
        notes.append(
            f"reading whole files was {gain:.1f}x faster, but needs"
            f" ~{format_bytes(2 * f.model_bytes)}"
            f" of RAM and only {format_bytes(f.headroom_bytes)} is free: not recommended"
        )
    if f.ranks and f.rank_modes:
        cache, indep, others = rank_comparison(f)
        best = max(others, key=lambda s: s.speedup_vs_independent or 0, default=None)
        if indep and best and best.speedup_vs_independent and best.speedup_vs_independent < 1:
            notes.append(
                f"rank-0 read + broadcast ({best.mode}, the best of the broadcast modes) measured"
                f" {1 / best.speedup_vs_independent:.1f}x slower than {f.ranks} ranks reading"
                f" independently ({cache}): ranks on one node share its page cache, so"
                " independent reads hit storage once; broadcast pays where every rank"
                " would otherwise go to storage (across nodes, no shared cache)"
            )
    notes += disagreeing_repeats(f)
    for address, current, top in f.degraded_links:
        notes.append(
            f"GPU {address}: PCIe link at {current}, below its maximum {top}: host-to-device"
            " copies are capped by the slower link (reseat the card, check the slot and BIOS)"
        )
    return notes


def disagreeing_repeats(f: Facts) -> list[str]:
    """One note naming the figures whose repeats disagree beyond the usual scatter (another
    tenant on shared storage, another process, another loadscope), or none."""
    touched = [
        f"{s.strategy} {s.cache} ({s.min_seconds:.3g}-{s.max_seconds:.3g} s)"
        for table in (f.cold, f.warm)
        for s in table.values()
        if s.trials >= 2
        and s.min_seconds
        and s.max_seconds
        and s.max_seconds > DISAGREEING_REPEATS * s.min_seconds
    ]
    if not touched:
        return []
    return [
        f"repeats of the same trial disagreed by more than {DISAGREEING_REPEATS:g}x, beyond"
        " this machine's usual scatter (shared storage busy, another process or loadscope"
        f" run?): {', '.join(touched)}; those figures are medians of unsteady runs"
    ]


def advise(
    probe: ProbeReport,
    bench: BenchReport | None,
    ranks: BroadcastReport | None = None,
    failures: Sequence[str] = (),
    *,
    conversion: ConversionTrial | None = None,
) -> Advice:
    """The verdict and ranked fixes; ``failures`` (the doctor's failed steps) say why,
    when nothing could be measured; ``conversion`` measures "convert to safetensors"."""
    return advise_facts(facts_from(probe, bench, ranks, failures, conversion))


#: Fixes of the format loaded, not of the storage: healthy storage does not make them optional.
FORMAT_FIXES = (fix_ids.USE_SAFETENSORS_BESIDE, fix_ids.CONVERT_TO_SAFETENSORS)

#: The default load each kind of run is judged against: without its cold trial there is
#: no baseline, so neither "healthy" nor a speed-up can be said.
BASELINES: tuple[str, ...] = DEFAULT_LOADS


def unmeasured_reason(f: Facts) -> str | None:
    """Why there is no evidence for a verdict (no trial, no cold baseline), or None."""
    if f.device != "cpu" and GPU_DEFAULT not in f.cold and GPU_TORCH_DEFAULT not in f.cold:
        # A GPU run whose GPU half measured nothing: the CPU-side routes beside it do not
        # answer what was asked (loading to the GPU).
        why = next((x for x in f.failures if "cuda" in x.lower()), None) or (
            f.failures[0] if f.failures else "its GPU trials did not run"
        )
        return f"no GPU trial completed ({why})"
    if any(b in f.cold for b in BASELINES):
        return None
    if f.storage_class == "memory" and any(b in f.warm for b in BASELINES):
        return None  # files in RAM are never cold: the warm default load is the baseline
    if not f.cold and not f.warm:
        what, default_why = "no trial completed", "no trial ran"
    else:
        what = "no cold trial of the default load (mmap) completed"
        default_why = "its cold trials could not be verified cold"
    return f"{what} ({f.failures[0] if f.failures else default_why})"


def advise_facts(f: Facts) -> Advice:
    if f.stalled:
        return Advice(
            Verdict("problem", "the storage stopped answering: a read got no reply"),
            [rule_stalled(f)],
            [],
        )
    recs = [r for rule in RULES for r in rule(f)]
    recs.sort(key=rank_key)
    if recs and recs[0].id == fix_ids.MEMORY_LIMIT:
        headline = (
            f"memory: the {format_bytes(f.model_bytes)} model does not fit in the"
            f" {format_bytes(f.headroom_bytes or 0)} this process may use"
        )
        return Advice(Verdict("problem", headline), recs, contradictions(f))
    missing = unmeasured_reason(f)
    if missing is not None:
        return Advice(Verdict("unmeasured", f"could not measure: {missing}"), [], [])
    default = TORCH_DEFAULT if f.formats == {"torch"} else DEFAULT
    shaky = unreliable_reason(f, (default,))
    if shaky is not None:
        return Advice(Verdict("unmeasured", f"could not measure reliably: {shaky}"), [], [])
    if f.storage_class == "memory":
        for r in recs:
            r.optional = r.optional or r.id not in FORMAT_FIXES
        recs.sort(key=lambda r: r.optional)
    if f.storage_class == "memory" and all(r.optional for r in recs):
        headline = "healthy: the files live in RAM (tmpfs/ramfs); loading is a memory copy at most"
        return Advice(Verdict("healthy", headline), recs, contradictions(f))
    # The default load: load_file, or for a torch model torch.load (even where the
    # safetensors beside it were loaded too).
    default_bps = f.rate(default)
    limit = f.sequential_limit_bytes_per_s
    near_limit = bool(limit and default_bps and default_bps >= HEALTHY_FRACTION * limit)
    healthy = (
        f.storage_class in ("local-block", "memory", "overlay")
        and near_limit
        and not network_like(f)
    )
    if healthy:
        # Healthy storage makes its own fixes optional, not a measured fix of what is
        # loaded (torch pickles where the same model's safetensors are beside them).
        for r in recs:
            r.optional = r.optional or r.id not in FORMAT_FIXES
        recs.sort(key=lambda r: r.optional)  # stable: the ranking above holds within each
    if healthy and all(r.optional for r in recs):
        assert default_bps is not None and limit
        headline = (
            f"healthy: {f.storage_class} storage, the default load"
            f"{' (torch.load)' if default == TORCH_DEFAULT else ''} runs at"
            f" {format_rate(default_bps)},"
            f" {default_bps / limit:.0%}"
            " of the measured sequential limit; nothing to fix"
        )
        return Advice(Verdict("healthy", headline), recs, contradictions(f))
    once_per_answer(recs)
    if (problem := problem_headline(f, recs)) is not None:
        return Advice(Verdict("problem", problem, problem_words(f, recs)), recs, contradictions(f))
    # No fix fired: that says "healthy" only when the fixes' own figures could be trusted.
    shaky = unreliable_reason(f, tuple(f.cold))
    if shaky is not None:
        return Advice(Verdict("unmeasured", f"could not measure reliably: {shaky}"), [], [])
    headline = f"{_kind(f)}: no measured fix beats the default by {WORTH_IT:g}x"
    return Advice(Verdict("healthy", headline), recs, contradictions(f))


def rank_key(r: Recommendation) -> tuple[bool, bool, bool, bool, float, bool]:
    """The order fixes are listed in: the memory limit first (without the memory no other
    fix matters), problems before optional tips, a fix measured slower than the default
    last, measured fixes before estimated ones, then by gain and confidence."""
    return (
        r.id != fix_ids.MEMORY_LIMIT,
        r.optional,
        r.measured and r.expected_speedup is not None and r.expected_speedup < 1.0,
        not r.measured,
        -(r.expected_speedup or 0),
        r.confidence != "high",
    )


def problem_headline(f: Facts, recs: Sequence[Recommendation]) -> str | None:
    """The verdict's line for the first problem of ``recs`` (None: no problem among them)."""
    problems = [r for r in recs if not r.optional]
    if not problems:
        return None
    return f"{problem_words(f, recs)}{_gain_words(f, problems[0])}"


def problem_words(f: Facts, recs: Sequence[Recommendation]) -> str:
    """The verdict's problem without its number: the storage's kind and the top fix."""
    problems = [r for r in recs if not r.optional]
    return f"{_kind(f)}: {problems[0].title.lower()}" if problems else ""


def _gain_words(f: Facts, top: Recommendation) -> str:
    """ ", 12.4x faster with loadscope.load_file (safetensors) (measured)"."""
    if not top.expected_speedup:
        return ""
    # The fix's own word for how its gain was obtained (against its own baseline: the GPU
    # default for a GPU route), else how its strategy's trials were.
    how = (
        (top.how or (f.how_obtained(top.strategy) if top.strategy else "measured"))
        if top.measured
        else "estimated"
    )
    with_route = f" with {top.route}" if top.route else ""
    return f", {top.expected_speedup:.1f}x faster{with_route} ({how})"


def unreliable_reason(f: Facts, strategies: Sequence[str]) -> str | None:
    """The first of ``strategies`` whose cold figure cannot be trusted: which, why, and
    the budget a whole-model measure needs; None when every one holds."""
    for name in strategies:
        note = f.figure(name)
        if note is not None and note.unreliable:
            need = f.needs_budget_s(name)
            more = f"; about {need:.0f} s more --budget measures it whole"
            more = more if need else ""
            return f"{name}'s cold figure: {note.unreliable}{more}"
    return None


def once_per_answer(recs: list[Recommendation]) -> None:
    """Each stack's route appears once in an answer: under the highest-ranked fix that
    offers it, not again (word for word) under a later one."""
    seen: set[tuple[str, str]] = set()
    for r in recs:
        kept = []
        for s in r.snippets:
            key = (s.stack, s.code)
            if s.strategy is not None and key in seen:
                continue
            seen.add(key)
            kept.append(s)
        r.snippets = kept


#: A cold 4 KiB read this slow is not a local SSD's (NVMe answers in ~0.1 ms, SATA SSDs
#: in ~0.2 ms, a virtio disk served from its host's cache in ~0.5 ms here); network
#: volumes take 0.5-2 ms and more.
NETWORK_LIKE_LATENCY_US = 1000.0


def network_like(f: Facts) -> bool:
    """A disk named local whose measured latency is a network volume's."""
    return (
        f.storage_class == "local-block"
        and f.latency_p50_us is not None
        and f.latency_p50_us >= NETWORK_LIKE_LATENCY_US
    )


#: More requests in flight reading this much faster than one: the storage is latency-bound
#: (each request waits, many waiting together fill the link); at most this little faster,
#: throughput-bound (the link is full with one).
LATENCY_BOUND_SCALING = 2.0
THROUGHPUT_BOUND_SCALING = 1.3


def boundness(f: Facts) -> str:
    """What the probe measured of the storage, in words and numbers: latency-bound when
    more requests in flight raise the read rate, throughput-bound when they do not (then
    no reading strategy helps), "" when the probe did not scale its readers."""
    scaling, best = f.parallel_scaling, f.limit_bytes_per_s
    if scaling is None or not best:
        return ""
    one = best / scaling if scaling else best
    numbers = f"one reader {format_rate(one)}, many in flight {format_rate(best)}"
    if scaling >= LATENCY_BOUND_SCALING:
        return f"latency-bound ({numbers}: {scaling:.1f}x)"
    if scaling <= THROUGHPUT_BOUND_SCALING:
        return (
            f"throughput-bound ({numbers}: more requests in flight do not help, so no"
            " reading strategy does)"
        )
    return ""


def _kind(f: Facts) -> str:
    """The storage as the place (its class) and what was measured of it (:func:`boundness`)."""
    p50 = f"cold 4 KiB reads p50 {f.latency_p50_us / 1000:.2g} ms" if f.latency_p50_us else ""
    lat = f" ({p50})" if p50 else ""
    if network_like(f):
        return f"local disk behaving like a network volume ({p50}; a local disk answers in ~0.1 ms)"
    name = {
        "fuse": "FUSE storage",
        "network-fs": "network filesystem",
        "network-block": "network block volume",
        "wsl": "Windows drive under WSL",
        "local-block": "local disk",
        "memory": "memory-backed storage",
    }.get(f.storage_class, f"{f.storage_class} storage")
    name += lat if f.storage_class == "network-block" else ""
    bound = boundness(f) if f.storage_class not in ("local-block", "memory") else ""
    if f.fuse_store and f.storage_class == "fuse":
        return f"{f.fuse_store} behind FUSE{_store_bound(bound, f)}"
    return f"{name}, {bound}" if bound else name


def _store_bound(bound: str, f: Facts) -> str:
    """What :func:`boundness` means for a bucket behind FUSE: each read is a request to
    the store, so many in flight paying is its request latency; none paying, the
    bandwidth of the connection the daemon reads on (or the link); in between (a busy
    machine blurs the two), partly its request latency, with the probe's figures."""
    if bound.startswith("latency-bound"):
        return f", bound by the store's request latency ({bound.removeprefix('latency-bound (')}"
    if bound.startswith("throughput-bound"):
        figures = bound.removeprefix("throughput-bound (").split(":")[0]
        return (
            f", bound by the bandwidth of the daemon's connection to the store or the link"
            f" ({figures}: more requests in flight do not help)"
        )
    scaling, best = f.parallel_scaling, f.limit_bytes_per_s
    if not bound and scaling and best:
        return (
            f", bound partly by the store's request latency (one reader"
            f" {format_rate(best / scaling)}, many in flight {format_rate(best)}: {scaling:.1f}x)"
        )
    return f", {bound}" if bound else ""


def advice_dict(a: Advice) -> dict[str, Any]:
    from dataclasses import asdict

    return {
        "verdict": asdict(a.verdict),
        "recommendations": [asdict(r) for r in a.recommendations],
        "notes": a.notes,
    }
