"""What ``doctor`` and ``demo`` print: the answer on one screen by default
(:mod:`loadscope.report.brief`), everything with ``--details``; the full report kept as
JSON in the per-user reports folder either way (:mod:`loadscope.report.store`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from loadscope.base.stack_names import STACKS
from loadscope.cli.common import opt

#: Where a saved report is opened again: by its own path (``--last`` may find another
#: process's report, kept after this one).
OPEN_WITH = (
    "(loadscope report FILE --text shows it in full, loadscope tui --report FILE opens it;"
    " FILE: the path above)"
)

ANSWER_OPTIONS = (
    opt(
        "--details",
        "-v",
        action="store_true",
        help="print the full report (every fix and route, the probes, the trials) instead"
        " of the answer on one screen",
    ),
    opt(
        "--stack",
        action="append",
        choices=STACKS,
        metavar="NAME",
        help="the stack whose code the answer shows (repeatable; default: the ones"
        f" installed here, else safetensors and the shell): {', '.join(STACKS)}; the"
        " trials of the other stacks' routes are then left out (default: all run)",
    ),
)


def keep(doc: dict[str, Any]) -> tuple[Path | None, str]:
    """The report kept in the reports folder: its path, or None and why not."""
    from loadscope.report.store import save

    spec = str((doc.get("target") or {}).get("spec") or "model")
    return save(json.dumps(doc, indent=2, default=str) + "\n", spec)


def answer(
    out: TextIO,
    doc: dict[str, Any],
    args: argparse.Namespace,
    details: Callable[[], str],
    elsewhere: str = "",
) -> None:
    """Keep the report, then print the answer (or ``details()``, the full text, made only
    when asked for); ``elsewhere`` says how to write the report where it was not kept."""
    from loadscope.report.brief import brief_lines, installed_stacks

    path, why = keep(doc)
    saved = str(path) if path else f"not kept ({why})" + (f"; {elsewhere}" if elsewhere else "")
    if args.details:
        out.write(f"{details()}\nfull report: {saved}\n")
        return
    stacks = tuple(dict.fromkeys(args.stack)) if args.stack else installed_stacks()
    opener = OPEN_WITH if path else ""
    lines = brief_lines(doc, stacks, saved, opener, asked=bool(args.stack))
    out.write("\n".join(lines) + "\n")
