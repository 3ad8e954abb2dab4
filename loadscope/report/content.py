"""The advice's content, built once from a report's JSON, for every renderer: the terminal
(``diagnosis/doctor_report.py``), Markdown and HTML (through :mod:`sections`) and the app's
Advice view.

A :class:`Fix` is one recommendation as every output shows it: its title and measured (or
estimated) gain, what to do, its cost, the evidence behind it and each route's code
under its own number (:class:`Route`). The
renderers only lay these out; none picks its own routes or formats its own numbers, so the
four show the same values in the same order.

May import: ``loadscope.advice`` (the snippets' headings), ``loadscope.base``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadscope.advice.snippets import snippet_heading, snippets_of
from loadscope.base.units import format_bytes, format_rate, speedup_shown


@dataclass(frozen=True, slots=True)
class Para:
    text: str


@dataclass(frozen=True, slots=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Code:
    text: str
    lang: str = "text"


@dataclass(frozen=True, slots=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class Quote:
    text: str


@dataclass(frozen=True, slots=True)
class Fields:
    """Figures under short labels (``storage``, ``latency``): ``(label, text)`` rows; a row
    with no label goes on with the one above it. The terminal puts the labels in a
    gutter, Markdown and HTML in a column."""

    rows: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Bars:
    """Figures drawn as bars on one scale: ``(label, figure, value, remark)`` rows under
    ``header`` (what the labels and the figures are); ``scale`` is the largest value on
    the chart, which several blocks may share."""

    header: tuple[str, str]
    rows: tuple[tuple[str, str, float, str], ...]
    scale: float


Block = Para | Bullets | Code | Table | Quote | Fields | Bars


@dataclass(frozen=True, slots=True)
class Section:
    """``collapsed``: details a reader opens (the Markdown's ``<details>``); else shown,
    under ``title`` when there is one. ``children`` follow the blocks."""

    id: str
    title: str
    blocks: tuple[Block, ...] = ()
    collapsed: bool = True
    children: tuple[Section, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Route:
    """One stack's code for a fix: its heading (the number and the trial it comes from)
    and the code."""

    stack: str
    heading: str
    code: str
    lang: str
    #: How it applies ("code change", "a flag", "no code change"; "" for a command).
    kind: str = ""
    #: The trial that ran its code ("" for a command that is not a load).
    strategy: str = ""
    #: Its own measured speed-up over its stack's default (None: not measured here).
    speedup: float | None = None
    #: The range its trials give that speed-up (None: one figure, or not measured).
    low: float | None = None
    high: float | None = None

    @property
    def changes_code(self) -> bool:
        """A route the user edits code or a flag for (else it changes nothing they wrote)."""
        return self.kind != "no code change"


@dataclass(frozen=True, slots=True)
class Fix:
    number: int
    id: str
    title: str
    optional: bool
    #: "3.1x" (measured), "1.4x estimated", "0.80x, slower here"; "" without one.
    gain: str
    action: str
    risk: str
    #: The RAM the fix needs ("2 GiB"), "" when none beyond the default.
    ram: str
    confidence: str
    evidence: tuple[str, ...]
    routes: tuple[Route, ...]
    #: The fix the report leads with (the first that is not optional).
    top: bool
    #: The number in ``gain`` (None without one).
    speedup: float | None = None

    @property
    def heading(self) -> str:
        """ "1. Read with many large requests in flight — 3.1x"."""
        tag = " (optional)" if self.optional else ""
        return f"{self.number}. {self.title}{tag}" + (f" — {self.gain}" if self.gain else "")


def lang_of(stack: str) -> str:
    """The code's language for highlighting: a shell line or Python."""
    return "bash" if stack in ("shell", "vllm", "sglang") else "python"


def fixes(doc: dict[str, Any]) -> list[Fix]:
    """Every recommendation of a doctor report (its JSON) as a :class:`Fix`, in rank order."""
    recs = [r for r in doc.get("recommendations") or [] if isinstance(r, dict)]
    top = next((r for r in recs if not r.get("optional")), None)
    return [_fix(i, r, r is top) for i, r in enumerate(recs, 1)]


def _fix(number: int, rec: dict[str, Any], top: bool) -> Fix:
    speedup = rec.get("expected_speedup")
    gain = ""
    if isinstance(speedup, int | float) and speedup:
        shown, slower = speedup_shown(float(speedup))
        how = f" {rec['how']}" if rec.get("how") else ""
        how = how if rec.get("measured", True) else " estimated"
        gain = f"{shown}{how}" + (", slower here" if slower else "")
    ram = rec.get("ram_bytes_needed")
    return Fix(
        number=number,
        id=str(rec.get("id", "")),
        title=str(rec.get("title", "")),
        optional=bool(rec.get("optional")),
        gain=gain,
        action=str(rec.get("action", "")),
        risk=str(rec.get("risk") or ""),
        ram=format_bytes(ram) if isinstance(ram, int) and ram > 0 else "",
        confidence=str(rec.get("confidence") or ""),
        evidence=tuple(evidence_text(e) for e in rec.get("evidence") or [] if isinstance(e, dict)),
        routes=routes(snippets_of(rec)),
        top=top,
        speedup=float(speedup) if isinstance(speedup, int | float) and speedup else None,
    )


def routes(snippets: list[dict[str, Any]]) -> tuple[Route, ...]:
    """Every snippet of a fix, in the advice's order (per stack, the best measured first),
    each under its heading."""
    return tuple(
        Route(
            str(snip.get("stack", "")),
            snippet_heading(snip),
            str(snip.get("code", "")),
            lang_of(str(snip.get("stack", ""))),
            kind=str(snip.get("route") or ""),
            strategy=str(snip.get("strategy") or ""),
            speedup=_number(snip.get("speedup")) if snip.get("strategy") else None,
            low=_number(snip.get("low")),
            high=_number(snip.get("high")),
        )
        for snip in snippets
    )


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def evidence_text(e: dict[str, Any]) -> str:
    """One piece of evidence: "mmap cold: 2.31 s (trials 1, 4)"."""
    value, unit = e.get("value"), str(e.get("unit") or "")
    if unit == "B/s" and isinstance(value, int | float):
        shown = format_rate(value)
    elif isinstance(value, float):
        shown = f"{value:.3g} {unit}".rstrip()
    else:
        shown = f"{value} {unit}".rstrip() if value is not None else "not measured"
    ids = f" (trials {', '.join(map(str, e['trial_ids']))})" if e.get("trial_ids") else ""
    return f"{e.get('what')}: {shown}{ids}"


def fix_blocks(fix: Fix) -> tuple[Block, ...]:
    """A fix's own blocks, in the order every output shows them: what to do, its cost, how
    sure, the evidence (its routes follow, :func:`route_sections`)."""
    blocks: list[Block] = [Para(fix.action)]
    if fix.risk:
        blocks.append(Para(f"**cost/risk:** {fix.risk}"))
    sure = f"**confidence:** {fix.confidence}" if fix.confidence else ""
    if fix.ram:
        sure += ("; " if sure else "") + f"**RAM needed:** {fix.ram}"
    if sure:
        blocks.append(Para(sure))
    if fix.evidence:
        blocks += [Para("**evidence:**"), Bullets(fix.evidence)]
    return tuple(blocks)


def route_sections(fix: Fix) -> tuple[Section, ...]:
    """Each route's code under its heading (the number and its trial)."""
    return tuple(
        Section(
            "route",
            route.heading,
            (Code(route.code, route.lang),),
        )
        for route in fix.routes
    )


def fix_sections(doc: dict[str, Any]) -> list[Section]:
    """Each fix as a section under its heading, its routes as its children: the top fix
    open, the others folded."""
    return [
        Section(f"fix-{f.number}", f.heading, fix_blocks(f), not f.top, route_sections(f))
        for f in fixes(doc)
    ]
