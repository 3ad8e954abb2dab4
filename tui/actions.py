"""The app's actions as data (``loadscope.tui.actions``): one table, :data:`ACTIONS`.

Each row gives an action its key and footer label, its command-palette entry and its
availability rule (why it cannot run now, or None when it can). The app's
``BINDINGS``, its palette commands, its greyed footer keys and the "why not" said when
a greyed key is pressed anyway are all generated from that table, never restated.

Owns: :class:`AppAction`, the rules and the generators of bindings, palette commands
and key explainers.
May import: Textual's binding and command types; never the app: the rules read its state
through :class:`AppState`, which the app satisfies.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.widgets import TabbedContent, Tabs


class AppState(Protocol):
    """What the rules read of the app (``loadscope.tui.app.LoadscopeApp``)."""

    @property
    def running(self) -> bool: ...
    @property
    def report(self) -> dict[str, Any] | None: ...
    @property
    def last_request(self) -> object | None: ...
    def can_profile(self) -> bool: ...
    def apply_plan(self) -> tuple[str | None, str]: ...
    def model_spec(self) -> str: ...
    def highlighted_fix(self) -> object | None: ...
    def explain(self, action: str) -> None: ...


#: An availability rule: why the action cannot run now, or None when it can.
Rule = Callable[[AppState], str | None]


@dataclass(frozen=True, slots=True)
class AppAction:
    """One of the app's actions: its key and footer label, its command-palette entry
    (``title`` and ``help``; none when ``title`` is empty), its availability rule (none:
    always available) and whether the footer shows its key."""

    key: str
    action: str
    label: str
    title: str = ""
    help: str = ""
    why_not: Rule | None = None
    show: bool = True


_BUSY = "a run is in progress: stop it first (s)"


def _idle(app: AppState) -> str | None:
    return _BUSY if app.running else None


def _stop_rule(app: AppState) -> str | None:
    return None if app.running else "nothing is running"


def _profile_rule(app: AppState) -> str | None:
    if not app.running:
        return "no trial is running: f profiles the running trial's worker"
    return None if app.can_profile() else "between two trials: press f again soon"


def _rerun_rule(app: AppState) -> str | None:
    if app.running:
        return _BUSY
    return None if app.last_request is not None else "nothing to re-run yet (n)"


def _copy_rule(app: AppState) -> str | None:
    if app.highlighted_fix() is None:
        return "no recommendation is highlighted (tab 3, Advice)"
    return None


def _apply_rule(app: AppState) -> str | None:
    if app.running:
        return _BUSY
    kind, why = app.apply_plan()
    return why if kind is None else None


def _time_rule(app: AppState) -> str | None:
    if app.running:
        return _BUSY
    spec = app.model_spec()
    if not spec:
        return "no model yet: n diagnoses one first"
    if spec.startswith("synthetic:"):
        return "a synthetic model is gone after its diagnosis: time your command on yours"
    if spec.startswith("<") or (os.path.isabs(spec) and not os.path.exists(spec)):
        return f"this report's model ({spec}) is not on this machine"
    return None


def _export_rule(app: AppState) -> str | None:
    return None if app.report is not None else "no report yet: n diagnoses, o opens one"


#: The one declaration of the app's actions, in footer order: the bindings, the palette,
#: the greyed keys and the "why not" feedback all come from it.
ACTIONS = (
    AppAction(
        "n", "new", "New", "New diagnosis", "pick a model and run probes, trials, advice", _idle
    ),
    AppAction("s", "stop", "Stop", "Stop the run", "kill the running worker", _stop_rule),
    AppAction("r", "rerun", "Re-run", "Re-run", "the same diagnosis again", _rerun_rule),
    AppAction(
        "f",
        "profile",
        "Profile",
        "Profile the running trial",
        "py-spy dump and record",
        _profile_rule,
    ),
    AppAction(
        "c", "copy", "Copy", "Copy the snippets", "of the highlighted recommendation", _copy_rule
    ),
    AppAction(
        "a",
        "apply",
        "Apply",
        "Apply the fix",
        "warm the page cache or copy to a local disk, after a confirmation",
        _apply_rule,
    ),
    AppAction("e", "export", "Export", "Export the report", "JSON, Markdown or HTML", _export_rule),
    AppAction(
        "t",
        "time_command",
        "Time",
        "Time your command",
        "your own load, cold, as it is and after each no-code fix (loadscope time)",
        _time_rule,
        show=False,  # the footer is full at 80 columns: the palette and the key reach it
    ),
    AppAction("o", "open_report", "Open", "Open a saved report", "a doctor JSON report", _idle),
    AppAction("m", "compare", "Compare", "Compare reports", "side by side, outliers marked", _idle),
    AppAction("1", "tab('probes')", "Probes", show=False),
    AppAction("2", "tab('bench')", "Bench", show=False),
    AppAction("3", "tab('advice')", "Advice", show=False),
    AppAction("question_mark", "toggle_keys", "Keys"),
    AppAction("escape", "hide_keys", "Close keys", show=False),
)
_RULES = {a.action: a.why_not for a in ACTIONS if a.why_not is not None}


def bindings() -> list[BindingType]:
    """The app's key bindings, one per row of :data:`ACTIONS`."""
    return [Binding(a.key, a.action, a.label, show=a.show) for a in ACTIONS]


def why_not(app: AppState, action: str) -> str | None:
    """Why ``action`` cannot run now (None: it can), by its rule in :data:`ACTIONS`."""
    rule = _RULES.get(action)
    return rule(app) if rule else None


def palette_commands(app: App[Any]) -> Iterator[SystemCommand]:
    """The command-palette entries of the rows that have one."""
    for a in ACTIONS:
        if a.title:
            yield SystemCommand(a.title, a.help, getattr(app, f"action_{a.action}"))


def _explainer(action: str) -> Callable[[AppState], None]:
    def key_handler(self: AppState) -> None:
        self.explain(action)

    return key_handler


def install_explainers(app_class: type[Any]) -> None:
    """Give ``app_class`` a ``key_<name>`` handler for each key with a rule: Textual calls it
    when no enabled binding took the key, that is when the action's key is greyed."""
    for a in ACTIONS:
        if a.why_not is not None:
            setattr(app_class, f"key_{a.key}", _explainer(a.action))


def switch_tab(app: App[Any], tab: str) -> None:
    """Show ``tab`` (keys 1, 2, 3). The tab bar takes the focus first: a focused widget in
    the pane being hidden handed the focus to its neighbour there, which took the tab
    back (3 after Tab into the Benchmark charts stayed on Benchmark)."""
    tabs = app.query_one("#tabs", TabbedContent)
    app.set_focus(tabs.query_one(Tabs))
    tabs.active = tab
