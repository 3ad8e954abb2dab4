"""The code stays in small pieces (issue 39): no module over 600 lines, no function over
80, outside the tests, the benchmarks and the fuzzers."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.repo_sources import ROOT, sources

MOST_MODULE_LINES = 600
MOST_FUNCTION_LINES = 80
EXEMPT = ("tests/", "benchmarks/", "fuzz/")


def _sources() -> list[Path]:
    return sources(EXEMPT)


def test_no_module_is_over_600_lines() -> None:
    long = [
        f"{p.relative_to(ROOT)}: {n}"
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MOST_MODULE_LINES
    ]
    assert not long, long


def test_no_function_is_over_80_lines() -> None:
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MOST_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines}")
    assert not long, long


def test_the_checks_see_a_long_module() -> None:
    """Not blind: the sources are found, and the largest is near the limit."""
    sizes = [len(p.read_text().splitlines()) for p in _sources()]
    assert len(sizes) > 100 and max(sizes) > MOST_MODULE_LINES // 2
