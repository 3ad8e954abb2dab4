"""The order of a ``bench`` run's trials: interleaved rounds, the fit's smaller sizes, and
what is added at the end while the deadline leaves time (the whole-only trials a plan
skipped, more rounds, or the favoured strategies' part of one).

May import: ``loadscope.engine.bench_records``, ``loadscope.engine.sampled``,
``loadscope.engine.trials``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable
from typing import Any, Protocol

from loadscope.engine.bench_records import BenchOptions, Trial
from loadscope.engine.sampled import SampledChoices, TrialKey
from loadscope.engine.trials import CacheMode, interleaved


class RunState(Protocol):
    """What the order reads and updates of a ``bench`` run (``engine/bench.py``'s)."""

    options: BenchOptions
    available: dict[str, dict[str, Any]]
    sampled: SampledChoices
    total: int
    late: dict[str, tuple[float, float]]
    ran_late: list[str]
    skipped: dict[str, str]
    whole_reference: bool


def wanted_in(options: BenchOptions, name: str, cache: str) -> bool:
    """Whether ``name`` runs in ``cache`` (every strategy cold; warm unless
    ``options.warm_strategies`` leaves it out)."""
    warm = options.warm_strategies
    return cache == "cold" or warm is None or name in warm


class RoundPlan:
    """The trials in order: interleaved rounds (round 0 the warm-up), the fit's smaller
    sizes (a quarter after round 1, a half after round 2), and more rounds when the
    deadline leaves time for them."""

    def __init__(self, run: RunState, names: list[str], caches: list[CacheMode]) -> None:
        self.run, self.names, self.caches = run, names, caches
        options = run.options
        self.trials: list[Trial] = []
        for r in range(0 if options.warmup else 1, options.repeats + 1):
            self.trials += self.round_of(r)
            if r in (1, 2):
                # The fit's other sizes, once per strategy and cache, after the first and
                # second rounds: when the budget runs short, what is lost is the fit's
                # error, not a strategy.
                self.trials += self.fit_round(r)

    def fit_round(self, r: int) -> list[Trial]:
        """Round ``r``'s fit trials: at the sample's quarter (r 1) or half (r 2) size."""
        options, sampled = self.run.options, self.run.sampled
        return [
            Trial(0, name, cache, r, False, scope=sampled.scopes[(name, cache)], fit=True)
            for cache in self.caches
            for name in self.names
            if wanted_in(options, name, cache)
            and sampled.sets.get((name, cache), (None, None, None))[r] is not None
        ]

    def round_of(self, r: int) -> list[Trial]:
        options, scopes, once = self.run.options, self.run.sampled.scopes, self.run.sampled.once

        def make(r: int, cache: CacheMode, name: str) -> Trial | None:
            # A trial run whole in a sampled run loads the model once, in round 1.
            if wanted_in(options, name, cache) and ((name, cache) not in once or r == 1):
                return Trial(0, name, cache, r, r == 0, scope=scopes.get((name, cache)))
            return None

        return interleaved([r], self.caches, self.names, make)

    def another_round(self, extra: int = 1) -> bool:
        """First the skipped whole-only strategies that fit what is left of the deadline
        (:meth:`late_whole`); then, with ``extra`` rounds still allowed, one more round at
        the same sizes when the last one, as timed, fits what is left (its spread is then
        measured, not "±?"), else the trials of the favoured strategies that fit, the
        quickest first; the favoured trials run whole once (in round 1) join it while
        they fit too. True when added."""
        deadline = self.run.options.deadline
        if deadline is None:
            return False
        late, spent = self.late_whole((deadline - time.monotonic()) / 1.2)
        self.trials += late
        if extra <= 0:
            return bool(late)
        once = self.run.sampled.once
        last = max(t.repeat for t in self.trials)
        # What a next round repeats (not those run whole once), each as its latest trial
        # took: the last round may have held only some of them (a partial round of the
        # favoured ones, or a late whole trial), and timed by those alone a whole round
        # looked cheap.
        latest = {(t.strategy, t.cache): t for t in self.trials if not t.fit and t.wall_s}
        ran = [
            latest[(t.strategy, t.cache)]
            for t in self.round_of(last + 1)
            if (t.strategy, t.cache) in latest
        ]
        took = sum(t.wall_s or 0.0 for t in ran)
        left = deadline - time.monotonic() - 1.2 * spent
        room = left / 1.2
        favoured = set(self.run.options.favoured)
        added: list[Trial] = []
        if last >= 1 and took > 0 and left > 1.2 * took:
            added, room = self.round_of(last + 1), room - took
        elif last >= 1:
            # Else the favoured strategies' trials of it that fit, the quickest first: a
            # figure printed under a fix gets its spread before a reader that is evidence.
            chosen, room = self._quickest((t for t in ran if t.strategy in favoured), room)
            added = [t for t in self.round_of(last + 1) if (t.strategy, t.cache) in chosen]
        whole = [t for t in self.trials if t.repeat == 1 and (t.strategy, t.cache) in once]
        whole = [t for t in whole if t.strategy in favoured and t.status == "ok"]
        keys, _room = self._quickest(whole, room)
        again = [t for t in whole if (t.strategy, t.cache) in keys]
        added += [Trial(0, t.strategy, t.cache, last + 1, False, scope=t.scope) for t in again]
        self.trials += added
        return bool(added or late)

    def late_whole(self, room: float) -> tuple[list[Trial], float]:
        """A whole cold trial, once, of the skipped whole-only strategies in the order
        ``options.late`` gives them, while their estimates fit ``room`` seconds, each taken
        off the skipped list; and the seconds they are estimated to take."""
        run, out, spent = self.run, [], 0.0
        for name, planned in run.late.items():
            estimate = self.late_estimate(name, *planned)
            if estimate > room or not run.whole_reference:
                break  # in order: a route's figure needs its baseline, which comes first
            room -= estimate
            spent += estimate
            key = (name, "cold")
            run.sampled.scopes[key], run.sampled.sets[key] = "whole", (None, None, None)
            run.sampled.once.add(key)
            run.skipped.pop(name, None)
            run.ran_late.append(name)
            out.append(Trial(0, name, "cold", 1, False, scope="whole"))
        run.late.clear()  # asked once: what did not fit now stays skipped, with its reason
        return out, spent

    def late_estimate(self, name: str, fixed_s: float, planned_load_s: float) -> float:
        """One whole trial of ``name``: its fixed cost and the measured whole load of the
        strategy it reads as (set-up added once, the rest scaled to the model), else the
        planner's load."""
        like = self.run.available[name].get("reads_as")
        loads = []
        for t in self.trials:
            ran = t.status == "ok" and t.wall_s and t.seconds and t.bytes and not t.warmup
            if ran and t.strategy == like and t.cache == "cold":
                setup = float(t.detail.get("setup_s") or 0.0)
                loads.append(
                    setup + (float(t.seconds or 0) - setup) * self.run.total / (t.bytes or 1)
                )
        return fixed_s + (statistics.median(loads) if loads else planned_load_s)

    @staticmethod
    def _quickest(trials: Iterable[Trial], room: float) -> tuple[set[TrialKey], float]:
        """The (strategy, cache) of ``trials`` that fit ``room`` seconds, quickest first,
        and the room they leave."""
        chosen: set[TrialKey] = set()
        for t in sorted(trials, key=lambda t: t.wall_s or 0):
            if t.wall_s and t.wall_s <= room:
                chosen.add((t.strategy, t.cache))
                room -= t.wall_s
        return chosen, room
