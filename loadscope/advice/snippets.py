"""The fix in the user's own stack: one snippet per stack, each with the trial of its own code.

A recommendation says *what* to change; its snippets say *how* in safetensors,
transformers, diffusers, vLLM, SGLang and the shell. Each loading snippet names the
strategy whose trial ran that very code (the routes are declared on the strategies,
``loaders/strategies``, gathered as ``ROUTES``: vLLM's prefetch flag is the
``vllm-prefetch`` trial, ``loadscope.load_file`` the ``api`` trial, "run
``loadscope warm`` first" the ``prewarm`` trial, ``disable_mmap``/``eager`` the
``fullread`` trial), and carries that trial's measured speed-up over the default
load — or "not measured here" with the reason, never another strategy's number.
Snippets that are commands rather than loads (re-measure, copy, dmesg) carry no
number at all. Paths in the code are the user's own, quoted for the language. A
library's lines are shown only for a folder saved for it (``Measured.layout``: no
``DiffusionPipeline`` for a language model), and each runs as printed
(``tests/unit/test_hf_routes_run.py`` executes every transformers and diffusers line).

This module only formats: the numbers come from a :class:`Measured` (the advice's
facts) and the routes from the strategies' declarations, so it imports nothing above
the loaders.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from loadscope.base import fix_ids
from loadscope.base.hf_layout import UNKNOWN
from loadscope.base.stack_names import STACKS as STACK_NAMES
from loadscope.base.units import speedup_shown
from loadscope.loaders.strategies import DEFAULT, FIX_STRATEGIES, ROUTES, STRATEGIES
from loadscope.loaders.strategy import StackRoute

#: The stacks a load snippet is written for, in the order they are shown (named in the
#: base, where the command line reads them without importing this module).
STACKS = STACK_NAMES


@dataclass(slots=True)
class Snippet:
    """Code for one stack, and what it rests on."""

    stack: str
    code: str
    #: The trial strategy that ran this code; None for a command that is not a load.
    strategy: str | None = None
    #: How it applies: "code change", "a flag", "no code change"; and in a few words.
    route: str = ""
    what: str = ""
    #: Measured cold speed-up over ``baseline`` (the stack's default load), and its trials.
    speedup: float | None = None
    baseline: str = DEFAULT
    trial_ids: list[int] = field(default_factory=list)
    #: "not measured here: ..." when this snippet's strategy has no cold trial.
    note: str = ""
    #: Set when the number is a stand-in's: what was timed instead of the snippet's call.
    proxy: str = ""
    #: How the number was obtained and how far it holds (``advice/facts.py``'s
    #: ``ratio_terms``): "measured ±8%", "estimated ±15%", "unsteady: 3.0x to 6.8x ...".
    how: str = "measured"
    #: The speed-up's range over its trials (None: not measured).
    low: float | None = None
    high: float | None = None
    #: With N local ranks (the doctor's rank round): how many times the node reads the
    #: model with this route, and its slowest rank against every rank's default load.
    ranks: str = ""

    def label(self) -> str:
        """The line shown under the stack's name: the number, or why there is none."""
        return label_of(asdict(self))


class Measured(Protocol):
    """What the snippets need from the trials (the advice's facts implement it)."""

    def speedup(self, strategy: str, cache: str = "cold", base_name: str = DEFAULT) -> float | None:
        """Cold speed-up of ``strategy`` over mmap, None when not measured."""
        ...

    def cold_trial_ids(self, strategy: str) -> list[int]:
        """The cold trials of ``strategy``."""
        ...

    def why_not_measured(self, strategy: str) -> str | None:
        """Why ``strategy`` has no cold trial here (skipped, failed), if known."""
        ...

    #: Which library the model's folder is saved for (``base/hf_layout.py``): a route for
    #: one library is shown only for its folders. Read with ``""`` (unknown) as default.
    layout: str

    def how_obtained(self, strategy: str, base_name: str = DEFAULT) -> str:
        """ "measured ±E%", "estimated ±E%" (a fit's), or "unsteady: L to H"."""
        ...

    def speedup_range(self, strategy: str, base_name: str = DEFAULT) -> tuple[float, float] | None:
        """The speed-up's range over its trials (None: not measured)."""
        ...

    def ranks_note(self, mode: str | None) -> str:
        """What the rank round measured for ``mode`` with N ranks, said in one clause
        ("" when it did not run)."""
        ...


#: A stack's route, declared on the strategy whose trial runs its code.
Route = StackRoute


def load_snippets(
    fix: str, measured: Measured, model: str, *, pages_kept: bool = True
) -> list[Snippet]:
    """Every stack's routes for ``fix``, measured ones first (fastest first) within a stack;
    none that warms the page cache first where the mount keeps no pages (``pages_kept``
    False: the load after the warm reads the storage all the same)."""
    wanted = FIX_STRATEGIES[fix]
    out: list[Snippet] = []
    for stack in STACKS:
        routes = [
            r
            for r in ROUTES
            if r.stack == stack
            and r.strategy in wanted
            and _applies(r, measured)
            and (pages_kept or not warms_first(r.strategy))
        ]
        made = [_filled(r, measured, model) for r in routes]
        # Fastest first; among equals (those not measured), in the doctor's order.
        made.sort(key=lambda s: (-(s.speedup or 0.0), _order(s.strategy)))
        out.extend(made)
    return out


class AdviceFacts(Measured, Protocol):
    """What :func:`fix_snippets` reads of the advice's facts beside the trials."""

    model_path: str
    keeps_pages: bool | None


def fix_snippets(fix: str, f: AdviceFacts) -> list[Snippet]:
    """:func:`load_snippets` for the advice: at the model's path, and no warm-first route
    where its mount keeps no pages."""
    return load_snippets(fix, f, f.model_path, pages_kept=f.keeps_pages is not False)


def _order(strategy: str | None) -> int:
    known = STRATEGIES.get(strategy or "")
    return known.doctor_order or 1000 if known else 1000


def offered(snippets: list[Snippet]) -> tuple[list[Snippet], list[Snippet]]:
    """``snippets`` split into the ones a fix may offer and the routes measured slower
    than their stack's default here (never offered as a fix; the details list them)."""
    slower = [s for s in snippets if s.speedup is not None and s.speedup < 1.0]
    return [s for s in snippets if s not in slower], slower


def _applies(route: Route, measured: Measured) -> bool:
    """A generic stand-in only without the stack's own baseline trial (a route measured
    against that baseline, when it did not run, is listed as not measured, with why, beside
    the stand-in); a library's route only for the folders its code runs on (a diffusers
    line never for a language model's folder)."""
    if route.layouts and getattr(measured, "layout", UNKNOWN) not in route.layouts:
        return False
    return not (route.unless and measured.speedup(route.unless, base_name=route.unless))


def warms_first(strategy: str | None) -> bool:
    """Whether ``strategy`` reads the files into the page cache before it loads them
    (``loadscope warm`` first): no help on a mount that keeps no pages."""
    known = STRATEGIES.get(strategy or "")
    return known is not None and fix_ids.PREWARM in known.fixes


def _filled(route: Route, measured: Measured, model: str) -> Snippet:
    baseline = route.baseline or DEFAULT
    speedup = measured.speedup(route.strategy, base_name=baseline)
    note = ""
    proxy = route.proxy
    if speedup is not None and not route.proxy_number:
        # A stand-in that is no user's of this stack: its number as context, not its own.
        note, proxy = _stand_in_note(route, measured, speedup), ""
        speedup = None
    elif speedup is None:
        note = _not_measured_note(route, measured, baseline)
    return Snippet(
        stack=route.stack,
        code=code_for(route, model),
        strategy=route.strategy,
        route=route.route,
        what=route.what,
        speedup=speedup,
        baseline=baseline,
        proxy=proxy,
        how=measured.how_obtained(route.strategy, baseline) if speedup else "measured",
        low=span[0] if (span := _span(measured, route.strategy, baseline, speedup)) else None,
        high=span[1] if span else None,
        trial_ids=measured.cold_trial_ids(route.strategy) if speedup is not None else [],
        note=note,
        ranks=measured.ranks_note(_rank_mode(route.strategy)),
    )


def _stand_in_note(route: Route, measured: Measured, speedup: float) -> str:
    """ "not measured here: its own trial (hf-pretrained) did not run (why); the same
    reads timed with load_file: 2.5x"."""
    why = measured.why_not_measured(route.unless or "")
    why = f" ({why.removeprefix('skipped: ')})" if why else ""
    shown, _ = speedup_shown(speedup)
    return (
        f"not measured here: its own trial ({route.unless}) did not run{why};"
        f" {route.proxy.split(';')[0]}: {shown}"
    )


def _not_measured_note(route: Route, measured: Measured, baseline: str) -> str:
    """Why ``route`` has no number: its trial's reason, its baseline's, or how to run it."""
    base_why = (
        measured.why_not_measured(baseline)
        if baseline != DEFAULT and measured.speedup(baseline, base_name=baseline) is None
        else None
    )
    why = (
        measured.why_not_measured(route.strategy)
        or (f"its baseline {baseline}: {base_why}" if base_why else None)
        or (f"run {route.measure_with}" if route.measure_with else None)
    )
    if why and why.startswith("not measured"):
        return why
    return f"not measured here: {why}" if why else "not measured here"


def _span(
    measured: Measured, strategy: str, baseline: str, speedup: float | None
) -> tuple[float, float] | None:
    """The speed-up's range over its trials, when it has a number."""
    return measured.speedup_range(strategy, baseline) if speedup is not None else None


def _rank_mode(strategy: str) -> str | None:
    known = STRATEGIES.get(strategy)
    return known.rank_mode if known else None


def code_for(route: Route, model: str) -> str:
    """``route``'s code for ``model``: its path quoted for Python or the shell, the folder
    where the stack takes one."""
    return route.template.format(
        py=repr(model),
        sh=shlex.quote(model),
        dir_py=repr(folder_of(model)),
        dir_sh=shlex.quote(folder_of(model)),
    )


def folder_of(model: str) -> str:
    """The folder (or repo id) of ``model``: from_pretrained, ``vllm serve`` and
    ``--model-path`` take a folder, not an index or weight file."""
    name = model.rsplit("/", 1)[-1].lower()
    if name.endswith((".index.json", ".safetensors", ".bin", ".pt", ".pth")) and "/" in model:
        return model.rsplit("/", 1)[0] or "/"
    return model


def command(stack: str, code: str) -> Snippet:
    """A snippet that is a command or a config change, not a load: it carries no number."""
    return Snippet(stack=stack, code=code)


def commands(pairs: Iterable[tuple[str, str]]) -> list[Snippet]:
    return [command(stack, code) for stack, code in pairs]


def snippets_of(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """A report's snippets as a list of dicts, also from reports written before the list
    (where ``snippets`` was a ``{stack: code}`` map carrying no numbers)."""
    raw = rec.get("snippets") or []
    if isinstance(raw, dict):
        return [
            {"stack": str(k), "code": str(v), "strategy": None, "legacy": True}
            for k, v in raw.items()
        ]
    return [s for s in raw if isinstance(s, dict)]


def label_of(snippet: dict[str, Any]) -> str:
    """The line shown under a snippet (also one read back from a report): its measured
    speed-up over its stack's default and its trials, why it was not measured, or
    nothing for a command."""
    if snippet.get("legacy"):
        return "not measured here (a report from before per-stack trials)"
    if not snippet.get("strategy"):
        return ""
    speedup = snippet.get("speedup")
    if not isinstance(speedup, int | float):
        note = str(snippet.get("note") or "not measured here")
        return note + (f"; {snippet['ranks']}" if snippet.get("ranks") else "")
    found = snippet.get("trial_ids") or []
    ids = ", ".join(f"#{i}" for i in found)
    trials = "trials" if len(found) > 1 else "trial"
    what = f"{snippet['strategy']}, {trials} {ids}" if ids else str(snippet["strategy"])
    base = snippet.get("baseline") or DEFAULT
    against = "the default load" if base == DEFAULT else f"{base} cold"
    shown, slower = speedup_shown(speedup)
    later = " (slower than the default here)" if slower else ""
    proxy = f"; {snippet['proxy']}" if snippet.get("proxy") else ""
    how = str(snippet.get("how") or "measured")
    ranks = f"; {snippet['ranks']}" if snippet.get("ranks") else ""
    return f"{shown} vs {against}{later}, {how} ({what}{proxy}){ranks}"


def snippet_heading(snippet: dict[str, Any]) -> str:
    """ "vllm (a flag) - 3.1x vs the default load, measured ±8% (vllm-prefetch, trial #7)"."""
    route = f" ({snippet['route']})" if snippet.get("route") else ""
    label = label_of(snippet)
    return f"{snippet['stack']}{route}" + (f" - {label}" if label else "")
