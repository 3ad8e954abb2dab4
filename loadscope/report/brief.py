"""The answer on one screen: what ``doctor`` and ``demo`` print by default.

Within :data:`LINES` lines after wrapping at :data:`WIDTH` columns: the verdict; for the
stacks the user runs (detected from what is installed, or ``--stack``; at most two, the
others named with the ``--stack`` that shows them), the stack's best measured route that
changes code and its best that changes nothing, across every fix, the higher number
first, each under its own number with its code (a tie said as one where their trials'
ranges overlap; the top fix's route that has no number here named with why); without a
measured route, the top fix's route, else the best fix that needs no code change
(readahead, ``loadscope warm``, a copy). The verdict carries the top fix's number only
where its route is printed below. Then at most two other fixes, one line each; one line
of evidence (storage class, cold latency, best read); and where the full report is.
``--details`` prints everything (``diagnosis/doctor_report.py``).
Built from the report's JSON and the content model (:mod:`content`), so it says what
the full report says, shorter.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import textwrap
from typing import Any

from loadscope.base import fix_ids
from loadscope.base.units import format_rate, format_us, speedup_shown
from loadscope.engine.phases import PhaseTable, answer
from loadscope.probes.filestorage import storage_class_of
from loadscope.probes.iobench import latency_p50
from loadscope.probes.sources import source_title
from loadscope.probes.spec import block_of
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
NO_CODE_FIXES = (fix_ids.RAISE_READAHEAD, fix_ids.PREWARM, fix_ids.COPY_TO_LOCAL_DISK)
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


def _no_code_fix(found: list[Fix], stack: str) -> tuple[Fix, Route] | None:
    """The best fix that needs no code change and helps here (not optional, not measured
    slower), with its code for ``stack`` or the shell."""
    for fix in found:
        if fix.id not in NO_CODE_FIXES or fix.optional or "slower" in fix.gain:
            continue
        route = _for_stack(fix, stack) or _for_stack(fix, "shell")
        if route is not None:
            return fix, route
    return None


def best_routes(found: list[Fix], stack: str) -> list[tuple[Fix, Route]]:
    """``stack``'s best measured route that changes code (or a flag) and its best that
    changes nothing the user wrote, across every fix that is not optional, the higher
    number first: each with its own number, never another route's."""
    measured = sorted(
        (
            (fix, r)
            for fix in found
            if not fix.optional
            for r in fix.routes
            if r.stack == stack and r.speedup is not None and r.speedup > 1.0
        ),
        key=lambda fr: -(fr[1].speedup or 0.0),
    )
    code = next((fr for fr in measured if fr[1].changes_code), None)
    none = next((fr for fr in measured if not fr[1].changes_code), None)
    return [fr for fr in measured if fr is code or fr is none]


def _tie(chosen: list[tuple[Fix, Route]]) -> bool:
    """Whether the two routes' ranges over their trials overlap: no winner between them."""
    if len(chosen) < 2:
        return False
    (_, a), (_, b) = chosen
    lo_a, hi_a = a.low or a.speedup or 0.0, a.high or a.speedup or 0.0
    lo_b, hi_b = b.low or b.speedup or 0.0, b.high or b.speedup or 0.0
    return lo_a <= hi_b and lo_b <= hi_a


def _unmeasured_line(top: Fix, stack: str, shown: list[Route]) -> list[str]:
    """The top fix's route for ``stack`` that has no number here (skipped at this budget,
    failed), of the kind no route shown is (a code change, or none), with why: named,
    not dropped."""
    kinds = {r.changes_code for r in shown if r.stack == stack}
    route = next(
        (
            r
            for r in top.routes
            if r.stack == stack and r.kind and r.speedup is None and r.changes_code not in kinds
        ),
        None,
    )
    if route is None:
        return []
    return _wrap(f"not measured: {route.heading}", "    ", "  ")


def _stack_blocks(
    found: list[Fix], top: Fix, stacks: tuple[str, ...]
) -> tuple[list[tuple[str, list[str]]], set[str], list[Route]]:
    """Per stack: its best measured routes (:func:`best_routes`); without any, its route
    in the top fix, else the best no-code fix's. Also the ids of the fixes shown (not
    listed again) and the routes shown."""
    blocks = []
    used: set[str] = set()
    shown: list[Route] = []
    for stack in stacks:
        chosen = best_routes(found, stack)
        if chosen:
            lines = []
            if _tie(chosen):
                lines += _wrap(
                    f"{stack}: a tie (their trials' ranges overlap); either helps:", "    ", "  "
                )
            for fix, best in chosen:
                used.add(fix.id)
                shown.append(best)
                lines += _route_block(best)
            blocks.append((stack, lines + _unmeasured_line(top, stack, shown)))
            continue
        route = _for_stack(top, stack)
        if route is not None:
            shown.append(route)
            blocks.append((stack, _route_block(route)))
            continue
        other = _no_code_fix(found, stack)
        if other is not None:
            fix, r = other
            used.add(fix.id)
            shown.append(r)
            gain = f" ({fix.gain})" if fix.gain else ""
            head = _wrap(
                f"{stack}: no route of this fix; instead, {fix.title}{gain}:", "    ", "  "
            )
            blocks.append((stack, [*head, *(f"    {c}" for c in r.code.splitlines())]))
    return blocks, used, shown


def _top_route_shown(top: Fix, shown: list[Route]) -> bool:
    """Whether a route printed carries the top fix's own number (its best route's)."""
    if top.speedup is None:
        return False
    said = speedup_shown(top.speedup)[0]
    return any(
        r in top.routes and r.speedup is not None and speedup_shown(r.speedup)[0] == said
        for r in shown
    )


def _clipped(block: list[str], rows: int) -> list[str]:
    """``block`` within ``rows`` screen rows, its last line saying the rest is cut."""
    out: list[str] = []
    for line in block:
        if height([*out, line]) > rows - 1:
            return [*out, "    ... (the rest: in the full report)"]
        out.append(line)
    return out


def _evidence(doc: dict[str, Any]) -> str:
    probe = doc.get("probe") or {}
    parts = [f"{storage_class_of(probe) or 'unknown'} storage"]
    if title := source_title(probe.get("target")):
        parts = [f"the model is in {title}"]
    if (p50 := latency_p50(block_of(probe.get("latency")))) is not None:
        parts.append(f"cold 4 KiB read p50 {format_us(p50)}")
    best = probe_best_read(probe)
    if best:
        parts.append(f"best read {format_rate(best)}")
    return "evidence: " + "; ".join(parts)


def _your_command(doc: dict[str, Any]) -> list[str]:
    """``doctor --cmd``: the user's own command in a line: its cold time as it is and
    the best no-code fix's ratio, or why it was not timed (with its last output line)."""
    user = doc.get("user_command")
    if not isinstance(user, dict):
        return []
    variants = [v for v in user.get("variants") or [] if isinstance(v, dict)]
    base = next((v for v in variants if v.get("name") == "as-is"), None)
    if base is None:
        return []
    median = base.get("median_seconds")
    if not isinstance(median, int | float):
        runs = [r for r in base.get("runs") or [] if isinstance(r, dict)]
        failed = next((r for r in runs if r.get("reason")), {})
        why = str(base.get("skipped") or failed.get("reason") or "not timed")
        last = next((str(t) for t in reversed(failed.get("tail") or []) if str(t).strip()), "")
        return [f"your command: {why}" + (f" (its last line: {last.strip()})" if last else "")]
    said = f"your command, cold: {median:.3g} s as it is"
    ratios = [
        (float(v["speedup"]), str(v.get("name")))
        for v in variants
        if v.get("name") != "as-is" and isinstance(v.get("speedup"), int | float)
    ]
    if ratios:
        ratio, name = max(ratios)
        fix = _USER_FIXES.get(name, name)
        said += f"; {ratio:.2f}x with {fix}" if ratio >= 1.1 else "; no no-code fix sped it up"
    return [said]


#: ``loadscope time``'s no-code fixes as the one-screen answer names them.
_USER_FIXES = {
    "readahead": "the readahead raised",
    "warm": "loadscope warm first",
    "copy": "a local copy",
}


def _profile(doc: dict[str, Any]) -> list[str]:
    """``doctor --cmd ... --profile``: what the user's start-up by phase means for the load
    fixes (the sentences every view of the table says)."""
    phases = (doc.get("user_command") or {}).get("phases")
    return answer(PhaseTable.from_dict(phases)) if isinstance(phases, dict) else []


def brief_lines(
    doc: dict[str, Any],
    stacks: tuple[str, ...],
    saved: str,
    how_to_open: str = "",
    *,
    asked: bool = False,
) -> list[str]:
    """The one-screen answer for a doctor report's JSON; ``stacks`` the user's (empty:
    :data:`FALLBACK`; ``asked``: named with --stack, else the ones installed here),
    ``saved`` where the full report is (or why it is not)."""
    verdict = doc.get("verdict") or {}
    head = _wrap(f"verdict: {verdict.get('headline', '')}", "  ")
    found = fixes(doc)
    top = next((f for f in found if f.top), None)
    tail = ["", *_wrap(_evidence(doc), "  ")]
    # What the user asked for by name and did not get (--bucket not timed): said here too.
    asked_for = [str(f) for f in doc.get("failures") or [] if str(f).startswith("--bucket ")]
    tail += [line for f in asked_for for line in _wrap(f"note: {f}", "  ")]
    tail += [line for s in _your_command(doc) for line in _wrap(s, "  ")]
    tail += [line for s in _profile(doc) for line in _wrap(f"your start: {s}", "  ")]
    tail.append(f"full report: {saved}")  # one line, to copy (a terminal wraps it)
    if how_to_open:
        tail += _wrap(how_to_open, "  ")
    if top is None:
        tips = [_one_line(f"optional: {f.heading.split('. ', 1)[-1]}") for f in found][:2]
        return head + ([""] if tips else []) + tips + tail
    chosen = stacks or FALLBACK
    blocks, used, shown = _stack_blocks(found, top, chosen[:SHOWN_STACKS])
    if not blocks and not asked:
        # None of the stacks found here has a route of this fix (a bucket's fix is the
        # servers' flag): the stacks it has routes for, rather than no code at all.
        chosen = tuple(dict.fromkeys(r.stack for r in top.routes))
        blocks, used, shown = _stack_blocks(found, top, chosen[:SHOWN_STACKS])
    # The verdict's number is the top route's: said only where that route is printed
    # below; else the problem alone, and each stack's routes carry their own numbers.
    if not _top_route_shown(top, shown) and verdict.get("problem"):
        head = _wrap(f"verdict: {verdict['problem']}", "  ")
        fix_head = [""]
    else:
        fix_head = ["", *_wrap(f"fix: {top.heading.split('. ', 1)[-1]}", "  ")]
        used.add(top.id)
    named = list(chosen[SHOWN_STACKS:])
    # The stacks not shown, as the user knows them: named with --stack, or found here.
    which = "asked for" if asked else "installed"
    also = [_one_line(f"also: {f.heading}") for f in found if f.id not in used]
    also = also[:2]
    # Within the screen, the tail always kept: drop the other fixes, then the second
    # stack's block (named with the others), then cut the first block's code.
    while True:
        hint = (
            _wrap(f"(also {which}: {', '.join(named)}; --stack NAME shows its code)", "  ", "  ")
            if named
            else []
        )
        body = [line for _, b in blocks for line in b] + hint
        lines = head + fix_head + body + also + tail
        if height(lines) <= LINES:
            return lines
        if also:
            also.pop()
        elif len(blocks) > 1:
            named.insert(0, blocks.pop()[0])
        else:
            room = LINES - height(head + fix_head + hint + tail)
            first = _clipped(blocks[0][1], room) if blocks and room > 1 else []
            return head + fix_head + first + hint + tail
