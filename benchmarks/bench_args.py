"""The arguments the emulated-disk benchmarks share: ``--rounds``, ``--size``, ``--latency-ms``.

Imported by the scripts beside it (``python benchmarks/<script>.py`` puts this folder
on the path).
"""

from __future__ import annotations

import argparse

from loadscope.base.units import parse_size


def emulated_parser(doc: str | None, *, rounds: int, size: str) -> argparse.ArgumentParser:
    """A parser described by ``doc``'s first line, with the shared options and defaults."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    ap.add_argument("--rounds", type=int, default=rounds, help=f"interleaved rounds ({rounds})")
    ap.add_argument("--size", type=parse_size, default=parse_size(size), help=f"model ({size})")
    ap.add_argument(
        "--latency-ms", type=float, default=5.0, help="the emulated disk's latency (5.0)"
    )
    return ap
