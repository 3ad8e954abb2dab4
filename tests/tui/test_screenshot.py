"""The picture of the app in the README and the docs is what the app draws today.

``scripts/screenshot.py`` drives the app headless on a kept ``loadscope demo`` report
(``docs/assets/demo-report.json``) and exports its Advice view as SVG; this test draws it
again and compares it with the committed ``docs/assets/app.svg`` byte for byte.
"""

from __future__ import annotations

import html
import importlib.util
import json

from tests.conftest import REPO_ROOT


def test_the_committed_picture_is_what_the_app_draws() -> None:
    spec = importlib.util.spec_from_file_location(
        "screenshot", REPO_ROOT / "scripts" / "screenshot.py"
    )
    assert spec and spec.loader
    shot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shot)
    drawn = shot.draw()
    assert drawn == shot.OUT.read_text(encoding="utf-8"), (
        "docs/assets/app.svg is stale: python scripts/screenshot.py"
    )
    # the report it draws is a real one, of the published shape, and it shows its verdict
    from loadscope.report.schema import check

    doc = json.loads((REPO_ROOT / shot.REPORT).read_text())
    check(doc, "doctor")
    text = html.unescape(drawn).replace("\xa0", " ")
    assert "FUSE storage, latency-bound" in text and "3 Advice" in text
