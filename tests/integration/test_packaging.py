"""A built wheel, a strict editable install and the bare source checkout import the same modules.

``probes/``, ``loaders/`` and ``tui/`` sit at the repository root but install as
``loadscope.probes``, ``loadscope.loaders`` and ``loadscope.tui`` (setuptools
``package-dir``). Each way of importing must resolve every module to the same
source, ship the ``py.typed`` markers, and run the console script.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tests.conftest import REPO_ROOT, run_here

pytestmark = pytest.mark.integration

_PROBE = r"""
import hashlib, importlib, importlib.resources, importlib.util, json, sys
mods = json.loads(sys.argv[1])
out = {}
for name in mods:
    # find_spec locates the module's source without running it: these venvs have no
    # dependencies (Textual, torch), only the question of where each module comes from.
    spec = importlib.util.find_spec(name)
    out[name] = hashlib.sha256(open(spec.origin, "rb").read()).hexdigest()
for pkg in ("loadscope", "loadscope.probes", "loadscope.loaders", "loadscope.tui"):
    out[pkg + "/py.typed"] = importlib.resources.files(pkg).joinpath("py.typed").is_file()
out["tui/app.tcss"] = importlib.resources.files("loadscope.tui").joinpath("app.tcss").is_file()
import loadscope
out["__file__"] = loadscope.__file__
print(json.dumps(out))
"""


def _package_dirs() -> dict[str, str]:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return config["tool"]["setuptools"]["package-dir"]


def _folder_of(package: str) -> Path:
    """Where setuptools finds ``package``: its longest mapped prefix in package-dir."""
    dirs = _package_dirs()
    prefix = max((p for p in dirs if package == p or package.startswith(p + ".")), key=len)
    rest = package[len(prefix) + 1 :]
    return REPO_ROOT / dirs[prefix] / rest.replace(".", "/")


def _modules() -> list[str]:
    """Every module of every package pyproject.toml declares, from the source tree."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    names = []
    for package in config["tool"]["setuptools"]["packages"]:
        for py in sorted(_folder_of(package).glob("*.py")):
            if py.name == "__main__.py":
                continue
            names.append(package if py.stem == "__init__" else f"{package}.{py.stem}")
    return names


def _source_tree(dest: Path) -> Path:
    """A copy of the files git would ship (tracked plus new, not ignored)."""
    listed = run_here(["git", "ls-files", "-co", "--exclude-standard"], timeout=None)
    if listed.returncode != 0:
        pytest.skip("git is needed to list the source tree")
    for rel in listed.stdout.splitlines():
        src = REPO_ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def _build(tree: Path, hook: str, config: dict[str, str] | None = None) -> Path:
    out = tree / "dist"
    code = (
        "import sys, json; from setuptools import build_meta as b;"
        f"print(b.{hook}(sys.argv[1], json.loads(sys.argv[2])))"
    )
    proc = run_here(
        [sys.executable, "-c", code, str(out), json.dumps(config or {})], cwd=tree, timeout=None
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / proc.stdout.strip().splitlines()[-1]


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    return path / "bin" / "python"


def _install(python: Path, wheel: Path) -> None:
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def _probe(python: Path, cwd: Path) -> dict[str, object]:
    proc = run_here([str(python), "-c", _PROBE, json.dumps(_modules())], cwd=cwd, timeout=None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_package_dir_mapping_matches_the_runtime_shim() -> None:
    from loadscope import _MAPPED_FOLDERS

    expected = {f"loadscope.{k}": v for k, v in _MAPPED_FOLDERS.items()}
    assert {k: v for k, v in _package_dirs().items() if k != "loadscope"} == expected


def test_wheel_editable_and_checkout_import_alike(tmp_path: Path) -> None:
    tree = _source_tree(tmp_path / "src")
    wheel = _build(tree, "build_wheel")
    editable = _build(tree, "build_editable", {"editable_mode": "strict"})
    wheel_py = _venv(tmp_path / "wheel-env")
    editable_py = _venv(tmp_path / "editable-env")
    _install(wheel_py, wheel)
    _install(editable_py, editable)
    neutral = tmp_path / "elsewhere"
    neutral.mkdir()

    from_wheel = _probe(wheel_py, neutral)
    from_editable = _probe(editable_py, neutral)
    # The bare checkout: a Python with nothing installed, run from the root (as `python -m pytest`).
    from_checkout = _probe(_venv(tmp_path / "bare-env"), tree)

    assert "site-packages" in str(from_wheel.pop("__file__"))
    assert "__editable__" in str(from_editable.pop("__file__"))
    assert str(from_checkout.pop("__file__")) == str(tree / "loadscope" / "__init__.py")
    assert from_wheel == from_editable == from_checkout
    expected = {
        m: hashlib.sha256((REPO_ROOT / _file_of(m)).read_bytes()).hexdigest() for m in _modules()
    }
    assert {k: v for k, v in from_wheel.items() if "/" not in k} == expected
    assert all(v is True for k, v in from_wheel.items() if k.endswith(("py.typed", ".tcss")))

    script = wheel_py.with_name("loadscope")
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("loadscope ")
    proc = run_here([str(wheel_py), "-m", "loadscope", "--help"], cwd=neutral, timeout=None)
    assert proc.returncode == 0 and "inspect" in proc.stdout


def _file_of(module: str) -> Path:
    folder = _folder_of(module)
    if (folder / "__init__.py").is_file():
        return folder / "__init__.py"
    return folder.parent / f"{folder.name}.py"
