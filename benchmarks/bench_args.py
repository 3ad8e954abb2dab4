"""What the emulated-disk benchmarks share: ``--rounds``, ``--size``, ``--latency-ms``, and
a model's files evicted and verified cold before a timed run.

Imported by the scripts beside it (``python benchmarks/<script>.py`` puts this folder
on the path).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loadscope.base.units import parse_size
from loadscope.probes.pagecache import ColdCache


def emulated_parser(doc: str | None, *, rounds: int, size: str) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first line, with the shared options and defaults."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    ap.add_argument("--rounds", type=int, default=rounds, help=f"interleaved rounds ({rounds})")
    ap.add_argument("--size", type=parse_size, default=parse_size(size), help=f"model ({size})")
    ap.add_argument(
        "--latency-ms", type=float, default=5.0, help="the emulated disk's latency (5.0)"
    )
    return ap


def evict_model(model: Path) -> None:
    """Every file of ``model``'s folder out of the page cache, verified; exits naming a
    file that stays resident (a timed run would not be cold)."""
    for f in model.glob("*"):
        if f.is_file():
            ev = ColdCache().evict(f)
            if not ev.verified:
                sys.exit(f"{f}: not cold: {ev.note}")
