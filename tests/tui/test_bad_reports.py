"""The app's open and compare refuse a bad report in one notice naming the file (issue 20).

The same five hostile files the CLI's ``report`` and ``compare`` are tested with:
type-confused, truncated, huge (sparse: nothing may be read), deeply nested, and
written by an older loadscope. The app stays up, with nothing shown from the file.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from loadscope.tui.app import LoadscopeApp
from loadscope.tui.screens import CompareScreen
from tests.conftest import REPO_ROOT

GOLDEN = REPO_ROOT / "tests" / "golden" / "doctor_emulated.json"

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
    text = GOLDEN.read_text()
    confused = json.loads(text)
    confused["verdict"] = ["x"]
    older = json.loads(text)
    older["schema_version"] = 0
    bodies = {
        "confused.json": json.dumps(confused),
        "truncated.json": text[: len(text) // 2],
        "deep.json": "[" * 100_000 + "]" * 100_000,
        "older.json": json.dumps(older),
    }
    for name, body in bodies.items():
        (root / name).write_text(body)
    with (root / "huge.json").open("wb") as f:
        f.truncate(300 << 20)
    return root


def _app() -> LoadscopeApp:
    return LoadscopeApp(
        browse_root=REPO_ROOT / "tests" / "golden",
        hf_cache="/nonexistent/loadscope-hf-cache",
        fuse_reason="not in tests",
    )


def _errors(app: LoadscopeApp) -> list[str]:
    return [n.message for n in app._notifications if n.severity == "error"]


@pytest.mark.parametrize("name", sorted(SAID))
def test_open_refuses_a_bad_report_in_one_notice(bad_files: Path, name: str) -> None:
    path = bad_files / name

    async def go() -> None:
        app = _app()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            app.open_report(str(path))
            await pilot.pause()
            errors = _errors(app)
            assert len(errors) == 1, errors
            assert SAID[name] in errors[0] and str(path) in errors[0], errors
            assert "\n" not in errors[0].strip()
            assert app.report is None

    asyncio.run(go())


@pytest.mark.parametrize("name", sorted(SAID))
def test_compare_refuses_a_bad_report_beside_a_good_one(bad_files: Path, name: str) -> None:
    path = bad_files / name

    async def go() -> None:
        app = _app()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            app.compare([str(GOLDEN), str(path)])
            await pilot.pause()
            errors = _errors(app)
            assert len(errors) == 1, errors
            assert SAID[name] in errors[0] and str(path) in errors[0], errors
            assert not isinstance(app.screen, CompareScreen)

    asyncio.run(go())


def test_the_huge_file_was_never_read(bad_files: Path) -> None:
    huge = bad_files / "huge.json"
    assert os.stat(huge).st_blocks == 0
