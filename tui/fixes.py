"""The fixes the app hands over or applies (``loadscope.tui.fixes``): copy and apply.

Copy sends the highlighted recommendation's snippets to the terminal's clipboard (OSC
52), or shows them to select by hand when that is known to fail. Apply warms the
page cache or copies the model to a local disk, through the engine, after a
confirmation; this module decides what applies, words the confirmation and the
outcome, and builds the job.

Owns: the copy and apply decisions and texts. The app runs the jobs and the dialogs.
May import: the core's advice (``loadscope.advice.rules``, ``loadscope.advice.snippets``),
its engine-process jobs (``loadscope.diagnosis.engine_process``), the local disks' block
(``loadscope.probes.localdisk``), ``loadscope.base``, the screens and the views; never the
app (its Textual base class is enough).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from textual.app import App

from loadscope.advice.rules import copy_destination
from loadscope.advice.snippets import snippet_heading
from loadscope.base import fix_ids
from loadscope.base.units import format_bytes, format_rate
from loadscope.diagnosis.engine_process import copy_job, warm_job
from loadscope.probes.localdisk import fastest_disk
from loadscope.tui.screens import ConfirmScreen, TextScreen
from loadscope.tui.views import APPLICABLE


def clipboard_refused() -> str | None:
    """Why an OSC 52 copy cannot reach the clipboard, when that can be known: inside tmux
    with ``set-clipboard off`` (tmux then drops the sequence). Other terminals give no
    answer to OSC 52, so None means "sent", not "copied"."""
    if not os.environ.get("TMUX"):
        return None
    try:
        out = subprocess.run(
            ["tmux", "show-options", "-gv", "set-clipboard"],
            capture_output=True,
            text=True,
            timeout=2,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode == 0 and out.stdout.strip() == "off":
        return "tmux has set-clipboard off (tmux set -g set-clipboard on allows it)"
    return None


def copy_snippets(
    app: App[Any], rec: dict[str, Any], snippets: list[dict[str, Any]], choice: int
) -> None:
    """Copy snippet ``choice`` of ``rec`` (every snippet when negative) and say what
    happened: sent over OSC 52, or shown in a dialog when the clipboard refuses it."""
    chosen = snippets if choice < 0 else [snippets[choice]]
    text = "\n\n".join(f"# {snippet_heading(s)}\n{s['code']}" for s in chosen)
    app.copy_to_clipboard(text)
    what = "every snippet" if choice < 0 else f"the {chosen[0]['stack']} snippet"
    refused = clipboard_refused()
    if not refused:
        app.notify(
            f"sent {what} to the terminal's clipboard (OSC 52); a terminal"
            " that ignores OSC 52 keeps nothing: select it in the Advice view"
        )
        return
    app.notify(
        f"{what} of '{rec['title']}' was not copied: {refused}; it is shown to select by hand",
        severity="warning",
        timeout=10,
    )
    app.push_screen(
        TextScreen(
            f"{what} of '{rec['title']}'",
            text,
            "select it with the mouse (Shift+drag in most terminals); Escape closes",
        )
    )


def apply_plan(rec: dict[str, Any] | None, source_spec: str) -> tuple[str | None, str]:
    """(the fix's kind, the model spec) for the highlighted recommendation ``rec`` of a
    report about ``source_spec``, or (None, why it cannot be applied)."""
    if rec is None or rec["id"] not in APPLICABLE:
        return None, "the highlighted recommendation is not one loadscope applies"
    spec = source_spec
    if not spec or spec.startswith("synthetic:"):
        return None, "the synthetic model of this run was removed when it ended"
    source = (rec.get("apply") or {}).get("source")
    if source:
        spec = str(source)  # the advice's own source: one name everywhere
    return ("warm" if rec["id"] == fix_ids.PREWARM else "copy"), spec


def destination(rec: dict[str, Any] | None, report: dict[str, Any] | None, spec: str) -> str:
    """Where the copy fix proposes to put ``spec``: the advice's own destination, else a
    folder on the report's fastest local disk, else under the home directory."""
    dest = ((rec or {}).get("apply") or {}).get("dest")
    if dest:
        return str(dest)  # the one the advice's snippet names
    best = fastest_disk(((report or {}).get("probe") or {}).get("local_disks"))
    # A report from before recommendations carried their apply: the same rule.
    return copy_destination(best[0] if best else str(Path.home()), spec)


def confirmation(
    kind: str, spec: str, rec: dict[str, Any] | None, report: dict[str, Any] | None
) -> ConfirmScreen:
    """The dialog that asks before fix ``kind`` is applied to ``spec`` (the copy's asks
    for its destination too)."""
    size = format_bytes(int(((report or {}).get("target") or {}).get("total_bytes", 0)))
    if kind == "warm":
        return ConfirmScreen(
            "Warm the page cache",
            f"Read {size} of {spec} into the page cache with 8 parallel readers, so the"
            " next load is served from RAM. Reads only: nothing is written, moved or"
            " deleted. Refused if the model does not fit in available memory.",
        )
    return ConfirmScreen(
        "Copy the model to a local disk",
        f"Copy the weight files and the config/tokenizer files of {spec} ({size}) to"
        " the directory below. Free space is checked first; each file is written under"
        " a temporary name, fsynced, read back and compared with the source, then"
        " renamed. The source is never touched; an existing different file stops it.",
        destination(rec, report, spec),
    )


def fix_job(kind: str, spec: str, value: str) -> tuple[dict[str, Any], str]:
    """The engine job of a confirmed fix (``value``: the copy's destination) and what it
    is doing, for its progress line."""
    if kind == "warm":
        return warm_job(spec), "warming"
    return copy_job(spec, value), f"copying to {value}"


def progress_text(applying: str | None, done: int, total: int, seconds: float) -> str:
    """The progress line of the fix being applied."""
    rate = f", {format_rate(done / seconds)}" if seconds > 0 else ""
    return f"{applying}: {format_bytes(done)} of {format_bytes(total)}{rate} (s stops)"


def outcome_text(result: dict[str, Any]) -> str:
    """What an applied fix did, from the engine's ``apply`` result."""
    if result["kind"] == "warm":
        after = [f["after"] for f in result["files"]]
        known = [a for a in after if a is not None]
        resident = f"{min(known):.0%}" if len(known) == len(after) else "unknown"
        # The model's size, not the bytes read (re-reads of pages evicted meanwhile).
        model = result.get("model_bytes", result["bytes_read"])
        read = result["bytes_read"]
        extra = f" (read {format_bytes(read)})" if read > model else ""
        return (
            f"warmed {format_bytes(model)}{extra} in {result['seconds']:.2f} s;"
            f" every file now at least {resident} resident"
        )
    copied = sum(1 for f in result["files"] if f["status"] == "copied")
    kept = len(result["files"]) - copied
    dest = result["dest"]
    return (
        f"copied {copied} file(s) to {dest} ({kept} already there), verified;"
        f' load it with from_pretrained("{dest}") or vllm serve {dest}'
    )
