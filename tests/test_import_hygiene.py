"""The engine is headless and layered: proven in fresh interpreters and with import-linter.

``tui`` -> core (``loadscope``) -> ``loaders`` -> ``probes``; nothing imports upward and
nothing outside ``loadscope.tui`` ever imports Textual (harlequin's import-hygiene test).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import tomllib

from tests.conftest import REPO_ROOT, run_here

_CONFIG = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
_PACKAGE_DIRS: dict[str, str] = _CONFIG["tool"]["setuptools"]["package-dir"]


def _engine_modules() -> list[str]:
    names = []
    for package in _CONFIG["tool"]["setuptools"]["packages"]:
        if package.startswith("loadscope.tui"):
            continue
        prefix = max((p for p in _PACKAGE_DIRS if package.startswith(p)), key=len)
        folder = REPO_ROOT / _PACKAGE_DIRS[prefix] / package[len(prefix) + 1 :].replace(".", "/")
        for py in sorted(folder.glob("*.py")):
            if py.name != "__main__.py":
                names.append(package if py.stem == "__init__" else f"{package}.{py.stem}")
    return names


def _tui_modules_after(modules: list[str]) -> list[str]:
    """What of Textual and ``loadscope.tui`` a fresh interpreter holds once it has imported
    ``modules`` (and their error output, should an import fail)."""
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = [m for m in sys.modules"
        " if m.split('.')[0] == 'textual' or m.startswith('loadscope.tui')]\n"
        "print(bad)\n"
        "raise SystemExit(bool(bad))\n"
    )
    proc = run_here([sys.executable, "-c", code], timeout=None)
    if proc.returncode == 0:
        return []
    return [proc.stdout.strip() or proc.stderr[-500:]]


def test_no_engine_module_imports_textual() -> None:
    """Every module outside ``loadscope.tui``, imported together in one fresh interpreter,
    leaves no Textual module behind: then none of them imports it (one interpreter, not
    one per module: ~2 s instead of ~50). On a failure each module is tried alone, so
    that the message names the ones that pull it in."""
    modules = _engine_modules()
    assert len(modules) > 100, modules  # the walk found the packages
    if not _tui_modules_after(modules):
        return
    culprits = {m: bad for m in modules if (bad := _tui_modules_after([m]))}
    pytest.fail(f"modules that pull in Textual or loadscope.tui: {culprits}")


def test_import_linter_contracts(tmp_path: Path) -> None:
    """Run import-linter on the installed layout (the mapped folders inside ``loadscope/``)."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    site = tmp_path / "site"
    for package, folder in _PACKAGE_DIRS.items():
        shutil.copytree(
            REPO_ROOT / folder,
            site / package.replace(".", "/"),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    proc = run_here(
        [lint, "--no-cache", "--config", str(REPO_ROOT / "pyproject.toml")],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        timeout=None,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "broken" in proc.stdout and " 0 broken" in proc.stdout


def test_every_core_module_has_a_layer() -> None:
    """A new core module must be placed in the layers contract, or import-linter ignores it."""
    contracts = _CONFIG["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    named = {part.strip() for layer in layers for part in layer.replace(":", "|").split("|")}
    core = REPO_ROOT / "loadscope"
    modules = {p.stem for p in core.glob("*.py") if p.stem != "__init__"}
    modules |= {p.parent.name for p in core.glob("*/__init__.py")}
    modules |= {k.split(".")[1] for k in _PACKAGE_DIRS if k != "loadscope"}
    assert modules - named == set()


def test_the_layers_are_folders() -> None:
    """Issue 18: every layer below the entry points is a package (a folder), none a module
    listed as an exception, and every package says what it owns and may import."""
    contracts = _CONFIG["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    entry = {"__main__", "api"}
    core = REPO_ROOT / "loadscope"
    mapped = {k.split(".")[1]: REPO_ROOT / v for k, v in _PACKAGE_DIRS.items() if k != "loadscope"}
    for layer in layers:
        for part in (p.strip() for p in layer.split("|")):
            if part in entry:
                continue
            folder = mapped.get(part, core / part)
            init = folder / "__init__.py"
            assert init.is_file(), f"layer {part!r} is not a package folder"
            doc = init.read_text(encoding="utf-8").split('"""')
            assert len(doc) >= 3 and "May import" in doc[1], f"{init}: no 'May import' docstring"
    # Nothing but the entry points (and the package's own __init__) at the core's top.
    assert {p.stem for p in core.glob("*.py")} == entry | {"__init__"}
