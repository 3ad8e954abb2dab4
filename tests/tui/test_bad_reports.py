"""The app's open and compare refuse a bad report in one notice naming the file (issue 20).

The same five hostile files the CLI's ``report`` and ``compare`` are tested with:
type-confused, truncated, huge (sparse: nothing may be read), deeply nested, and
written by an older loadscope. The app stays up, with nothing shown from the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from loadscope.tui.app import LoadscopeApp
from loadscope.tui.screens import CompareScreen
from tests.bad_reports import GOLDEN, write_bad_reports
from tests.tui.harness import drive, notices

SAID = {
    "confused.json": "verdict: expected an object, got a list",
    "truncated.json": "not a JSON report",
    "deep.json": "nested",
    "older.json": "written by an older loadscope (schema_version 0)",
    "huge.json": "over the 256 MiB a report can be",
}


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad reports")
    write_bad_reports(root)
    return root


@pytest.mark.parametrize("name", sorted(SAID))
def test_open_refuses_a_bad_report_in_one_notice(bad_files: Path, name: str) -> None:
    path = bad_files / name

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        app.open_report(str(path))
        await pilot.pause()
        errors = _one_error_naming(app, path, name)
        assert "\n" not in errors[0].strip()
        assert app.report is None

    drive(steps)


@pytest.mark.parametrize("name", sorted(SAID))
def test_compare_refuses_a_bad_report_beside_a_good_one(bad_files: Path, name: str) -> None:
    path = bad_files / name

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        app.compare([str(GOLDEN), str(path)])
        await pilot.pause()
        _one_error_naming(app, path, name)
        assert not isinstance(app.screen, CompareScreen)

    drive(steps)


def _one_error_naming(app: LoadscopeApp, path: Path, name: str) -> list[str]:
    """The app's error notices, checked to be one that names ``path`` and what is wrong."""
    errors = notices(app, "error")
    assert len(errors) == 1, errors
    assert SAID[name] in errors[0] and str(path) in errors[0], errors
    return errors


def test_the_huge_file_was_never_read(bad_files: Path) -> None:
    huge = bad_files / "huge.json"
    assert os.stat(huge).st_blocks == 0
