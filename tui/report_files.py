"""The files the app writes (``loadscope.tui.report_files``): exported reports, screenshots.

Every write says where it went, or why it could not be written, in a notification:
a failed write never passes in silence.

Owns: the export formats (by suffix) and the screenshot folder.
May import: the core's report renderers (``loadscope.report.html``,
``loadscope.report.markdown``); never the app (its Textual base class is enough).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.app import App

from loadscope.report.html import to_html
from loadscope.report.markdown import to_markdown

#: How each export suffix renders a doctor report.
RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    ".json": lambda d: json.dumps(d, indent=2, default=str),
    ".md": to_markdown,
    ".html": to_html,
}


def screenshot_folder() -> Path:
    """~/Downloads when it exists (Textual's default), else the working directory."""
    downloads = Path.home() / "Downloads"
    return downloads if downloads.is_dir() else Path.cwd()


def export_report(app: App[Any], report: dict[str, Any], path: str) -> Path | None:
    """Write ``report`` to ``path`` in the format its suffix names; the path written, or
    None (the reason was notified)."""
    out = Path(path).expanduser()
    render = RENDERERS.get(out.suffix.lower())
    if render is None:
        app.notify(f"{out.name}: use .json, .md or .html", severity="error")
        return None
    try:
        out.write_text(render(report) + "\n")
    except OSError as exc:
        app.notify(f"cannot write {out}: {exc.strerror}", severity="error")
        return None
    app.notify(f"wrote {out.resolve()}")
    return out


def save_screenshot(app: App[Any], filename: str | None, path: str | None) -> str | None:
    """The app's screen as SVG in the given folder, else ~/Downloads when it exists, else
    the working directory; the path written, or None (the reason was notified)."""
    folder = Path(path).expanduser() if path else screenshot_folder()
    name = filename or f"loadscope-{time.strftime('%Y%m%d-%H%M%S')}.svg"
    out = folder / name
    try:
        out.write_text(app.export_screenshot())
    except OSError as exc:
        app.notify(f"cannot save the screenshot to {out}: {exc.strerror}", severity="error")
        return None
    app.notify(f"saved the screenshot to {out.resolve()}", title="Screenshot")
    return str(out)


def tell_kept(app: App[Any], kept: str | None, why: str) -> None:
    """Say where a finished run's report was kept (the reports folder), or why it was not."""
    if kept:
        app.notify(f"kept as {kept} (loadscope report FILE renders it; o opens it)", title="report")
    elif why:
        app.notify(f"not kept ({why}); e exports it", severity="warning")
