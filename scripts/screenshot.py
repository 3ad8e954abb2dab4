"""Write docs/assets/app.svg, the picture of the app in the README and the docs.

The app is driven headless (Textual's test pilot) at 100x30 on a real report — the one
``loadscope demo`` wrote on the emulated slow network disk, redacted and kept as
``docs/assets/demo-report.json`` — showing its Advice view: the verdict, the ranked
fixes and the top fix's code. The same report and keys give the same SVG, so
``tests/tui/test_screenshot.py`` runs ``--check`` and fails when the committed picture
no longer is what the app draws.

    python scripts/screenshot.py           # write the picture
    python scripts/screenshot.py --check   # exit 1 when it is stale
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

# The picture is of loadscope itself: a user's own strategies and probes stay out of it.
for _plugins in ("LOADSCOPE_STRATEGY_MODULES", "LOADSCOPE_PROBE_MODULES"):
    os.environ.pop(_plugins, None)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "assets" / "app.svg"
REPORT = "docs/assets/demo-report.json"
SIZE = (100, 30)
#: The keys pressed once the report is open: the Advice view.
KEYS = ("3",)


async def _draw() -> str:
    from loadscope.tui.app import LoadscopeApp

    app = LoadscopeApp(
        report=REPORT, browse_root=Path("tests/golden"), hf_cache="/nonexistent", fuse_reason=None
    )
    async with app.run_test(size=SIZE) as pilot:
        for key in KEYS:
            await pilot.press(key)
        await pilot.pause()
        return app.export_screenshot(title="loadscope")


def draw() -> str:
    """The SVG the app draws now (run from the repository root: the report's path as shown)."""
    here = Path.cwd()
    os.chdir(ROOT)
    try:
        return asyncio.run(_draw())
    finally:
        os.chdir(here)


def main(argv: list[str]) -> int:
    svg = draw()
    if "--check" in argv:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != svg:
            print(f"stale: {OUT.relative_to(ROOT)} (python scripts/screenshot.py)", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(svg, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
