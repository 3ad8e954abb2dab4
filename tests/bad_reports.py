"""The five hostile report files every reader of a doctor report meets (issue 20).

Type-confused, truncated, huge (sparse: nothing may be read), deeply nested, and
written by an older loadscope: the CLI's ``report`` and ``compare`` and the app's
open and compare are each tested with the same files.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO_ROOT

GOLDEN = REPO_ROOT / "tests" / "golden" / "doctor_emulated.json"


def write_bad_reports(root: Path) -> None:
    """Write ``confused.json``, ``truncated.json``, ``deep.json``, ``older.json`` and
    ``huge.json`` into ``root``, each made from the golden report."""
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
        f.truncate(300 << 20)  # sparse: nothing is written, and nothing should be read
