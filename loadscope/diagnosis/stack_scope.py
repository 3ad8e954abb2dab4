"""Which trials apply here: those a user's stacks need (``doctor --stack NAME``), and
none that warms the page cache first on a mount that keeps no pages
(:func:`without_warm_first`).

A strategy whose every route is another stack's code (vLLM's prefetch flag, the peers
vLLM and SGLang load with, transformers' ``from_pretrained`` and its routes) is left out
when the user named their stacks and none of them runs it, with the reason and the
``--stack`` that times it. The default loads, loadscope's own evidence (the parallel
family, ``auto``, ``direct``, prefetch: no route, no stack) and the baselines of the
routes kept always run: the verdict and every kept route's speed-up rest on them.

May import: ``loadscope.loaders.strategies`` (the declarations),
``loadscope.advice.snippets`` (the stacks' names and order), ``loadscope.probes.pagecache``
(what a mount that keeps no pages means); nothing above.
"""

from __future__ import annotations

from collections.abc import Iterable

from loadscope.advice.snippets import STACKS, warms_first
from loadscope.loaders.strategies import DEFAULT_LOADS, STRATEGIES
from loadscope.probes.pagecache import NOT_KEPT


def stacks_of(name: str) -> frozenset[str]:
    """The stacks whose code runs ``name``: its routes' stacks, and for a strategy that
    builds the model with transformers and has no route of its own (``from_pretrained``
    as the user runs it), transformers."""
    known = STRATEGIES[name]
    stacks = frozenset(r.stack for r in known.routes)
    if not stacks and known.builds_model:
        return frozenset({"transformers"})
    return stacks


def scoped(
    strategies: Iterable[str], stacks: Iterable[str]
) -> tuple[tuple[str, ...], dict[str, str]]:
    """``strategies`` less those no stack of ``stacks`` runs, and why each was left out
    (``stacks`` empty: every stack's, nothing left out)."""
    names = tuple(strategies)
    asked = frozenset(stacks)
    if not asked:
        return names, {}

    def wanted(name: str) -> bool:
        own = stacks_of(name)
        return name in DEFAULT_LOADS or not own or bool(own & asked)

    kept = {n for n in names if wanted(n)}
    # The baseline of a kept route runs too (from_pretrained under its routes' figures).
    kept |= {r.baseline for n in kept for r in STRATEGIES[n].routes if r.baseline}
    named = " ".join(f"--stack {s}" for s in sorted(asked))
    left_out = {
        n: f"a route of {_listed(_ordered(stacks_of(n)))} only, which {named} leaves out;"
        f" add --stack {_ordered(stacks_of(n))[0]} to time it"
        for n in names
        if n not in kept
    }
    return tuple(n for n in names if n in kept), left_out


def _ordered(stacks: frozenset[str]) -> list[str]:
    """``stacks`` in the order ``--stack`` lists them (the most used first)."""
    return sorted(stacks, key=lambda s: STACKS.index(s) if s in STACKS else len(STACKS))


def _listed(stacks: list[str]) -> str:
    return stacks[0] if len(stacks) == 1 else f"{', '.join(stacks[:-1])} and {stacks[-1]}"


#: Why nothing is warmed on a mount that keeps no pages (the probe's keeps_pages).
NO_PAGE_CACHE = f"this mount keeps no pages in the page cache: {NOT_KEPT}"


def without_warm_first(strategies: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str]]:
    """``strategies`` less those that warm the page cache before they load, and why."""
    out = {n: f"warms the page cache first; {NO_PAGE_CACHE}" for n in strategies if warms_first(n)}
    return tuple(n for n in strategies if n not in out), out
