"""Modules a user names to extend loadscope: a strategy or a probe from one module.

``$LOADSCOPE_STRATEGY_MODULES`` and ``$LOADSCOPE_PROBE_MODULES`` each hold module names
(comma-separated, importable from ``sys.path``/``$PYTHONPATH``); the strategies' and the
probes' registries import them once, when they are first imported, and each module
registers what it declares (``loaders.strategies.register``,
``probes.registry.register_probe``). Worker processes inherit the environment, so
a registered strategy runs in the trials' workers too. A module that cannot be imported
is said once on stderr and left out; nothing else stops.
"""

from __future__ import annotations

import importlib
import os
import sys

STRATEGY_MODULES = "LOADSCOPE_STRATEGY_MODULES"
PROBE_MODULES = "LOADSCOPE_PROBE_MODULES"


def named(variable: str) -> list[str]:
    """The module names ``variable`` lists (empty when unset)."""
    return [m.strip() for m in os.environ.get(variable, "").split(",") if m.strip()]


#: The modules that could not be imported, said once each (several places import them).
_FAILED: set[str] = set()


def import_named(variable: str) -> list[str]:
    """Import every module ``variable`` names; returns the ones imported (a module
    already imported costs nothing: any caller may ask first)."""
    imported = []
    for module in named(variable):
        if module in _FAILED:
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - a user's module: said, never a traceback
            _FAILED.add(module)
            sys.stderr.write(f"loadscope: ${variable}: {module}: {type(exc).__name__}: {exc}\n")
            continue
        imported.append(module)
    return imported
