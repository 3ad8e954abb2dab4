"""Each module's "May import:" line is checked against its imports (issue 50).

A module's docstring says what it may import; a module without the line follows its
package's (``__init__.py``). Named modules and folders are ``loadscope.x.y`` in double
backquotes or ``:mod:``, a folder by its short name (``engine``), "everything in the
core" every folder but the app's. Imports from the module's own folder are checked
only where its line names modules of that folder; a package imported to reach one of
its modules counts as that module. The layers and the cycles are import-linter's
(pyproject.toml); this keeps the prose a reader trusts true.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.repo_sources import ROOT

#: Folder at the repository root -> the package it is (pyproject's ``package-dir``).
FOLDERS = {
    "loadscope": "loadscope",
    "base": "loadscope.base",
    "probes": "loadscope.probes",
    "loaders": "loadscope.loaders",
    "tui": "loadscope.tui",
}
CORE = ("actions", "advice", "cli", "diagnosis", "engine", "model", "report", "tools")
CORE += ("loaders", "probes", "base")
_NAMED = re.compile(r"(?:``|:mod:`~?)(loadscope(?:\.\w+)*)")
_SHORT = re.compile(r"``(" + "|".join((*CORE, "tui", "api")) + r")``")


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = [*rel.parts[1:-1], rel.stem]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([FOLDERS[rel.parts[0]], *parts])


def may_import_line(source: str) -> str | None:
    doc = ast.get_docstring(ast.parse(source)) or ""
    found = re.search(r"May import:(.*?)(?:\n\s*\n|$)", doc, re.S)
    return found.group(1) if found else None


def allowed_by(line: str) -> set[str]:
    if "everything in the core" in line:
        line += "".join(f" ``{room}``" for room in CORE)
    return set(_NAMED.findall(line)) | {f"loadscope.{s}" for s in _SHORT.findall(line)}


def imports_of(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The loadscope modules ``source`` imports, at any depth (inside functions and
    ``TYPE_CHECKING`` too: a type is a dependency of the prose all the same)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = name.split(".")[: None if is_package else -1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known}
    mine = {m for m in out if m.split(".")[0] == "loadscope"}
    return {m for m in mine if not any(o.startswith(m + ".") for o in mine)}


def drift(sources: dict[str, tuple[Path, str]]) -> list[str]:
    """Every import a module's (or its package's) line does not allow."""
    known = set(sources)
    found = []
    for name, (path, text) in sorted(sources.items()):
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        line, owner = may_import_line(text), package
        while line is None and owner in sources:
            line = may_import_line(sources[owner][1])
            owner = owner.rpartition(".")[0]
        if line is None:
            found.append(f"{name}: no 'May import:' line, nor its package's")
            continue
        allowed = allowed_by(line)
        room = ".".join(name.split(".")[:2])
        names_room = any(a.startswith(room + ".") for a in allowed)
        for imp in sorted(imports_of(text, name, path.name == "__init__.py", known)):
            if imp == room or (imp.startswith(room + ".") and not names_room):
                continue
            if not any(imp == a or imp.startswith(a + ".") for a in allowed):
                found.append(f"{path.relative_to(ROOT)}: imports {imp}, not in its May import")
    return found


def _repo_sources() -> dict[str, tuple[Path, str]]:
    out = {}
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                out[module_name(path)] = (path, path.read_text())
    return out


def test_every_modules_may_import_line_matches_its_imports() -> None:
    sources = _repo_sources()
    assert len(sources) > 150
    assert drift(sources) == []


def test_the_check_sees_an_import_the_line_does_not_name() -> None:
    sources = _repo_sources()
    path, text = sources["loadscope.report.markdown_blocks"]
    assert drift({"loadscope.report.markdown_blocks": (path, text)}) == []
    added = text + "\nfrom loadscope.engine.bench import Trial\n"
    assert drift({"loadscope.report.markdown_blocks": (path, added)}) == [
        "loadscope/report/markdown_blocks.py: imports loadscope.engine.bench, not in its May import"
    ]
    # A folder's own module, where the line names that folder's modules.
    added = text + "\nfrom loadscope.report.sections import sections\n"
    assert len(drift({"loadscope.report.markdown_blocks": (path, added)})) == 1
    gone = text.replace("May import:", "May not say:")
    assert drift({"loadscope.report.markdown_blocks": (path, gone)}) == [
        "loadscope.report.markdown_blocks: no 'May import:' line, nor its package's"
    ]
