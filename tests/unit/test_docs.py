"""The documentation is the code's: generated pages current, every page reachable, the
README short and pointing at pages that exist.

``scripts/docs_gen.py`` writes the command reference from the argparse definitions, the
schema page from ``report.schema.json`` and the routes page from the strategies'
declarations; this test regenerates them and fails on any difference, so a new option,
report field or route cannot reach ``main`` without its page. ``mkdocs build --strict``
(in ``scripts/test``) checks the links and anchors of the whole site.
"""

from __future__ import annotations

import argparse
import re

import pytest

from tests.conftest import REPO_ROOT, run_script

DOCS = REPO_ROOT / "docs"


@pytest.mark.parametrize("page", ["cli.md", "schema.md", "routes.md"])
def test_the_generated_pages_are_what_the_code_says(page: str) -> None:
    done = run_script("docs_gen.py", "--check", page)
    assert done.returncode == 0, f"docs/reference/{page} is stale: python scripts/docs_gen.py"


def test_the_cli_page_has_every_command_and_option() -> None:
    from loadscope.cli import COMMANDS

    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    for command in COMMANDS:
        assert f"## loadscope {command.name}\n" in page, command.name
        for argument in command.arguments:
            if argument.kwargs.get("help") == argparse.SUPPRESS:
                continue  # internal (emulate --serve-here): not in --help either
            for flag in argument.flags:
                if flag.startswith("-"):
                    assert f"`{flag}`" in page, (command.name, flag)


def test_the_schema_page_has_every_report_and_field() -> None:
    import json

    schema = json.loads((REPO_ROOT / "loadscope/report/report.schema.json").read_text())
    page = (DOCS / "reference" / "schema.md").read_text(encoding="utf-8")
    for name, node in schema["$defs"].items():
        assert f"\n## {name}\n" in page, name
        for field in node.get("properties", {}):
            assert f"| `{field}` |" in page, (name, field)


def test_every_page_is_in_the_navigation_and_every_nav_entry_exists() -> None:
    nav = re.findall(r":\s*([\w/.-]+\.md)\s*$", (REPO_ROOT / "mkdocs.yml").read_text(), re.M)
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages


def test_the_readme_is_short_and_its_links_land() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150
    # the two commands, the picture and the answer as it prints
    assert "bash scripts/setup && .venv/bin/loadscope demo\n" in readme
    assert "\nbash scripts/test\n" in readme
    assert "![" in readme and "docs/assets/app.svg" in readme
    assert "\nverdict: " in readme and "\nfull report: " in readme
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        assert (REPO_ROOT / target).exists(), target


def test_the_ci_command_is_the_readme_test_command_and_builds_the_site() -> None:
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    script = (REPO_ROOT / "scripts" / "test").read_text()
    assert "bash scripts/test" in ci
    assert "mkdocs build --strict" in script


def test_the_one_screen_answer_in_the_readme_fits_the_screen() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    answer = readme.split("```text\nverdict: ", 1)[1].split("```", 1)[0]
    from loadscope.report.brief import LINES, height

    assert height(("verdict: " + answer).rstrip("\n").splitlines()) <= LINES
