"""Every registered probe, by its key: the built-in ones declared in their modules, and a
user's own from ``$LOADSCOPE_PROBE_MODULES`` (``base/plugins.py``), with the sources such a
module declares (``probes/sources.py``: another kind of storage than files).

Probing runs them (:func:`run_registered`); the text summary, the report's sections, the
JSON schema, the advice's facts and the app's probe view read their declarations
(:class:`~loadscope.probes.spec.ProbeSpec`) from :data:`PROBES`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from loadscope.base.plugins import PROBE_MODULES, import_named
from loadscope.probes import (
    coldreads,
    filestorage,
    fio_probe,
    gpu,
    hfcache,
    localdisk,
    objstore,
    system,
)
from loadscope.probes.result import ProbeResult, Status, run_probe
from loadscope.probes.sources import supports
from loadscope.probes.spec import Lines, ProbeContext, ProbeSpec, status_text

#: Every probe, in the order the probe block shows them: the core's own first (the
#: storage under the files, the machine, the page cache, the cold latency, the
#: throughput, fio: the engine runs them among the model's reads), then the registered
#: ones (the local disks, the Hugging Face cache, the GPUs, a plugin's).
CORE: tuple[ProbeSpec, ...] = (
    filestorage.SPEC,
    system.SPEC,
    filestorage.PAGE_CACHE,
    coldreads.LATENCY,
    coldreads.THROUGHPUT,
    fio_probe.SPEC,
)
PROBES: dict[str, ProbeSpec] = {
    s.key: s for s in (*CORE, localdisk.SPEC, hfcache.SPEC, gpu.SPEC, objstore.SPEC)
}
#: The report's blocks that are no probe's, which no registered probe may take.
RESERVED = frozenset({"schema_version", "target", "budget_s", "elapsed_s", "notes", "stalled"})


def register_probe(spec: ProbeSpec) -> ProbeSpec:
    """Add ``spec`` (a plugin module's one call). Raises ValueError for a key already
    taken, a budget share that takes the registered probes' together over 0.5, or a spec
    with no title."""
    if not spec.key or spec.key in PROBES or spec.key in RESERVED:
        raise ValueError(f"probe key {spec.key!r} is empty or already taken")
    if not 0.0 <= spec.budget_share <= 0.5 or measured_share() + spec.budget_share > 0.5:
        raise ValueError(
            f"probe {spec.key!r}: budget_share {spec.budget_share} would take the registered"
            " probes over half of the measured budget (the core's reads need the rest)"
        )
    if not spec.title:
        raise ValueError(f"probe {spec.key!r} has no title")
    PROBES[spec.key] = spec
    return spec


def measured_share() -> float:
    """The share of the measured budget the registered probes take together."""
    return sum(s.budget_share for s in PROBES.values())


def run_registered(
    context: Callable[[float], ProbeContext],
    measured_s: float,
    say: Callable[[str], None],
    *,
    phase: str,
    skip: dict[str, str] | None = None,
) -> dict[str, ProbeResult[Any]]:
    """The registered probes of ``phase`` ("fixed", "measured" or "after": see
    :attr:`ProbeSpec.phase`), each given its context (``context(seconds)``, its share of
    ``measured_s``); one in ``skip`` is skipped for the reason given there. A probe that
    raises says so in its result, as every probe does."""
    out: dict[str, ProbeResult[Any]] = {}
    for spec in PROBES.values():
        if spec.core or spec.phase != phase:
            continue  # (the core's probes run in their places among the reads)
        ctx = context(spec.budget_share * measured_s)
        if not supports(spec.sources, ctx.source):
            continue  # another kind of storage's probe: not this model's
        if skip and spec.key in skip:
            out[spec.key] = ProbeResult(spec.key, Status.SKIPPED, reason=skip[spec.key])
            continue
        say(spec.title)
        started = time.monotonic()
        result = run_probe(spec.key, functools.partial(spec.run, ctx))
        result.elapsed_s = time.monotonic() - started
        out[spec.key] = result
    return out


def skipped(key: str) -> ProbeResult[Any]:
    return ProbeResult(key, Status.SKIPPED, reason="not probed")


def block_lines(probe: dict[str, Any], *, only_ok: bool = False) -> list[tuple[ProbeSpec, Lines]]:
    """Each registered probe's lines from a probe report's JSON, in the registry's order:
    its own lines when it ran ok, else its status line (none with ``only_ok``); a block
    the report does not hold (an older report, another machine's plugins) or a probe
    that did not apply (skipped: the local disks of a model on one) is left out."""
    out = []
    for spec in PROBES.values():
        if spec.core:
            continue  # (shown by their own declarations: ``ProbeSpec.shown``)
        block = probe.get(spec.key)
        if not isinstance(block, dict) or block.get("status") == "skipped":
            continue
        if block.get("status") == "ok":
            out.append((spec, spec.lines(block)))
        elif not only_ok:
            out.append((spec, [(spec.label or spec.key, status_text(block))]))
    return out


def contributed_facts(probe: dict[str, Any]) -> dict[str, Any]:
    """What the registered probes that ran ok add to the advice's facts, by fact name."""
    out: dict[str, Any] = {}
    for spec in PROBES.values():
        block = probe.get(spec.key)
        if spec.facts is not None and isinstance(block, dict) and block.get("status") == "ok":
            out.update(spec.facts(block))
    return out


# The user's own probes (and the sources they declare), once the built-in ones are in.
import_named(PROBE_MODULES)
