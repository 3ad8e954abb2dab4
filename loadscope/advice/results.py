"""What the advice yields, and the pieces every rule writes it with.

:class:`Advice` is a :class:`Verdict` and the ranked :class:`Recommendation` list,
each fix backed by :class:`Evidence` (a measured number and its trial ids, or what
was not measured). ``WORTH_IT`` and ``HEALTHY_FRACTION`` are the thresholds the
rules judge by; :data:`Rule` is a rule's type, and :func:`ids_of`,
:func:`remeasure` and :func:`ram_risk` the evidence, command and risk text the
rules share.
May import: :mod:`loadscope.advice.facts`, :mod:`loadscope.advice.snippets`,
``loadscope.loaders.strategies``, ``loadscope.base``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from loadscope.advice.facts import Facts
from loadscope.advice.snippets import Snippet, command
from loadscope.base.units import format_bytes
from loadscope.loaders.strategies import DEFAULT

Confidence = Literal["high", "medium", "low"]
#: A strategy must beat mmap by this much before it is worth a change of code.
WORTH_IT = 1.5
#: The default load is "healthy" at this fraction of the storage's measured limit.
HEALTHY_FRACTION = 0.5


@dataclass(slots=True)
class Evidence:
    what: str
    value: float | str | None = None
    unit: str = ""
    trial_ids: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Recommendation:
    id: str
    title: str
    action: str
    strategy: str | None = None
    #: What the user applies, named ("loadscope.load_file (safetensors)"): the route whose
    #: trial gives ``expected_speedup``; empty for a fix with no route of its own.
    route: str = ""
    #: Measured speed-up over the default (mmap load_file), cold; None when not measured.
    expected_speedup: float | None = None
    evidence: list[Evidence] = field(default_factory=list)
    ram_bytes_needed: int | None = None
    risk: str = ""
    confidence: Confidence = "medium"
    #: The change in each stack's own terms, each with the trial of its own code.
    snippets: list[Snippet] = field(default_factory=list)
    #: An optional tip on healthy storage, not a problem.
    optional: bool = False
    #: False when the gain is estimated from probes rather than timed in a trial here;
    #: estimated gains rank after measured ones.
    measured: bool = True
    #: How the trials behind ``expected_speedup`` were obtained, where not whole steady
    #: loads: "estimated ±E%" (a sampled fit), "measured in unsteady runs"; "" otherwise.
    how: str = ""
    #: What loadscope's own apply does for this fix, so that the app, the CLI and the
    #: snippet name one source and one destination: {"kind": "warm", "source": ...} or
    #: {"kind": "copy", "source": ..., "dest": ...}; None for a fix it does not apply.
    apply: dict[str, str] | None = None


@dataclass(slots=True)
class Verdict:
    #: "unmeasured": no trial (or no cold trial of the default load) completed, so there is
    #: no evidence to call the storage healthy or to rank a fix on.
    status: Literal["healthy", "problem", "unmeasured"]
    headline: str
    #: The headline without the top fix's number and route ("FUSE storage, latency-bound:
    #: read with ..."): what an answer that shows other routes leads with.
    problem: str = ""


@dataclass(slots=True)
class Advice:
    verdict: Verdict
    recommendations: list[Recommendation]
    notes: list[str] = field(default_factory=list)


#: A rule: the facts in, the fixes it finds (none when it does not fire).
Rule = Callable[[Facts], list[Recommendation]]


def ids_of(f: Facts, *keys: tuple[str, str]) -> list[int]:
    """The ids of the ok trials for each (strategy, cache) key, in order."""
    return [i for k in keys for i in f.trial_ids.get(k, [])]


def trial_evidence(f: Facts, label: str, strategy: str, cache: str = "cold") -> Evidence:
    """A strategy's median time in ``cache`` as evidence, with its trials' ids."""
    return Evidence(label, f.seconds(strategy, cache), "s", ids_of(f, (strategy, cache)))


def reader_evidence(f: Facts, reader: str) -> Evidence:
    """One of loadscope's own tuned readers: what the storage gives it, not a route."""
    label = f"loadscope's own '{reader}' reader cold (evidence, not a route)"
    return trial_evidence(f, label, reader)


def gain_terms(
    f: Facts, route: str, gain: float, baseline: str = DEFAULT
) -> tuple[str, Confidence, str]:
    """How a route's gain over ``baseline`` was obtained and how far it holds ("measured
    ±8%", "estimated ±15%", "unsteady: ..."), the recommendation's ``confidence`` that
    follows (high: measured, steady within 10%, 2x or more) and its ``how`` (the same)."""
    terms = f.ratio_terms(route, baseline)
    how = terms.how if terms is not None else f.how_obtained(route, baseline)
    steady = terms is not None and not terms.unsteady and terms.error <= 0.1
    high = gain >= 2 and how.startswith("measured") and steady
    confidence: Confidence = "high" if high else "medium"
    return how, confidence, how


def remeasure(f: Facts, options: str) -> Snippet:
    """The bench command that re-measures the fix with ``options``."""
    return command("shell", f"loadscope bench {shlex.quote(f.model_path)} {options}  # re-measure")


def slower_evidence(slower: list[Snippet]) -> list[Evidence]:
    """The routes measured slower than their stack's default, as evidence (never as a fix)."""
    return [
        Evidence(
            f"measured slower than the default here: {s.what} ({s.stack})",
            round(s.speedup, 2) if s.speedup is not None else None,
            "x",
            list(s.trial_ids),
        )
        for s in slower
    ]


def ram_risk(f: Facts, need: int) -> str:
    """What a fix that holds ``need`` bytes in RAM risks, against the free memory."""
    if f.headroom_bytes is None:
        return f"needs ~{format_bytes(need)} of RAM (free memory unknown)"
    limit = f" (cgroup limit {format_bytes(f.cgroup_limit_bytes)})" if f.cgroup_limit_bytes else ""
    return f"needs ~{format_bytes(need)} of RAM; {format_bytes(f.headroom_bytes)} free{limit}"
