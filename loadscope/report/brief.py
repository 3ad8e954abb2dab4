"""The answer on one screen: what ``doctor`` and ``demo`` print by default.

Within :data:`LINES` lines after wrapping at :data:`WIDTH` columns: the verdict with its
number; the top fix with its number and, for the stacks the user runs (detected from
what is installed, or ``--stack``; at most two, the others named with the ``--stack``
that shows them), that stack's route under its own measured number and its code;
where the top fix has no route of that stack, the best fix that needs no code change
(readahead, ``loadscope warm``, a copy) with its number; at most two other fixes, one
line each; one line of evidence (storage class, cold latency, best read); and where
the full report is. ``--details`` prints everything (``diagnosis/doctor_report.py``).
Built from the report's JSON and the content model (:mod:`content`), so it says what
the full report says, shorter.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import textwrap
from typing import Any

from loadscope.base.units import format_rate, format_us
from loadscope.report.content import Fix, Route, fixes
from loadscope.report.sections import probe_best_read

WIDTH = 80
LINES = 24
#: The stacks a user may run, by how they are found: an importable package, or a command.
DETECTED = {"vllm": "vllm", "sglang": "sglang", "transformers": "transformers"}
DETECTED["diffusers"] = "diffusers"
#: What is shown when no stack is found: the library call and the shell.
FALLBACK = ("safetensors", "shell")
#: Fixes that need no code change, shown for a stack the top fix has no route for.
NO_CODE_FIXES = ("raise-readahead", "prewarm", "copy-local")
SHOWN_STACKS = 2


def installed_stacks() -> tuple[str, ...]:
    """The stacks importable here (found, not imported) or on PATH, in the order shown."""
    found = []
    for stack, module in DETECTED.items():
        if importlib.util.find_spec(module) is not None or shutil.which(stack):
            found.append(stack)
    return tuple(found)


def height(lines: list[str]) -> int:
    """The rows ``lines`` take on an 80-column terminal (a long line wraps)."""
    return sum(max(1, math.ceil(len(line) / WIDTH)) for line in lines)


def _wrap(text: str, indent: str = "", first: str = "") -> list[str]:
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=first,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,  # a path stays whole, to copy
    ) or [first.rstrip()]


def _one_line(text: str) -> str:
    return text if len(text) <= WIDTH else text[: WIDTH - 1] + "…"


def _route_block(route: Route) -> list[str]:
    return [
        *_wrap(f"{route.heading}:", "    ", "  "),
        *(f"    {c}" for c in route.code.splitlines()),
    ]


def _for_stack(fix: Fix, stack: str) -> Route | None:
    return next((r for r in fix.routes if r.stack == stack), None)


def _stack_blocks(found: list[Fix], top: Fix, stacks: tuple[str, ...]) -> list[list[str]]:
    """Per stack shown: its route in the top fix, else the best no-code fix's."""
    blocks = []
    for stack in stacks:
        route = _for_stack(top, stack)
        if route is not None:
            blocks.append(_route_block(route))
            continue
        other = next(
            (
                (f, r)
                for f in found
                if f.id in NO_CODE_FIXES
                for r in (_for_stack(f, stack) or _for_stack(f, "shell"),)
                if r is not None
            ),
            None,
        )
        if other is not None:
            fix, r = other
            gain = f" ({fix.gain})" if fix.gain else ""
            head = _wrap(
                f"{stack}: the top fix has no route here; {fix.title}{gain}:", "    ", "  "
            )
            blocks.append([*head, *(f"    {c}" for c in r.code.splitlines())])
    return blocks


def _evidence(doc: dict[str, Any]) -> str:
    probe = doc.get("probe") or {}
    files = probe.get("files") or []
    mount = (files[0].get("mount") or {}) if files else {}
    parts = [f"{mount.get('storage_class', 'unknown')} storage"]
    lat = probe.get("latency") or {}
    if lat.get("status") == "ok" and lat.get("p50_us") is not None:
        parts.append(f"cold 4 KiB read p50 {format_us(lat['p50_us'])}")
    best = probe_best_read(probe)
    if best:
        parts.append(f"best read {format_rate(best)}")
    return "evidence: " + "; ".join(parts)


def brief_lines(
    doc: dict[str, Any], stacks: tuple[str, ...], saved: str, how_to_open: str = ""
) -> list[str]:
    """The one-screen answer for a doctor report's JSON; ``stacks`` the user's (empty:
    :data:`FALLBACK`), ``saved`` where the full report is (or why it is not)."""
    verdict = doc.get("verdict") or {}
    head = _wrap(f"verdict: {verdict.get('headline', '')}", "  ")
    found = fixes(doc)
    top = next((f for f in found if f.top), None)
    tail = ["", *_wrap(_evidence(doc), "  ")]
    tail.append(f"full report: {saved}")  # one line, to copy (a terminal wraps it)
    if how_to_open:
        tail += _wrap(how_to_open, "  ")
    if top is None:
        tips = [_one_line(f"optional: {f.heading.split('. ', 1)[-1]}") for f in found][:2]
        return head + ([""] if tips else []) + tips + tail
    chosen = stacks or FALLBACK
    shown, named = chosen[:SHOWN_STACKS], chosen[SHOWN_STACKS:]
    fix_head = ["", *_wrap(f"fix: {top.heading.split('. ', 1)[-1]}", "  ")]
    blocks = _stack_blocks(found, top, shown)
    if named:
        others = ", ".join(named)
        blocks.append(_wrap(f"(also installed: {others}; --stack NAME shows its code)", "  ", "  "))
    also = [_one_line(f"also: {f.heading}") for f in found if f is not top][:2]
    # Within the screen: drop the second stack's block, then the other fixes, as needed.
    while True:
        lines = head + fix_head + [line for b in blocks for line in b] + also + tail
        if height(lines) <= LINES:
            return lines
        if also:
            also.pop()
        elif len(blocks) > 1:
            blocks.pop()
        else:
            return [*lines[: LINES - 1], _one_line("(more with --details)")]
