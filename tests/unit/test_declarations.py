"""One declaration per fact: what a strategy is lives on the strategy (issue 39).

Outside ``loaders/strategies/`` a strategy is named by what it stands for (the registry's
``DEFAULT``, ``WHOLE_FILE_READ``, ...) or read from its declaration, not spelled out: the
lists the doctor's plan, the advice and the tables use are derived from the declarations,
so a strategy added, renamed or re-described changes in one place.
"""

from __future__ import annotations

import ast

from loadscope.diagnosis import trial_costs, trial_plan
from loadscope.loaders.strategies import FIX_STRATEGIES, ROUTES, STRATEGIES
from tests.repo_sources import ROOT, sources

#: Names that are ordinary words too: knob values (``auto``, ``direct``, ``api``), a
#: report field and read kind (``parallel``: the probe's parallel reads) and the public
#: function (``prewarm``). Their strategies' facts are declared on them all the same.
#: ``mmap`` is counted: outside the strategies it is ``DEFAULT`` or ``mapped.NAME``.
ORDINARY_WORDS = {"auto", "direct", "api", "parallel", "prewarm"}
#: Where names may be spelled: the registry and the strategies themselves; tests,
#: benchmarks and the fuzzers name what they exercise.
EXEMPT = ("loaders/strategies/", "tests/", "benchmarks/", "fuzz/")
MOST_LITERALS = 10


def _literals() -> list[str]:
    names = set(STRATEGIES) - ORDINARY_WORDS
    found = []
    for path in sources(EXEMPT):
        tree = ast.parse(path.read_text())
        found += [
            f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            if node.value in names
        ]
    return found


def test_strategy_names_are_spelled_out_in_few_places_outside_the_registry() -> None:
    found = _literals()
    assert len(found) <= MOST_LITERALS, "\n".join(found)


def test_the_count_sees_a_name_spelled_out() -> None:
    """The counter is not blind: the registry's own modules, which spell every name, are
    full of them (were EXEMPT dropped, they would count)."""
    text = (ROOT / "loaders/strategies/peers.py").read_text()
    assert '"fastsafetensors-gds"' in text and "fastsafetensors-gds" in STRATEGIES


def test_the_plans_lists_are_read_from_the_declarations() -> None:
    for name in trial_plan.WARM_STRATEGIES:
        assert STRATEGIES[name].warm_trial
    for name in trial_costs.BUFFERED_STRATEGIES:
        assert STRATEGIES[name].reads == "buffered"
    orders = [STRATEGIES[n].doctor_order or 0 for n in trial_plan.CPU_ORDER]
    assert orders == sorted(orders) and trial_plan.CPU_ORDER[0] == trial_plan.DEFAULT
    assert all(STRATEGIES[n].on_gpu_box for n in trial_plan.CPU_ROUTES_ON_GPU)


def test_every_route_is_its_strategys_and_measured_against_a_default_or_its_stacks() -> None:
    for route in ROUTES:
        owner = STRATEGIES[route.strategy]
        assert route in [r for r in ROUTES if r.strategy == owner.name]
        assert owner.fixes, f"{owner.name} has routes but no fix shows them"
        base = STRATEGIES[route.baseline or ""]
        assert base.default_load or route.stack == "transformers", route
        assert base.requires.gpu == owner.requires.gpu
    shown = {n for names in FIX_STRATEGIES.values() for n in names}
    assert shown == {r.strategy for r in ROUTES}


def test_a_strategy_registered_after_the_lists_were_made_is_refused() -> None:
    """Imported before the registry (not named in $LOADSCOPE_STRATEGY_MODULES), a plugin's
    register() would miss the routes and the plan: it is refused, saying how to do it."""
    import pytest

    from loadscope.loaders.strategies import register
    from loadscope.loaders.strategy import Strategy

    class Late(Strategy):
        name = "late-toy"
        summary = "registered too late"

    with pytest.raises(RuntimeError, match="LOADSCOPE_STRATEGY_MODULES"):
        register(Late())
    assert "late-toy" not in STRATEGIES


def test_recommendation_ids_are_spelled_once() -> None:
    """A fix's id (``raise-readahead``, ``copy-to-local-disk``, ...) is spelled in
    ``base/fix_ids.py`` only; ``prewarm`` and ``broadcast`` are also a function, a
    strategy and a rank mode, and are not counted."""
    from loadscope.base import fix_ids

    ids = set(fix_ids.ALL) - {"prewarm", "broadcast"} - set(STRATEGIES)
    assert len(ids) >= 10
    found = []
    for path in sources(EXEMPT):
        if path.name == "fix_ids.py":
            continue
        found += [
            f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and node.value in ids
        ]
    assert not found, "\n".join(found)
