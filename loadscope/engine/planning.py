"""The budget planner: how many rounds of trials fit a time budget, and how big a sample.

One cost model for ``bench --budget`` and ``doctor``: a trial costs its strategy's
fixed start-up (the worker's fork, the cache put in its state and verified, the
digest check) plus the bytes it loads at that strategy's rate in that cache state;
each round with warm trials also fills the page cache once (the cold trials between
rounds evicted it); a run pays its fork server's start once. ``doctor`` fills the
model in from the probe's rates before any trial runs; ``bench`` from pilot trials.

When whole loads do not fit, every trial's load (a strategy in one cache state) is
given the same share of what the fixed costs leave, so a strategy that loads fast gets
a bigger sample than a slow one, and a warm trial a bigger one than its cold one; a
trial whose whole load costs less than its share runs whole, and what it leaves goes
to the others; a trial a sample cannot measure runs whole, in every round where that
fits, else once (its share then adds up to one whole load, which the bench reads as
"whole, once"). The first sampled round is followed by one at a quarter of the size
and the second by one at half of it (the extrapolation's other points,
:func:`~loadscope.engine.sampling.fit_fractions`).

May import: ``loadscope.engine.sampling``. Nothing here runs a trial.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from loadscope.engine.sampling import fit_fractions


@dataclass(frozen=True, slots=True)
class CostModel:
    """What the trials of one run cost, in seconds."""

    #: (strategy, cache) -> seconds per byte loaded.
    seconds_per_byte: Mapping[tuple[str, str], float]
    #: A trial's fixed cost beyond its load.
    fixed_s: float
    #: Per strategy, where its fixed cost differs (a transformers trial builds a model).
    fixed_s_for: Mapping[str, float] = field(default_factory=dict)
    #: Once per round that has warm trials: the page cache filled with the model.
    fill_s_per_byte: float = 0.0
    #: Once per run: the fork server starting.
    start_s: float = 0.0

    def fixed(self, strategy: str) -> float:
        return self.fixed_s_for.get(strategy, self.fixed_s)


@dataclass(frozen=True, slots=True)
class Plan:
    """``repeats`` rounds; ``sizes`` the bytes each trial's sample may hold, by (strategy,
    cache) (empty when whole loads fit; the model's size: that trial runs whole);
    ``whole_s`` the estimate for whole loads that decided it."""

    repeats: int
    sizes: dict[tuple[str, str], int]
    whole_s: float

    @property
    def sample(self) -> int | None:
        """The smallest sample any strategy reads, or None when nothing is sampled."""
        return min(self.sizes.values()) if self.sizes else None


def sampled_loads(repeats: int) -> float:
    """The model's worth of loads a sampled trial's rounds add up to per byte of its
    sample: ``repeats`` samples and the fit's smaller ones."""
    return max(1, repeats) + sum(fit_fractions(repeats))


def once_bytes(model_bytes: int, repeats: int) -> int:
    """The sample size that says "run whole, once": its sampled rounds would read at
    least one whole model (:func:`runs_once`)."""
    return math.ceil(model_bytes / sampled_loads(repeats)) + 1


def runs_once(sample_bytes: int, model_bytes: int, repeats: int) -> bool:
    """Whether one whole load costs no more than the sampled rounds of ``sample_bytes``
    (the bench then runs the trial whole, once, in round 1)."""
    return model_bytes <= sampled_loads(repeats) * sample_bytes


#: How much a whole-only trial's whole load counts when whole loads are handed out.
WHOLE_ONLY_WEIGHT = 0.5


def _whole_first(
    costs: CostModel,
    trials: Sequence[tuple[str, str]],
    whole_load: Mapping[tuple[str, str], float],
    usable: float,
    rounds: int,
    fit_rounds: int,
    fill: float,
    floor_bytes: int,
    whole_only: frozenset[str] = frozenset(),
    first: frozenset[str] = frozenset(),
    lead: frozenset[str] = frozenset(),
) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """The trials that run whole, in every round and (``whole_only`` ones whose every
    round does not fit) once: every one whose whole loads cost no more than its sampled
    rounds at the floor would; then ``whole_only`` ones and the cheapest whole loads
    first, each taken while the time left still gives every other trial its fixed costs
    (fit rounds included) and its floor sample in every round. The fast routes are the
    ones a fit on a small sample gets wrong (their fixed cost swamps the rate), and the
    ones whole loads cost least: measured, not estimated, whenever the budget allows. A
    whole-only trial that fits once runs once (a figure from one trial, more rounds
    added while the deadline allows) rather than not at all."""
    capped: set[tuple[str, str]] = set()
    once: set[tuple[str, str]] = set()
    loads = rounds + fit_rounds

    def at_floor(s: str, c: str) -> float:
        if s in whole_only:
            return 0.0  # not given whole loads, it is skipped: it costs nothing
        return loads * (costs.fixed(s) + floor_bytes * costs.seconds_per_byte[(s, c)])

    def whole(s: str, c: str, n: int) -> float:
        return n * (costs.fixed(s) + whole_load[(s, c)])

    def spent(every: set[tuple[str, str]], one: set[tuple[str, str]]) -> float:
        total = sum(whole(s, c, rounds) for s, c in every) + sum(whole(s, c, 1) for s, c in one)
        total += sum(at_floor(s, c) for s, c in trials if (s, c) not in every | one)
        return total + loads * fill

    # Cheapest first, what a sample cannot measure (else not measured at all) counted at
    # half its cost: the fast routes, whose small samples fit worst, still come first.
    def weight(x: tuple[str, str]) -> float:
        return whole_load[x] * (WHOLE_ONLY_WEIGHT if x[0] in whole_only else 1.0)

    # ``first``: one whole load each before anything else (the user's own stack's load and
    # its routes: their figures lead the answer), in every round if that still fits.
    # ``lead`` (a route's baseline: without its figure the route has none), then the
    # cheapest.
    firsts = [t for t in trials if t[0] in first and t[0] in whole_only]
    for t in sorted(firsts, key=lambda t: (t[0] not in lead, weight(t))):
        if spent(capped, once | {t}) <= usable:
            (once if rounds > 1 else capped).add(t)
    for t in sorted(trials, key=weight):
        if t in once or t in capped:
            continue
        if t[0] not in whole_only and whole(*t, rounds) <= at_floor(*t):
            capped.add(t)  # whole costs less than its fit's rounds would: always taken
        elif spent(capped | {t}, once) <= usable:
            capped.add(t)  # else a dearer one may not fit, a later cheaper one may
        elif t[0] in whole_only and rounds > 1 and spent(capped, once | {t}) <= usable:
            once.add(t)
    for t in sorted(once & {t for t in trials if t[0] in first}, key=weight):
        if spent(capped | {t}, once - {t}) <= usable:
            capped.add(t)
            once.discard(t)
    return capped, once


def plan_budget(
    costs: CostModel,
    trials: Sequence[tuple[str, str]],
    model_bytes: int,
    budget_s: float,
    *,
    repeats: Sequence[int] = (2, 1),
    floor_bytes: int = 0,
    whole_only: frozenset[str] = frozenset(),
    first: frozenset[str] = frozenset(),
    lead: frozenset[str] = frozenset(),
) -> Plan:
    """The most rounds in ``repeats`` (tried in order) of whole loads of ``trials``
    (strategy, cache) that fit ``budget_s``; else a sampled plan. ``whole_only``: the
    strategies a sample cannot measure (they run whole or not at all), given whole loads
    before the others' cheapest; ``first``: those of them given one whole load before
    any other trial is given its own, ``lead`` (a route's baseline) among them first.

    A sampled plan runs the first of ``repeats`` when the fixed costs of those rounds and
    the fit's round would leave the loads at least a third of the time, else the last:
    every strategy is still measured, with a fit but no spread. No sample is below
    ``floor_bytes`` or above the model."""
    if not trials:
        return Plan(max(repeats), {}, 0.0)
    fixed = sum(costs.fixed(s) for s, _ in trials)
    fill = model_bytes * costs.fill_s_per_byte if any(c == "warm" for _, c in trials) else 0.0
    loads = sum(model_bytes * costs.seconds_per_byte[t] for t in trials)
    whole = [costs.start_s + r * (fixed + fill + loads) for r in repeats]
    for r, estimate in zip(repeats, whole, strict=True):
        if estimate <= budget_s:
            return Plan(r, {}, estimate)
    usable = budget_s - costs.start_s
    most, least = repeats[0], repeats[-1]
    rounds_most = most + len(fit_fractions(most))
    chosen = most if usable - rounds_most * (fixed + fill) >= usable / 3 else least
    # The fit's trials are rounds of their own (their fixed costs and fill), each loading
    # a fraction of the sample. A trial that runs whole has no fit round: it pays its
    # fixed cost only in its own rounds.
    fits = fit_fractions(chosen)
    loads_per_trial = chosen + sum(fits)
    whole_load = {t: model_bytes * max(costs.seconds_per_byte[t], 1e-15) for t in trials}
    capped, once = _whole_first(
        costs,
        trials,
        whole_load,
        usable,
        chosen,
        len(fits),
        fill,
        floor_bytes,
        whole_only,
        first,
        lead,
    )
    # Open: sampled. A whole-only trial not given whole loads is skipped (it costs nothing).
    open_ = [t for t in trials if t not in capped and t[0] not in whole_only]
    spent = sum(chosen * (costs.fixed(s) + whole_load[(s, c)]) for s, c in capped)
    spent += sum(costs.fixed(s) + whole_load[(s, c)] for s, c in once)
    spent += sum((chosen + len(fits)) * costs.fixed(s) for s, _ in open_)
    spent += (chosen + len(fits)) * fill
    share = max(0.0, usable - spent) / (loads_per_trial * max(1, len(open_)))
    sizes: dict[tuple[str, str], int] = {}
    for t in trials:
        per_byte = max(costs.seconds_per_byte[t], 1e-15)
        nbytes = model_bytes if t in capped else int(share / per_byte)
        if t in once:
            # Its samples' bytes add up to one whole load: the bench runs it whole, once.
            nbytes = once_bytes(model_bytes, chosen)
        sizes[t] = int(min(model_bytes, max(floor_bytes, nbytes)))
    return Plan(chosen, sizes, whole[-1])
