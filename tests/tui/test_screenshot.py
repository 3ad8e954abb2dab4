"""The picture of the app in the README and the docs is what the app draws today.

``scripts/screenshot.py`` drives the app headless on a kept ``loadscope demo`` report
(``docs/assets/demo-report.json``) and exports its Advice view as SVG; this test has it
draw the picture again (in a process of its own, without a user's plugin modules) and
compare it with the committed ``docs/assets/app.svg`` byte for byte.
"""

from __future__ import annotations

import html
import json

from tests.conftest import REPO_ROOT, run_script


def test_the_committed_picture_is_what_the_app_draws() -> None:
    done = run_script("screenshot.py", "--check")
    assert done.returncode == 0, "docs/assets/app.svg is stale: python scripts/screenshot.py"
    drawn = (REPO_ROOT / "docs" / "assets" / "app.svg").read_text(encoding="utf-8")
    # the report it draws is a real one, of the published shape, and it shows its verdict
    from loadscope.report.schema import check

    doc = json.loads((REPO_ROOT / "docs" / "assets" / "demo-report.json").read_text())
    check(doc, "doctor")
    text = html.unescape(drawn).replace("\xa0", " ")
    assert "FUSE storage, latency-bound" in text and "3 Advice" in text
