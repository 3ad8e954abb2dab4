"""The doctor's plan within its budget: which trials to run, how often, on how much.

Before any trial has run, the probe's rates price each ``(strategy, cache)`` trial
(:func:`cost_model`) and the planner (:func:`~loadscope.engine.planning.plan_budget`)
fits repeats and, when whole loads cannot fit, a sample size into the budget;
:func:`plan_doctor` draws the whole plan for one run (device, strategies, the time for
trials, the multi-rank trials), noting what it leaves out.

What each strategy is (its device, how it reads, its place in the order, whether its
warm trial matters) is read from its declaration in ``loaders/strategies``.

May import: ``loadscope.engine``, ``loadscope.model``, ``loadscope.loaders`` (the
strategies' declarations), ``loadscope.advice`` (where a fix applies),
``loadscope.probes.sources`` (which strategies read a source), ``loadscope.base``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from loadscope.diagnosis.device_plan import (
    gpu_count,
    rank_round_s,
    rank_target,
    resolve_device,
)
from loadscope.diagnosis.stack_scope import NO_PAGE_CACHE, scoped, without_warm_first
from loadscope.diagnosis.trial_costs import (
    TRIAL_OVERHEAD_S,
    builds_with_transformers,
    cost_model,
)
from loadscope.engine.bench import GPU_STRATEGIES
from loadscope.engine.planning import plan_budget, runs_once
from loadscope.engine.probing import ProbeReport
from loadscope.loaders.strategies import (
    DEFAULT,
    DEFAULT_LOADS,
    GPU_DEFAULT,
    GPU_TORCH_DEFAULT,
    HF_DEFAULT,
    INTERNAL_READERS,
    STRATEGIES,
    TORCH_DEFAULT,
)
from loadscope.model.targets import Target
from loadscope.probes.sources import supports

#: The user's own load end to end (with transformers installed and a config.json beside
#: the weights): from_pretrained as is, after loadscope warm (the no-code-change fix), and
#: ``loadscope.from_pretrained`` (the code route), read from the strategies' declarations.
TRANSFORMERS_STRATEGIES = tuple(n for n, s in STRATEGIES.items() if s.builds_model)
#: The baselines of the routes (from_pretrained as the user runs it): in a tight plan
#: they get their whole load before the routes measured against them.
BASELINES = frozenset(r.baseline for s in STRATEGIES.values() for r in s.routes if r.baseline)


def _in_doctor_order(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(names, key=lambda n: STRATEGIES[n].doctor_order or 0))


#: The CPU trials of a safetensors model in the order they run (each strategy's declared
#: ``doctor_order``): the default, the parallel family, then the fix in each stack's own
#: terms (the snippets' numbers: the public API, the no-code-change prewarm, vLLM's
#: prefetch flag, the peers where installed), then the folklore fix and prefetch. When
#: the budget runs out, what is cut is the buffered strategies, which cost the most on
#: slow storage and rarely win there. ``direct`` (where the filesystem takes O_DIRECT)
#: and the transformers trials (where the model builds) join in their places.
_CPU_PLANNED = tuple(
    n
    for n, s in STRATEGIES.items()
    if s.doctor_order is not None and not s.requires.gpu and "safetensors" in s.requires.formats
)
CPU_ORDER = _in_doctor_order(
    n
    for n in _CPU_PLANNED
    if not STRATEGIES[n].requires.o_direct and n not in TRANSFORMERS_STRATEGIES
)


#: On a GPU machine, the routes users apply on the CPU side (the default load, the public
#: API, ``loadscope warm`` first, vLLM's prefetch, the peers, the full read) run beside
#: the GPU strategies: a GPU box's advice must still time what its users paste.
CPU_ROUTES_ON_GPU = _in_doctor_order(
    n for n in _CPU_PLANNED if STRATEGIES[n].on_gpu_box and n not in TRANSFORMERS_STRATEGIES
)


def gpu_plan(probe: ProbeReport) -> tuple[str, ...]:
    """The trials of a GPU run: the GPU default and routes first, then the CPU-side routes
    (and the transformers ones where the model builds), then the folklore fix."""
    builds = builds_with_transformers(probe)
    cpu = _in_doctor_order(
        n
        for n in _CPU_PLANNED
        if STRATEGIES[n].on_gpu_box and (builds or n not in TRANSFORMERS_STRATEGIES)
    )
    return (*GPU_STRATEGIES, *cpu)


def choose_strategies(probe: ProbeReport) -> tuple[str, ...]:
    """The trials worth running here, in :data:`CPU_ORDER`: ``direct`` beside the parallel
    family where the filesystem takes O_DIRECT, and the transformers trials before the
    folklore fix where the model builds with transformers."""
    builds = builds_with_transformers(probe)
    thr = probe.throughput.data
    o_direct = thr is not None and thr.method == "o_direct"
    return _in_doctor_order(
        n
        for n in _CPU_PLANNED
        if (builds or n not in TRANSFORMERS_STRATEGIES)
        and (o_direct or not STRATEGIES[n].requires.o_direct)
    )


#: Warm trials that matter for the advice: the default (for prewarm) and the fast path.
WARM_STRATEGIES = tuple(n for n, s in STRATEGIES.items() if s.warm_trial)
MIN_SAMPLE_BYTES = 8 << 20
#: The most rounds of trials a diagnosis runs when the measured ones show they fit.
MAX_ROUNDS = 3
#: The rounds a plan tries, most first (more are added while the measured ones fit).
PLANNED_REPEATS = (2, 1)
#: What an extra round that does not fit whole runs first: the strategies whose figures
#: are printed under a fix (a stack's route) and the defaults they are against, so that
#: each printed figure has its trials' spread (loadscope's own readers are evidence).
FAVOURED = tuple(
    n for n, s in STRATEGIES.items() if s.routes or n in DEFAULT_LOADS or n == HF_DEFAULT
)
#: The routes whose code is loadscope's own (its API, ``loadscope warm``,
#: ``loadscope.from_pretrained``) and the defaults they are measured against: what every
#: stack's answer must carry a number for. Where a tight budget leaves one of them that
#: only runs whole without a trial, the peers' trials give way (said, with the budget
#: that runs them).
OWN_ROUTES = tuple(
    n
    for n in FAVOURED
    if n in DEFAULT_LOADS
    or n == HF_DEFAULT
    or any("loadscope" in r.template and not r.proxy for r in STRATEGIES[n].routes)
)


#: The default loads every speed-up is taken against, and the least share of the model a
#: sample of theirs reads (a tenth put mmap's estimate 10-15% under its whole loads at
#: 256 MiB, every ratio with it: benchmarks/RESULTS.md, issue 49).
BASELINE_STRATEGIES = DEFAULT_LOADS
BASELINE_SHARE = 0.25


#: A plan's repeats, sample and bytes per (strategy, cache) (:func:`plan_trials`).
Planned = tuple[int, int | None, dict[tuple[str, str], int]]


def plan_trials(probe: ProbeReport, trials: list[tuple[str, str]], budget_s: float) -> Planned:
    """Repeats and (when full loads cannot fit) a sample size for ``(strategy, cache)``
    trials, with the bytes each trial's sample may hold: the planner
    (:func:`~loadscope.engine.planning.plan_budget`) on the probe's rates."""
    whole_only = _whole_only(probe, {s for s, _ in trials})
    plan = plan_budget(
        cost_model(probe, trials),
        trials,
        probe.target["total_bytes"],
        budget_s,
        repeats=PLANNED_REPEATS,
        floor_bytes=MIN_SAMPLE_BYTES,
        whole_only=whole_only,
        # Where the model builds with transformers its answer leads with transformers:
        # from_pretrained and its routes get one whole load before the others' trials.
        first=frozenset(TRANSFORMERS_STRATEGIES),
        lead=BASELINES,
    )
    sizes = dict(plan.sizes)
    total = int(probe.target["total_bytes"])
    for key, nbytes in sizes.items():
        if key[0] in BASELINE_STRATEGIES and key[1] == "cold" and nbytes < total:
            # The default load is the denominator of every speed-up: its error multiplies
            # into all of them (a 1% sample of 1 GiB put mmap at +19%, every ratio +37%).
            sizes[key] = max(nbytes, min(total, int(BASELINE_SHARE * total)))
    # The sample: what the sampled trials read (a whole-only trial's size only says
    # whether it runs whole, once, or not at all).
    sampled = [n for (name, _), n in sizes.items() if name not in whole_only]
    sample = min(sampled or sizes.values()) if sizes else None
    return plan.repeats, sample, sizes


def _whole_only(probe: ProbeReport, names: set[str]) -> frozenset[str]:
    """The strategies among ``names`` a sample of this model cannot measure: those that
    load whole files (or the folder) and, on a one-file model, no subset of files can
    stand for the whole either (read from their declarations: no worker is asked)."""
    one_file = len(probe.files) <= 1
    return frozenset(
        n
        for n in names
        if (known := STRATEGIES.get(n)) is not None
        and not known.samples
        and (one_file or not known.sample_files)
    )


def late_estimates(probe: ProbeReport, plan: TrialPlan) -> dict[str, tuple[float, float]]:
    """What one whole cold trial of each favoured strategy that only runs whole is
    estimated to take (its fixed cost; its load by the planner's rates, which the bench
    replaces by a measured one where it can), the routes' baselines first. The bench
    runs the ones the plan skipped while the deadline leaves that much after the planned
    trials (at 256 MiB and --budget 30 the trials ended 4 s early and went to repeats
    while transformers' warm-first had no figure). By then the fork server has imported
    what the transformers trials share when one of them was given a whole load: such a
    trial costs the usual overhead."""
    total = int(probe.target["total_bytes"])
    names = {s for s in plan.strategies if s in FAVOURED}
    whole_only = _whole_only(probe, names)
    if not whole_only or not plan.sample_sizes:
        return {}
    costs = cost_model(probe, [(s, "cold") for s in whole_only])

    def planned_whole(name: str) -> bool:
        size = plan.sample_sizes.get((name, "cold"), total)
        return size >= total or runs_once(size, total, plan.repeats)

    preloaded = any(planned_whole(n) for n in TRANSFORMERS_STRATEGIES if n in plan.strategies)
    # In the order they are worth running: the routes' baselines first (without
    # from_pretrained's own figure no transformers route has one), then the plan's order.
    out = {}
    for name in sorted(whole_only, key=lambda n: (n not in BASELINES, plan.strategies.index(n))):
        fixed = costs.fixed(name)
        if name in TRANSFORMERS_STRATEGIES and preloaded:
            fixed = TRIAL_OVERHEAD_S
        out[name] = (fixed, total * costs.seconds_per_byte[(name, "cold")])
    return out


#: torch.load onto the GPU, beside load_file(device="cuda") (seed 000 on the GPU).
GPU_TORCH_STRATEGIES = tuple(
    n for n, s in STRATEGIES.items() if s.requires.formats == {"torch"} and s.requires.gpu
)
#: torch.load(weights_only=True), with and without mmap=True: what measures pickles.
TORCH_STRATEGIES = tuple(
    n for n, s in STRATEGIES.items() if s.requires.formats == {"torch"} and not s.requires.gpu
)
#: A torch model with its safetensors beside it: the pickles' ways and, on the
#: safetensors, the default and the fast path (the first of loadscope's tuned readers);
#: the pair the advice compares first (torch.load, load_file).
TORCH_WITH_SAFETENSORS = (
    TORCH_DEFAULT,
    DEFAULT,
    *(n for n in TORCH_STRATEGIES if n != TORCH_DEFAULT),
    _in_doctor_order(INTERNAL_READERS)[0],
)


@dataclass(frozen=True, slots=True)
class TrialPlan:
    """One run's trials: where tensors land, which strategies, how often, on how much."""

    device: str
    strategies: tuple[str, ...]
    repeats: int
    #: The bytes a sampled trial loads (None: whole loads), and per (strategy, cache).
    sample: int | None
    sample_sizes: dict[tuple[str, str], int]
    #: Seconds for the single-rank trials (what the probes left, less the others' share).
    trial_s: float
    #: Ranks for the multi-rank trials (None: none are run).
    ranks: int | None
    #: The strategies whose trials gave way to loadscope's own routes, and why (with the
    #: budget that runs them): the bench's skipped list takes them, their routes say it.
    left_out: dict[str, str] = field(default_factory=dict)
    #: The budget asked for was under one round of trials: ``trial_s`` is that least time,
    #: and no round is added after the first (a short budget wants the answer, not steadier
    #: figures; theirs show their spread as unmeasured).
    at_least: bool = False
    #: Seconds kept out of the trials for the checks after them (the readahead's).
    reserve_s: float = 0.0
    #: Whether warm trials run (not where the mount keeps no pages to the next open).
    warm: bool = True


#: The least seconds a plan gives the trials, whatever the budget: one round of them.
LEAST_TRIAL_S = 10.0


def trial_seconds(budget_s: float, spent_s: float) -> tuple[float, bool]:
    """The seconds the trials get of ``budget_s`` once ``spent_s`` (the probes, the
    checks after the trials, a margin) is taken off, never under :data:`LEAST_TRIAL_S`;
    and whether that floor was what decided."""
    left = budget_s - spent_s
    return max(LEAST_TRIAL_S, left), left < LEAST_TRIAL_S


def source_plan(
    target: Target, probe: ProbeReport, budget_s: float, reserve_s: float = 0.0
) -> TrialPlan:
    """The trials of a model in another source than files (``probes/sources.py``): the
    CPU strategies that declare its source, whole loads, interleaved, as often as the
    budget lets the bench's rounds go (no page cache here to sample a cold load by), less
    ``reserve_s`` for a check after them."""
    strategies = tuple(
        n
        for n, s in STRATEGIES.items()
        if not s.requires.gpu and supports(s.requires.sources, target.source)
    )
    remaining, at_least = trial_seconds(budget_s, probe.elapsed_s + 2.0 + reserve_s)
    return TrialPlan("cpu", strategies, 1, None, {}, remaining, None, at_least=at_least)


def _strategies(target: Target, probe: ProbeReport, device: str) -> tuple[str, ...]:
    """Every trial a model of these formats gets on ``device``, in the order they run."""
    if target.formats == {"safetensors"}:
        return choose_strategies(probe) if device == "cpu" else gpu_plan(probe)
    strategies: tuple[str, ...] = TORCH_STRATEGIES
    if target.alternates:
        # The same model as safetensors beside the pickles: the default and the fast path
        # on those too, loaded whole like the pickles; the pair "load those" rests on
        # (torch.load, load_file) first, should the budget cut the rest.
        strategies = TORCH_WITH_SAFETENSORS
    if device != "cpu":
        # On a GPU box, torch.load(map_location="cuda:N") too: the load its users run.
        strategies = (*strategies, *GPU_TORCH_STRATEGIES)
    return strategies


def plan_doctor(
    target: Target,
    probe: ProbeReport,
    budget_s: float,
    device: str,
    ranks: int | None,
    failures: list[str],
    reserve_s: float = 0.0,
    stacks: tuple[str, ...] = (),
) -> TrialPlan:
    """The trials for what is left of ``budget_s`` after the probes; what the plan leaves
    out or cannot use (an unusable GPU, torch files that do not fit) goes to ``failures``.

    ``device`` "auto" is resolved (:func:`resolve_device`); ``ranks`` None means one rank
    per GPU when there are several, and multi-rank trials take 40% of the time.
    ``reserve_s``: what the checks after the trials need (:func:`readahead_reserve_s`).
    ``stacks``: the user's stacks (``--stack``; empty: every stack's trials run), the
    others' routes left out, said (:func:`~loadscope.diagnosis.stack_scope.scoped`)."""
    formats = target.formats
    device, device_note = resolve_device(device, probe)
    if device_note:
        failures.append(device_note)
    strategies, not_theirs = scoped(_strategies(target, probe, device), stacks)
    kept = probe.primary.storage.keeps_pages if probe.primary else None
    if kept is False:
        # The mount keeps no pages to the next open: warm loads are cold ones, and a warm
        # first is time spent for nothing (on a bucket through rclone mount, 39 s).
        strategies, uncached = without_warm_first(strategies)
        not_theirs.update(uncached)
        failures.append(f"warm trials: not run: {NO_PAGE_CACHE}")
    trials = [(s, "cold") for s in strategies]
    trials += [(s, "warm") for s in strategies if s in WARM_STRATEGIES and kept is not False]
    if ranks is None and device != "cpu" and gpu_count(probe) >= 2:
        ranks = gpu_count(probe)
    # Multi-rank loading reads safetensors: a torch model's round runs on its twins.
    multi = ranks is not None and ranks >= 2 and rank_target(target) is not None
    if ranks == 1:
        failures.append("ranks: not run: --ranks 1 is one rank; the multi-rank round needs 2")
    if ranks is not None and ranks >= 2 and not multi:
        failures.append(
            "ranks: not run: multi-rank loading reads safetensors, and this model is "
            + " and ".join(sorted(formats))
            + (" with no safetensors beside it" if formats == {"torch"} else "")
        )
    remaining, at_least = trial_seconds(budget_s, probe.elapsed_s + 2.0 + reserve_s)
    if multi:
        # What the rank round needs, not a fixed share: a fixed 40% sampled the single-rank
        # trials where whole loads of them and the round both fitted (issue 41).
        remaining -= min(0.4 * remaining, rank_round_s(probe, ranks or 2))
    if formats == {"torch"} and not target.alternates:
        # Half for converting a sample to safetensors and timing both: what makes
        # "convert to safetensors" a measured number.
        remaining *= 0.5
    repeats, sample, sample_sizes = plan_trials(probe, trials, remaining)
    left_out: dict[str, str] = {}
    if formats == {"safetensors"} and (sample is not None or repeats < max(PLANNED_REPEATS)):
        strategies, trials, (repeats, sample, sample_sizes), left_out = _tightened(
            probe, strategies, trials, remaining, budget_s, (repeats, sample, sample_sizes),
            failures,
        )  # fmt: skip
    if formats != {"safetensors"}:
        sample, sample_sizes = None, {}  # torch checkpoints load whole
    plan = TrialPlan(
        device,
        strategies,
        repeats,
        sample,
        sample_sizes,
        remaining,
        ranks if multi else None,
        {**not_theirs, **left_out},
        at_least,
        reserve_s,
        warm=kept is not False,
    )
    if formats == {"safetensors"} and target.alternates:
        plan = _with_torch_files(plan, target, probe, trials, budget_s, failures)
    return plan


def _tightened(
    probe: ProbeReport,
    strategies: tuple[str, ...],
    trials: list[tuple[str, str]],
    remaining: float,
    budget_s: float,
    planned: Planned,
    failures: list[str],
) -> tuple[tuple[str, ...], list[tuple[str, str]], Planned, dict[str, str]]:
    """A plan that cannot run every trial whole twice, focused: the evidence left out
    where that buys the printed figures more (:func:`_focused`), then the peers where one
    of loadscope's own routes still has no trial (:func:`_make_room`); the peers left out
    with why and the budget that runs them."""
    strategies, trials, focused = _focused(probe, strategies, trials, remaining, planned, failures)
    planned = focused or planned
    if not _unrun(probe, trials, planned, OWN_ROUTES):
        return strategies, trials, planned, {}
    every = strategies
    strategies, trials, planned = _make_room(
        probe, strategies, trials, remaining, planned, failures
    )
    runs_them = _budget_for(probe, every, remaining, budget_s)
    left_out = {
        peer: f"its trials gave way at --budget {budget_s:g} to loadscope's own routes,"
        " which the answer prints in every stack"
        + (f" (about --budget {runs_them} measures it)" if runs_them else "")
        for peer in every
        if peer not in strategies and peer in FAVOURED
    }
    return strategies, trials, planned, left_out


def _focused(
    probe: ProbeReport,
    strategies: tuple[str, ...],
    trials: list[tuple[str, str]],
    remaining: float,
    before: Planned,
    failures: list[str],
) -> tuple[tuple[str, ...], list[tuple[str, str]], Planned | None]:
    """Where every strategy cannot run whole twice: the routes' strategies and their
    defaults alone (:data:`FAVOURED`), when that buys them more than ``before`` (the plan
    of every strategy) does: more of them run, more rounds, or bigger samples;
    loadscope's own readers and the other evidence are then left out, said with the
    budget that runs them. The figures printed under a fix come first: a figure from one
    sampled trial swung 2x between runs."""
    kept = tuple(s for s in strategies if s in FAVOURED)
    left_out = [s for s in strategies if s not in kept]
    if not left_out or not kept:
        return strategies, trials, None
    fewer = [t for t in trials if t[0] in kept]
    after = plan_trials(probe, fewer, remaining)
    if _worth(probe, fewer, after) <= _worth(probe, fewer, before):
        return strategies, trials, None
    failures.append(_evidence_left_out(left_out))
    return kept, fewer, after


def _evidence_left_out(names: list[str]) -> str:
    return (
        f"evidence trials not run ({', '.join(names)}): the budget went to the figures the"
        " answer prints (a larger --budget runs them too)"
    )


def _make_room(
    probe: ProbeReport,
    strategies: tuple[str, ...],
    trials: list[tuple[str, str]],
    remaining: float,
    planned: Planned,
    failures: list[str],
) -> tuple[tuple[str, ...], list[tuple[str, str]], Planned]:
    """Where one of loadscope's own routes that only runs whole (transformers' warm-first)
    has no trial in ``planned``: the other trials left out one at a time until it has
    one (the evidence first, then the peers that run whole, each a whole load, then the
    plan's last); none when leaving all of them out does not give it one. Said, with the
    budget that runs them."""
    whole_only = _whole_only(probe, set(strategies))
    peers = sorted(
        (s for s in strategies if s not in OWN_ROUTES),
        key=lambda s: (s in FAVOURED, s not in whole_only, -strategies.index(s)),
    )
    left_out: list[str] = []
    kept, fewer, after = strategies, trials, planned
    for peer in peers:
        left_out.append(peer)
        kept = tuple(s for s in strategies if s not in left_out)
        fewer = [t for t in trials if t[0] in kept]
        after = plan_trials(probe, fewer, remaining)
        if not _unrun(probe, fewer, after, OWN_ROUTES):
            break
    else:
        return strategies, trials, planned
    evidence = [s for s in strategies if s in left_out and s not in FAVOURED]
    if evidence:
        failures.append(_evidence_left_out(evidence))
    return kept, fewer, after


def _budget_for(
    probe: ProbeReport, strategies: tuple[str, ...], remaining: float, budget_s: float
) -> int | None:
    """About the ``--budget`` at which every one of ``strategies`` has its trial beside
    loadscope's own routes (the trials' time grows with the budget), or None past 8x."""
    trials = [(s, "cold") for s in strategies]
    trials += [(s, "warm") for s in strategies if s in WARM_STRATEGIES]
    for factor in (1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0):
        if not _unrun(probe, trials, plan_trials(probe, trials, remaining * factor), OWN_ROUTES):
            return int(math.ceil(budget_s * factor / 10) * 10)
    return None


def _unrun(
    probe: ProbeReport,
    trials: list[tuple[str, str]],
    planned: Planned,
    among: tuple[str, ...],
) -> list[str]:
    """The strategies of ``among`` that only run whole and get no whole load in
    ``planned``: skipped."""
    repeats, _sample, sizes = planned
    total = int(probe.target["total_bytes"])
    whole_only = _whole_only(probe, {s for s, _ in trials if s in among})
    return [
        s
        for s, c in trials
        if c == "cold"
        and s in whole_only
        and not runs_once(sizes.get((s, c), total), total, repeats)
    ]


def _worth(
    probe: ProbeReport,
    trials: list[tuple[str, str]],
    planned: Planned,
) -> tuple[int, int, int]:
    """How much a plan gives ``trials``: how many of them run at all (a whole-only trial
    given less than one whole load over its rounds is skipped), its rounds, the bytes
    their samples read."""
    repeats, _sample, sizes = planned
    total = int(probe.target["total_bytes"])
    whole_only = _whole_only(probe, {s for s, _ in trials})
    run = [
        t
        for t in trials
        if t[0] not in whole_only or runs_once(sizes.get(t, total), total, repeats)
    ]
    return len(run), repeats, sum(sizes.get(t, total) for t in run)


def _with_torch_files(
    plan: TrialPlan,
    target: Target,
    probe: ProbeReport,
    trials: list[tuple[str, str]],
    budget_s: float,
    failures: list[str],
) -> TrialPlan:
    """The same model as pickles beside the safetensors: the formats measured side by side
    (seed 000) when whole loads fit, on the CPU or the GPU the plan loads to; they cannot
    be sampled (else a note saying so)."""
    gpu = plan.device != "cpu"
    torch_ways = GPU_TORCH_STRATEGIES if gpu else TORCH_STRATEGIES
    strategies, planned = plan.strategies, (plan.repeats, plan.sample, plan.sample_sizes)
    if plan.sample is None:
        strategies = (*strategies, *torch_ways)
        trials = trials + [(s, c) for s in torch_ways for c in ("cold", "warm")]
        planned = plan_trials(probe, trials, plan.trial_s)
    if planned[1] is not None:
        if any(s in strategies for s in torch_ways):
            strategies = tuple(x for x in strategies if x not in torch_ways)
            planned = plan_trials(
                probe, [t for t in trials if t[0] not in torch_ways], plan.trial_s
            )
        pair = (
            f"{GPU_DEFAULT},{GPU_TORCH_DEFAULT} --device {plan.device}"
            if gpu
            else f"{DEFAULT},{TORCH_DEFAULT}"
        )
        failures.append(
            "torch files beside the safetensors: not measured (loaded whole, they do not"
            f" fit {budget_s:g} s; `loadscope bench {target.spec} --strategies"
            f" {pair}` measures them)"
        )
    repeats, sample, sample_sizes = planned
    return TrialPlan(
        plan.device,
        strategies,
        repeats,
        sample,
        sample_sizes,
        plan.trial_s,
        plan.ranks,
        at_least=plan.at_least,
    )
