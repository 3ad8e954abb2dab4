"""A probe from one module (the test of issue 39's probe contract): it stats the model's
weight files within its share of the budget and says what it saw. Named in
``$LOADSCOPE_PROBE_MODULES``; not a package module, so nothing imports it otherwise."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from loadscope.probes.registry import register_probe
from loadscope.probes.spec import Lines, ProbeContext, ProbeSpec


@dataclass(frozen=True, slots=True)
class FilesSeen:
    files: int
    bytes_on_disk: int
    #: The seconds it was given (its share of the measured budget).
    given_s: float


def _run(ctx: ProbeContext) -> FilesSeen:
    start = time.monotonic()
    total = 0
    for path, _size in ctx.files:
        total += os.stat(path).st_blocks * 512
        if time.monotonic() - start > max(ctx.seconds, 0.05):
            break
    return FilesSeen(len(ctx.files), total, round(ctx.seconds, 3))


def _lines(block: dict[str, Any]) -> Lines:
    return [("toy", f"toy probe saw {block['files']} file(s), {block['bytes_on_disk']} bytes")]


def _facts(block: dict[str, Any]) -> dict[str, Any]:
    return {"toy_bytes_on_disk": block["bytes_on_disk"]}


SPEC = register_probe(
    ProbeSpec("toy_files", "Toy files", FilesSeen, _run, _lines, budget_share=0.05, facts=_facts)
)
