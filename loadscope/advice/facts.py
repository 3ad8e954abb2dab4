"""What the rules read: the facts taken once from the probe, bench and rank reports.

:class:`Facts` holds the storage's class and measured limits, the memory headroom,
the bench's cold and warm timings with their trial ids, the multi-rank trials and
the fastest local disk; its methods give a strategy's speed-up and rate over the
whole model. :func:`facts_from` builds it from the reports; every rule reads only it.
May import: ``loadscope.engine`` and ``loadscope.actions`` (their report types),
``loadscope.base``, ``loadscope.loaders.mapped``, ``loadscope.loaders.strategies``,
``loadscope.probes.localdisk``, ``loadscope.probes.registry``, ``loadscope.probes.mounts``
(which FUSE daemons serve a bucket).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loadscope.actions.convert import ConversionTrial
from loadscope.base.hf_layout import folder_layout
from loadscope.engine.bench import BenchReport, Summary
from loadscope.engine.broadcast import BroadcastReport, BroadcastSummary
from loadscope.engine.probing import ProbeReport
from loadscope.engine.summaries import is_estimate, shaky, whole_seconds
from loadscope.loaders import mapped
from loadscope.loaders.strategies import DEFAULT
from loadscope.probes.localdisk import LocalDiskFacts
from loadscope.probes.mounts import object_store_behind
from loadscope.probes.registry import contributed_facts

#: Repeats of one trial this far apart (slowest over fastest) are more than this machine's
#: usual scatter (within ~1.3x over the runs in benchmarks/RESULTS.md): something else
#: used the storage or the CPUs meanwhile, or the loader itself is unsteady.
DISAGREEING_REPEATS = 1.5
#: An estimate may not beat the storage's best measured read by more than this (the
#: scatter of repeated probes and trials on one machine).
BOUND_SLACK = 1.15


#: A speed-up whose trials give a range wider than this (its highest over its lowest) is
#: "unsteady": printed with its range where its number is, never as one figure to act on.
UNSTEADY_SPREAD = 1.25
#: Trials a figure's spread is read from; with fewer the figure says how many it has.
MIN_TRIALS = 3


#: "a whole load (1 GiB) is 3x the 98 MiB sample the budget allows" (engine/sampled.py).
_SAMPLE_FACTOR = re.compile(r"is (\d+(?:\.\d+)?)x the [^,]* sample the budget allows")


def error_shown(error: float) -> str:
    """A relative error as the tables print it: "±12%", "±<1%"."""
    return f"±{error:.0%}" if error >= 0.005 else "±<1%"


@dataclass(frozen=True, slots=True)
class RatioTerms:
    """How far a speed-up can be trusted: the range its trials give, its error (the larger
    of that range's half-width and the fits' errors) and the words that say it."""

    #: "measured ±8%", "estimated ±15% over 2 trials", "measured from 1 trial, no spread",
    #: "unsteady: 3.0x to 6.8x over 3 trials".
    how: str
    low: float
    high: float
    error: float
    trials: int

    @property
    def unsteady(self) -> bool:
        return self.how.startswith("unsteady")


def _relative_range(s: Summary) -> tuple[float, float]:
    """A summary's fastest and slowest trial over its median (1, 1 with one trial)."""
    if s.trials >= 2 and s.median_seconds and s.min_seconds and s.max_seconds:
        return s.min_seconds / s.median_seconds, s.max_seconds / s.median_seconds
    return 1.0, 1.0


def _trial_count(route: int, default: int) -> str:
    """ "3 trials", "1 trial", or both sides' counts where they differ ("3 trials and its
    default's 2"): the ids a figure cites are its route's own."""
    said = f"{route} trial{'s' if route != 1 else ''}"
    return said if route == default else f"{said} and its default's {default}"


def ratio_terms(ratio: float, base: Summary, other: Summary) -> RatioTerms:
    """The terms of ``ratio`` = ``base``'s time over ``other``'s: its range pairs the
    base's slowest trial with the other's fastest and the other way round (an estimate's
    sample trials stand for its whole-model time, scaled alike), its error is the larger
    of that range and the fits' errors, and past :data:`UNSTEADY_SPREAD` it is unsteady."""
    b_lo, b_hi = _relative_range(base)
    o_lo, o_hi = _relative_range(other)
    low, high = ratio * b_lo / o_hi, ratio * b_hi / o_lo
    fits = [s.error_estimate for s in (base, other) if is_estimate(s) and s.error_estimate]
    error = max([high / ratio - 1.0, 1.0 - low / ratio, *fits])
    trials = min(base.trials, other.trials)
    kind = "estimated" if any(is_estimate(s) for s in (base, other)) else "measured"
    count = _trial_count(other.trials, base.trials)
    if max(base.trials, other.trials) >= 2 and high > UNSTEADY_SPREAD * low:
        how = f"unsteady: {low:.1f}x to {high:.1f}x over {count}"
    elif max(base.trials, other.trials) <= 1 and not fits:
        how = f"{kind} from {count}, no spread"
    elif trials >= MIN_TRIALS:
        how = f"{kind} {error_shown(error)}"
    else:
        how = f"{kind} {error_shown(error)} {'over' if other.trials >= 2 else 'from'} {count}"
    return RatioTerms(how, low, high, error, trials)


@dataclass(frozen=True, slots=True)
class Figure:
    """One strategy's whole-model time, and how far it can be trusted."""

    seconds: float
    #: "measured": whole loads timed; "estimated": fitted from samples (± ``error``).
    how: str
    #: The fit's relative standard error (estimated figures), None when not measurable.
    error: float | None = None
    #: Why it is no figure to act on (a bound it breaks, a fit too loose), else None.
    unreliable: str | None = None

    def label(self) -> str:
        """ "measured", "estimated ±12%", or "not measured reliably (why)"."""
        if self.unreliable:
            return f"not measured reliably ({self.unreliable})"
        if self.how == "estimated":
            return f"estimated {error_shown(self.error)}" if self.error is not None else "estimated"
        return "measured"


@dataclass(slots=True)
class Facts:
    """What the rules read, extracted once from the reports."""

    storage_class: str
    model_bytes: int
    headroom_bytes: int | None
    cgroup_limit_bytes: int | None
    limit_bytes_per_s: float | None  # best measured probe throughput (sequential or parallel)
    sequential_limit_bytes_per_s: float | None  # best single-reader probe throughput
    parallel_scaling: float | None  # best parallel rate / one reader
    read_ahead_kb: int | None
    bdi_path: str | None
    fuse: bool
    formats: set[str]
    cold: dict[str, Summary]
    warm: dict[str, Summary]
    trial_ids: dict[tuple[str, str], list[int]]
    #: Where the model is (for the snippets) and the fastest local disk with room for a copy.
    model_root: str = "MODEL_DIR"
    #: What the user would name the model in their stack: the folder, the file, org/name.
    model_path: str = "MODEL_DIR"
    #: Strategies the bench skipped or whose every trial failed, with the reason.
    not_run: dict[str, str] = field(default_factory=dict)
    local_disk: LocalDiskFacts | None = None
    #: Multi-rank trials (``--ranks``): per (mode, cache), and the rank count.
    ranks: int | None = None
    rank_modes: dict[tuple[str, str], BroadcastSummary] = field(default_factory=dict)
    rank_backend: str | None = None
    #: GPUs whose PCIe link trained below its maximum (address, current, max).
    degraded_links: list[tuple[str, str, str]] = field(default_factory=list)
    #: What each registered probe adds, by fact name (``probes/spec.py``: the GPU probe's
    #: ``degraded_links``, a plugin probe's own).
    probed: dict[str, Any] = field(default_factory=dict)
    #: A read of the model that got no answer during the probes (what, and for how long).
    stalled: str | None = None
    #: The run's failed and skipped steps, in order (why nothing was measured, if so).
    failures: list[str] = field(default_factory=list)
    #: Median cold 4 KiB read latency the probe measured (None: not measured).
    latency_p50_us: float | None = None
    #: A pickle-only model: a sample converted to safetensors and both formats timed.
    conversion: ConversionTrial | None = None
    #: A torch model with the same model as safetensors beside it: those files (relative
    #: to the folder), loaded among the trials; empty otherwise.
    safetensors_beside: list[str] = field(default_factory=list)
    #: Their index (``model.safetensors.index.json``) when one names them, else None.
    safetensors_index: str | None = None
    #: Why the other format's files in the model's folder cannot be used, if so.
    alternates_problem: str | None = None
    #: ... because their trials found other tensors: another model, not a broken download.
    alternates_differ: bool = False
    #: A torch model's files and index (relative to ``model_root``), for the conversion.
    torch_files: list[str] = field(default_factory=list)
    torch_index: str | None = None
    #: The FUSE mount's fusectl folder (/sys/fs/fuse/connections/N), when the probe found it.
    fuse_connection_path: str | None = None
    #: The object store behind a FUSE mount, in its daemon's words ("an S3 bucket
    #: (Mountpoint for Amazon S3)"); None where the mount is not a bucket's.
    fuse_store: str | None = None
    #: Whether the mount keeps read pages cached to the next open (False: FUSE direct_io
    #: or a daemon that drops them at each open; warming first cannot help). None: not
    #: asked (local disks keep them) or unknown.
    keeps_pages: bool | None = None
    #: Which library ``model_root`` is saved for (``base/hf_layout.py``), "" when unknown:
    #: the snippets show a library's code only for its own folders.
    layout: str = ""

    #: The bench's time budget (seconds), when it had one: what "needs ~N s" is said against.
    budget_s: float | None = None
    #: Where the GPU trials loaded to ("cpu": a CPU run; "cuda:N": GPU and CPU-side routes).
    device: str = "cpu"

    def speedup(self, strategy: str, cache: str = "cold", base_name: str = DEFAULT) -> float | None:
        """Whole-model time of ``base_name`` over ``strategy``'s (measured, or extrapolated
        from a sample: sampled strategies read samples of their own sizes, so their sample
        times cannot be compared); None when either figure is missing or breaks a bound
        (:meth:`figure`): a speed-up is never made of a figure that cannot be trusted."""
        base, other = self.figure(base_name, cache), self.figure(strategy, cache)
        if base is None or other is None or base.unreliable or other.unreliable:
            return None
        return base.seconds / other.seconds

    def figure(self, strategy: str, cache: str = "cold") -> Figure | None:
        """``strategy``'s whole-model time with how it was obtained and whether it holds.

        A figure is unreliable when :func:`~loadscope.engine.summaries.shaky` says so (an
        extrapolation's fit error too large, a cold load faster than a warm one), or when
        an estimate beats the storage's best measured read by more than
        :data:`BOUND_SLACK`: all are physically impossible, so the figure is wrong, not
        the storage fast."""
        table = self.cold if cache == "cold" else self.warm
        s = table.get(strategy)
        seconds = whole_seconds(s) if s else None
        if s is None or not seconds:
            return None
        estimated = is_estimate(s)
        # Files in RAM have no cold state: a "cold" load there is a warm one.
        memory = self.storage_class == "memory"
        why = shaky(s, {} if memory else self.warm, self.model_bytes)
        limit = self.limit_bytes_per_s
        above = bool(limit) and self.model_bytes / seconds > BOUND_SLACK * (limit or 0.0)
        if why is None and cache == "cold" and estimated and not memory and above:
            assert limit
            why = (
                f"estimated {self.model_bytes / seconds / 1e9:.3g} GB/s, above the"
                f" storage's best measured read ({limit / 1e9:.3g} GB/s)"
            )
        return Figure(seconds, "estimated" if estimated else "measured", s.error_estimate, why)

    def how_obtained(self, strategy: str, base_name: str = DEFAULT) -> str:
        """How ``strategy``'s speed-up over ``base_name`` was obtained and how far it holds
        (:func:`ratio_terms`): "measured ±8%", "estimated ±15% over 2 trials",
        "unsteady: 3.0x to 6.8x over 3 trials"."""
        terms = self.ratio_terms(strategy, base_name)
        if terms is not None:
            return terms.how
        figs = [f for f in (self.figure(base_name), self.figure(strategy)) if f is not None]
        return "measured" if all(f.how == "measured" for f in figs) else "estimated"

    def ratio_terms(self, strategy: str, base_name: str = DEFAULT) -> RatioTerms | None:
        """The cold speed-up's :class:`RatioTerms`; None when it has no figure."""
        ratio = self.speedup(strategy, base_name=base_name)
        base, other = self.cold.get(base_name), self.cold.get(strategy)
        if ratio is None or base is None or other is None:
            return None
        return ratio_terms(ratio, base, other)

    def speedup_range(self, strategy: str, base_name: str = DEFAULT) -> tuple[float, float] | None:
        """The cold speed-up's range over its trials (None: no figure)."""
        terms = self.ratio_terms(strategy, base_name)
        return (terms.low, terms.high) if terms is not None else None

    def needs_budget_s(self, strategy: str) -> float | None:
        """About how much more ``--budget`` would measure ``strategy`` whole: three whole
        loads of it (by its figure) and their trials' start-up."""
        fig = self.figure(strategy)
        if fig is None:
            return None
        return 3 * (fig.seconds + 0.5)

    def unreliable_note(self, strategy: str) -> str | None:
        """ "not measured reliably here (why; ~N s more budget measures it whole)", or None."""
        fig = self.figure(strategy)
        if fig is None or not fig.unreliable:
            return None
        need = self.needs_budget_s(strategy)
        more = f"; ~{need:.0f} s more --budget measures it whole" if need else ""
        return f"not measured reliably here ({fig.unreliable}{more})"

    def ranks_note(self, mode: str | None) -> str:
        """With the rank round's ``mode`` (cold, else warm): how many times the node read
        the model from storage, and its slowest rank against every rank mapping every file
        (the stacks' default with N ranks), when both ran."""
        if not mode or not self.ranks:
            return ""
        cache = "cold" if (mode, "cold") in self.rank_modes else "warm"
        this, default = (
            self.rank_modes.get((mode, cache)),
            self.rank_modes.get((mapped.NAME, cache)),
        )
        if this is None or not this.median_seconds:
            return ""
        stor = this.storage_amplification
        served = f"storage serves {stor:.1f}x the model" if stor is not None else ""
        against = ""
        if default is not None and default.median_seconds:
            ratio = default.median_seconds / this.median_seconds
            shown = f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.1f}x slower"
            against = f"slowest rank {shown} than the default's"
        said = ", ".join(x for x in (served, against) if x)
        if not said:
            return ""
        return f"with {self.ranks} ranks{' (warm)' if cache == 'warm' else ''}: {said}"

    def rate(self, strategy: str, cache: str = "cold") -> float | None:
        """The whole model's bytes per second of ``strategy`` (measured or extrapolated)."""
        secs = self.seconds(strategy, cache)
        return self.model_bytes / secs if secs else None

    def cold_trial_ids(self, strategy: str) -> list[int]:
        return list(self.trial_ids.get((strategy, "cold"), []))

    def why_not_measured(self, strategy: str) -> str | None:
        why = self.not_run.get(strategy)
        if why and self.budget_s and (m := _SAMPLE_FACTOR.search(why)):
            # The budget's sample grows with it: this factor more runs the load whole.
            why += f" (about --budget {math.ceil(self.budget_s * float(m[1]) / 10) * 10:.0f}"
            why += " measures it)"
        return why or self.unreliable_note(strategy)

    def seconds(self, strategy: str, cache: str = "cold") -> float | None:
        table = self.cold if cache == "cold" else self.warm
        s = table.get(strategy)
        return (s.extrapolated_median_seconds or s.median_seconds) if s else None


def _model_path(probe: ProbeReport) -> str:
    """How the user names the model: ``org/name`` from the HF cache, the file, the folder."""
    target = probe.target
    if target.get("kind") == "hf-cache":
        return str(target["spec"])
    # Served by the emulator: the model's own folder (the mount is gone after the run).
    root = str(target.get("source") or target["root"])
    if target.get("kind") == "file" and probe.files:
        return os.path.join(root, os.path.basename(probe.files[0].path))
    spec = str(target.get("spec") or "")
    if spec.lower().endswith(".index.json"):
        # The index the user named: its folder may hold another format's weights, or
        # files the index does not list, which the folder alone would also load.
        return os.path.join(root, os.path.basename(spec))
    return root


def _beside_path(root: str, beside: list[str], index: object) -> str:
    """What the fixes name when the safetensors beside a torch model are loaded instead:
    their index, or their one file; the folder only for several loose files (a folder
    with a torch index resolves to the pickles: it is named only without a better name)."""
    if index:
        return os.path.join(root, str(index))
    return os.path.join(root, beside[0]) if len(beside) == 1 else root


def _not_run(bench: BenchReport | None) -> dict[str, str]:
    """Why a strategy has no cold trial: skipped (not installed, would not fit), or failed."""
    if bench is None:
        return {}
    out = {name: f"skipped: {why}" for name, why in bench.skipped.items()}
    for t in bench.trials:
        if t.status == "failed" and t.cache == "cold" and t.strategy not in out:
            out[t.strategy] = f"its trial failed: {t.reason}"
    return out


def facts_from(
    probe: ProbeReport,
    bench: BenchReport | None,
    ranks: BroadcastReport | None = None,
    failures: Sequence[str] = (),
    conversion: ConversionTrial | None = None,
) -> Facts:
    # (A model in another source than files has no file probes: no mount, no readahead.)
    primary = probe.primary if probe.files else None
    storage = primary.storage if primary is not None else None
    mount = storage.mount.data if storage else None
    system = probe.system.data
    thr = probe.throughput.data
    rates = [p.bytes_per_s for p in (list(thr.sequential) + list(thr.parallel))] if thr else []
    scaling = None
    if thr and thr.parallel and thr.parallel[0].bytes_per_s > 0:
        scaling = max(p.bytes_per_s for p in thr.parallel) / thr.parallel[0].bytes_per_s
    bdi = storage.bdi.data if storage else None
    cold, warm, ids = _timed(bench)
    # Safetensors beside a torch model whose trials found other tensors: not the model.
    differ = bench.other_format_differs() if bench else None
    beside = (
        [str(n) for n in (bench.target.get("safetensors_beside") or [])]
        if bench and not differ
        else []
    )
    st_index = bench.target.get("safetensors_index") if bench and beside else None
    model_root = str(probe.target.get("source") or probe.target["root"])
    probed = contributed_facts({key: r.to_dict() for key, r in probe.registered.items()})
    return Facts(
        model_path=_beside_path(model_root, beside, st_index) if beside else _model_path(probe),
        failures=list(failures),
        not_run=_not_run(bench),
        storage_class=mount.storage_class if mount else "unknown",
        latency_p50_us=probe.latency.data.p50_us if probe.latency.data else None,
        stalled=probe.stalled,
        model_bytes=probe.target["total_bytes"],
        headroom_bytes=system.memory_headroom_bytes if system else None,
        cgroup_limit_bytes=system.cgroup.limit_bytes if system and system.cgroup else None,
        limit_bytes_per_s=max(rates) if rates else None,
        sequential_limit_bytes_per_s=max((p.bytes_per_s for p in thr.sequential), default=None)
        if thr
        else None,
        parallel_scaling=scaling,
        read_ahead_kb=bdi.read_ahead_kb if bdi else None,
        bdi_path=bdi.path if bdi else None,
        fuse=mount is not None and mount.fstype.startswith("fuse"),
        fuse_connection_path=storage.fuse.data.path if storage and storage.fuse.data else None,
        fuse_store=object_store_behind(mount.subtype) if mount else None,
        keeps_pages=storage.keeps_pages if storage else None,
        formats=set(bench.target["formats"]) if bench else {"safetensors"},
        cold=cold,
        warm=warm,
        trial_ids=ids,
        model_root=model_root,
        local_disk=probed.get("local_disk"),
        ranks=len(ranks.ranks) or int(ranks.options.get("ranks") or 0) if ranks else None,
        rank_modes={(m.mode, m.cache): m for m in ranks.summary} if ranks else {},
        rank_backend=str(ranks.options.get("backend")) if ranks else None,
        degraded_links=probed.get("degraded_links", []),
        probed=probed,
        conversion=conversion,
        safetensors_beside=beside,
        safetensors_index=str(st_index) if st_index else None,
        alternates_problem=differ
        or (str(bench.target.get("alternates_problem") or "") or None if bench else None),
        alternates_differ=differ is not None,
        torch_files=[str(n) for n in probe.target.get("torch_files") or []],
        torch_index=str(probe.target["torch_index"]) if probe.target.get("torch_index") else None,
        budget_s=_budget_of(bench),
        # Nothing more is read from storage that stopped answering during the probes.
        layout="" if probe.stalled else folder_layout(model_root),
        device=str((bench.options.get("device") if bench else None) or "cpu"),
    )


def _budget_of(bench: BenchReport | None) -> float | None:
    budget = bench.options.get("budget_s") if bench else None
    return float(budget) if isinstance(budget, int | float) else None


def _timed(
    bench: BenchReport | None,
) -> tuple[dict[str, Summary], dict[str, Summary], dict[tuple[str, str], list[int]]]:
    """The bench's timed summaries per strategy, cold and warm, and the ids of the trials
    their medians are of."""
    cold: dict[str, Summary] = {}
    warm: dict[str, Summary] = {}
    ids: dict[tuple[str, str], list[int]] = {}
    if bench is not None:
        for s in bench.summary:
            if s.median_seconds is not None:
                (cold if s.cache == "cold" else warm)[s.strategy] = s
        for t in bench.trials:
            # The trials a summary's median is of (its "trials" count): not the fit's
            # smaller samples, not a run whose cache state was not verified.
            if t.status == "ok" and not t.warmup and not t.fit and t.cache_verified:
                ids.setdefault((t.strategy, t.cache), []).append(t.id)
    return cold, warm, ids
