"""The published report schema: generated from the report types, valid for every report
loadscope writes, and the check every reader runs first (issue 20, item 4)."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from loadscope.report.schema import SCHEMA_FILE, SchemaError, check, generate
from tests.bad_reports import write_bad_reports
from tests.conftest import REPO_ROOT, CliRunner

GOLDEN = REPO_ROOT / "tests" / "golden"
GOLDENS = sorted(GOLDEN.glob("*.json"))


def test_the_committed_schema_is_the_one_the_types_give() -> None:
    """Change a report dataclass and this fails until ``python -m loadscope.report.schema
    --write`` is run: the published file cannot drift from the code."""
    assert json.loads(SCHEMA_FILE.read_text()) == generate()
    jsonschema.Draft202012Validator.check_schema(generate())


@pytest.mark.parametrize("path", GOLDENS, ids=[p.name for p in GOLDENS])
def test_every_golden_report_validates(path: Path) -> None:
    doc = json.loads(path.read_text())
    check(doc, "doctor")
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))  # as any other tool would


def _real() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((GOLDEN / "doctor_emulated.json").read_text())
    return doc


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return edit


BAD: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "verdict a list": (_set("verdict", []), "verdict: expected an object, got a list"),
    "probe a number": (_set("probe", 3), "probe: expected an object or null, got an integer"),
    "a trial's seconds a string": (
        _set("bench.trials.2.seconds", "x"),
        "bench.trials[2].seconds: expected a number or null, got a string",
    ),
    "an unknown verdict": (_set("verdict.status", "great"), "verdict.status: expected one of"),
    "an older version": (
        _set("schema_version", 0),
        "written by an older loadscope (schema_version 0); this one reads schema_version 1",
    ),
    "a newer version": (_set("schema_version", 2), "written by a newer loadscope"),
    # Issue 20: what the renderers read without a default passed the schema when missing
    # or mistyped, and ended in "internal error: KeyError" instead of the file's fault.
    "no target": (lambda d: d.pop("target"), "the report: missing 'target'"),
    "a target without its size": (
        lambda d: d["target"].pop("total_bytes"),
        "target: missing 'total_bytes'",
    ),
    "a target spec a number": (_set("target.spec", 5), "target.spec: expected a string"),
    "a hostname a list": (_set("host.hostname", []), "host.hostname: expected a string"),
    "no tool version": (lambda d: d["tool"].pop("version"), "tool: missing 'version'"),
    "a snippet's stack a number": (
        _set("recommendations.0.snippets", [{"stack": 1, "code": ""}]),
        "recommendations[0].snippets[0].stack: expected a string, got an integer",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_report_names_its_first_offending_path(case: str) -> None:
    edit, said = BAD[case]
    doc = _real()
    edit(doc)
    with pytest.raises(SchemaError) as caught:
        check(doc, "doctor")
    assert said in str(caught.value), str(caught.value)


def test_depth_is_bounded_before_anything_recurses() -> None:
    doc = _real()
    deep: Any = []
    for _ in range(200):
        deep = [deep]
    doc["notes_extra"] = deep
    with pytest.raises(SchemaError, match="nested more than 64 levels"):
        check(doc, "doctor")
    check(copy.deepcopy(_real()), "doctor")  # fields a newer loadscope adds are allowed


def test_report_and_compare_refuse_bad_files_in_one_line(cli: CliRunner, tmp_path: Path) -> None:
    """Type-confused, truncated, huge, deeply nested and older reports: one line, exit 5."""
    write_bad_reports(tmp_path)
    said = {
        "confused.json": "verdict: expected an object, got a list",
        "truncated.json": "not a JSON report",
        "deep.json": "nested",
        "older.json": "older loadscope",
        "huge.json": "over the 256 MiB a report can be",
    }
    good = str(GOLDEN / "doctor_emulated.json")
    for name, words in said.items():
        path = str(tmp_path / name)
        for argv in (("report", path), ("report", path, "--text"), ("compare", good, path)):
            result = cli(*argv)
            assert result.code == 5, (argv, result)
            lines = result.err.strip().splitlines()
            assert len(lines) == 1 and words in lines[0] and name in lines[0], (argv, lines)
    assert os.stat(tmp_path / "huge.json").st_blocks == 0
