"""The loadscope app: onboarding, probes, live benchmark and advice over the same engine.

The engine runs in a child process (``loadscope.diagnosis.engine_process``: no GIL shared
with the UI); one thread worker reads its JSON-line events and posts them as
typed messages. Stopping closes the child's stdin, which sets the engine's
cancel event and kills the running trial worker's process group within ~0.1 s.
The UI thread owns every buffer the views draw, and redraws the live charts at
5 Hz.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Header, TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from loadscope.advice.rules import copy_destination
from loadscope.advice.snippets import snippet_heading, snippets_of
from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.base.units import format_bytes
from loadscope.diagnosis.doctor import DEFAULT_BUDGET_S, load_report
from loadscope.diagnosis.engine_process import EngineProcess, copy_job, job_for, warm_job
from loadscope.diagnosis.session import SessionRequest
from loadscope.report.compare import compare, row_of
from loadscope.report.html import to_html
from loadscope.report.markdown import to_markdown
from loadscope.tools.emulator import EmulatorSettings, fuse_unavailable_reason
from loadscope.tui.messages import (
    ApplyFinished,
    ApplyProgress,
    ProbesReady,
    RunCancelled,
    RunFailed,
    RunFinished,
    StepStarted,
    TrialBegan,
    TrialEnded,
    TrialSample,
    message_from_wire,
)
from loadscope.tui.screens import (
    CompareScreen,
    ConfirmScreen,
    OnboardingScreen,
    ProfileScreen,
    PromptScreen,
    SnippetPickScreen,
    TextScreen,
)
from loadscope.tui.views import APPLICABLE, AdviceView, BenchView, ProbesView

#: After SIGTERM or SIGHUP, how long the graceful stop may take before the app exits anyway.
STOP_GRACE_S = 3.0

#: Redraws per second of the live charts (the engine samples faster; stale samples drop).
REDRAW_HZ = 5


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


def screenshot_folder() -> Path:
    """~/Downloads when it exists (Textual's default), else the working directory."""
    downloads = Path.home() / "Downloads"
    return downloads if downloads.is_dir() else Path.cwd()


@dataclass(frozen=True, slots=True)
class AppAction:
    """One of the app's actions: its key and footer label, its command-palette entry, and
    its availability rule (why it cannot run now, or None when it can)."""

    key: str
    action: str
    label: str
    title: str
    help: str
    why_not: Callable[[LoadscopeApp], str | None]


_BUSY = "a run is in progress: stop it first (s)"


def _idle(app: LoadscopeApp) -> str | None:
    return _BUSY if app.running else None


def _stop_rule(app: LoadscopeApp) -> str | None:
    return None if app.running else "nothing is running"


def _profile_rule(app: LoadscopeApp) -> str | None:
    if not app.running:
        return "no trial is running: f profiles the running trial's worker"
    return None if app.can_profile() else "between two trials: press f again soon"


def _rerun_rule(app: LoadscopeApp) -> str | None:
    if app.running:
        return _BUSY
    return None if app.last_request is not None else "nothing to re-run yet (n)"


def _copy_rule(app: LoadscopeApp) -> str | None:
    if app.query_one(AdviceView).highlighted() is None:
        return "no recommendation is highlighted (tab 3, Advice)"
    return None


def _apply_rule(app: LoadscopeApp) -> str | None:
    if app.running:
        return _BUSY
    kind, why = app.apply_plan()
    return why if kind is None else None


def _export_rule(app: LoadscopeApp) -> str | None:
    return None if app.report is not None else "no report yet: n diagnoses, o opens one"


#: The one declaration of the app's actions: the bindings, the palette, the greyed keys
#: and the "why not" feedback all come from it.
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
    AppAction("o", "open_report", "Open", "Open a saved report", "a doctor JSON report", _idle),
    AppAction("m", "compare", "Compare", "Compare reports", "side by side, outliers marked", _idle),
)
_RULES = {a.action: a.why_not for a in ACTIONS}


class LoadscopeApp(App[int]):
    """Why does my model load slowly here, and what do I change?"""

    TITLE = "loadscope"
    CSS_PATH = "app.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(a.key, a.action, a.label) for a in ACTIONS),
        Binding("1", "tab('probes')", "Probes", show=False),
        Binding("2", "tab('bench')", "Bench", show=False),
        Binding("3", "tab('advice')", "Advice", show=False),
        Binding("question_mark", "toggle_keys", "Keys"),
        Binding("escape", "hide_keys", "Close keys", show=False),
    ]

    def __init__(
        self,
        *,
        target: str | None = None,
        budget_s: float | None = None,
        emulate: bool = False,
        report: str | None = None,
        synth_dir: str | None = None,
        browse_root: Path | None = None,
        hf_cache: str | None = None,
        fuse_reason: str | bool | None = True,
    ) -> None:
        super().__init__()
        self.animation_level = "none"  # kind to SSH: no animations
        self.target = target
        self.budget_s = budget_s or DEFAULT_BUDGET_S
        self.emulate = emulate
        self.initial_report = report
        self.synth_dir = synth_dir
        self.browse_root = browse_root or Path.cwd()
        self.hf_cache = hf_cache
        self._fuse_reason = fuse_reason
        self.report: dict[str, Any] | None = None
        self.last_request: SessionRequest | None = None
        self.running = False
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._forced_exit: threading.Timer | None = None
        self._engine_pid: int | None = None
        self._exited = threading.Event()
        self._done.set()
        self.messages_seen: list[str] = []
        self._applying: str | None = None  # what fix is running, for its progress line
        self._profilable = False
        #: The model the shown report is about, as the user named it (for the fixes).
        self._source_spec = ""

    # -- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with TabbedContent(initial="probes", id="tabs"):
            with TabPane("1 Probes", id="probes"):
                yield ProbesView(id="probes-view")
            with TabPane("2 Benchmark", id="bench"):
                yield BenchView(id="bench-view")
            with TabPane("3 Advice", id="advice"):
                yield AdviceView(id="advice-view")
        yield Footer()

    def on_mount(self) -> None:
        # Full (generation 2) garbage collections of everything the app has built so far
        # took ~100 ms here and were the whole input-latency tail (bench_tui.py): objects
        # alive now live as long as the app, so the collector stops scanning them.
        gc.collect()
        gc.freeze()
        if not self.is_headless:
            # SIGTERM (kill, a scheduler) and SIGHUP (the terminal went away): stop the run
            # like ctrl+q does, so the terminal is restored and no worker is left behind.
            # Plain signal handlers, not the event loop's: they run even when the loop is
            # stuck (Textual's shutdown blocked writing to a terminal that is gone), and
            # arm the forced exit before asking the loop for the graceful stop.
            loop = asyncio.get_running_loop()

            def on_signal(_signum: int, _frame: object) -> None:
                self._arm_forced_exit()
                with contextlib.suppress(RuntimeError):  # the loop has already closed
                    loop.call_soon_threadsafe(self._on_stop_signal)

            for signum in (signal.SIGTERM, signal.SIGHUP):
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(signum, on_signal)
            self._watch_terminal(loop)
        self.set_interval(1 / REDRAW_HZ, self._redraw)
        if self.initial_report:
            self.open_report(self.initial_report)
        elif self.target:
            self.start(
                SessionRequest(
                    self.target, self.budget_s, self._emulation(self.emulate), self.synth_dir
                )
            )
        else:
            self.action_new()

    def fuse_reason(self) -> str | None:
        if self._fuse_reason is True:
            self._fuse_reason = fuse_unavailable_reason()
        return self._fuse_reason if isinstance(self._fuse_reason, str) else None

    def _emulation(self, on: bool) -> EmulatorSettings | None:
        return EmulatorSettings(latency_s=0.005, readahead_kb=128) if on else None

    # -- actions ----------------------------------------------------------------------------------

    def why_not(self, action: str) -> str | None:
        """Why ``action`` cannot run now (None: it can), by its rule in :data:`ACTIONS`.
        Greys its key in the footer; pressing the key anyway says this."""
        rule = _RULES.get(action)
        return rule(self) if rule else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Greyed out (None), not hidden, when an action cannot run now."""
        return None if self.why_not(action) else True

    def explain(self, action: str) -> None:
        """A greyed key was pressed: say why it cannot run (Textual sends it here)."""
        if reason := self.why_not(action):
            self.notify(reason, severity="warning")

    def action_toggle_keys(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    def action_hide_keys(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()

    def get_system_commands(self, screen: Screen[Any]) -> Any:
        yield from super().get_system_commands(screen)
        for a in ACTIONS:
            yield SystemCommand(a.title, a.help, getattr(self, f"action_{a.action}"))

    def action_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab

    def action_new(self) -> None:
        def picked(choice: dict[str, Any] | None) -> None:
            if choice:
                self.start(
                    SessionRequest(
                        choice["spec"],
                        self.budget_s,
                        self._emulation(choice["emulate"]),
                        self.synth_dir,
                        choice.get("device", "auto"),
                        choice.get("ranks"),
                    )
                )

        self.push_screen(
            OnboardingScreen(
                browse_root=self.browse_root, fuse_reason=self.fuse_reason(), hf_cache=self.hf_cache
            ),
            picked,
        )

    def action_stop(self) -> None:
        if self.running:
            self._cancel.set()
            self.notify("stopping: killing the worker's process group")

    def action_rerun(self) -> None:
        if self.last_request is not None and not self.running:
            self.start(self.last_request)

    def can_profile(self) -> bool:
        """From the first trial of a run to its end, not flipping at each trial boundary:
        every change re-composes the footer, which cost up to ~200 ms of the UI thread
        at each trial's end and start (bench_tui.py: the slow key presses)."""
        return self.running and bool(self.query_one(BenchView).live)

    def action_profile(self) -> None:
        pid = self.query_one(BenchView).running_pid()
        if pid is None:
            self.notify(
                "between two trials: press f again once the next one runs",
                severity="warning",
            )
            return
        self.push_screen(ProfileScreen(pid))

    def action_copy(self) -> None:
        rec = self.query_one(AdviceView).highlighted()
        if rec is None:
            self.notify("no recommendation is highlighted", severity="warning")
            return
        snippets = snippets_of(rec)
        if not snippets:
            self.notify("this recommendation has no snippet", severity="warning")
            return

        def copy(choice: int | None) -> None:
            if choice is None:
                return
            chosen = snippets if choice < 0 else [snippets[choice]]
            text = "\n\n".join(f"# {snippet_heading(s)}\n{s['code']}" for s in chosen)
            self.copy_to_clipboard(text)
            what = "every snippet" if choice < 0 else f"the {chosen[0]['stack']} snippet"
            refused = clipboard_refused()
            if refused:
                self.notify(
                    f"{what} of '{rec['title']}' was not copied: {refused}; it is shown"
                    " to select by hand",
                    severity="warning",
                    timeout=10,
                )
                self.push_screen(
                    TextScreen(
                        f"{what} of '{rec['title']}'",
                        text,
                        "select it with the mouse (Shift+drag in most terminals); Escape closes",
                    )
                )
            else:
                self.notify(
                    f"sent {what} to the terminal's clipboard (OSC 52); a terminal"
                    " that ignores OSC 52 keeps nothing: select it in the Advice view"
                )

        if len(snippets) == 1:
            copy(0)
            return
        self.push_screen(
            SnippetPickScreen(rec["title"], [snippet_heading(s) for s in snippets]), copy
        )

    def apply_plan(self) -> tuple[str | None, str]:
        """(the highlighted fix's kind, the model spec) or (None, why it cannot be applied)."""
        rec = self.query_one(AdviceView).highlighted()
        if rec is None or rec["id"] not in APPLICABLE:
            return None, "the highlighted recommendation is not one loadscope applies"
        spec = self._source_spec
        if not spec or spec.startswith("synthetic:"):
            return None, "the synthetic model of this run was removed when it ended"
        source = (rec.get("apply") or {}).get("source")
        if source:
            spec = str(source)  # the advice's own source: one name everywhere
        return ("warm" if rec["id"] == "prewarm" else "copy"), spec

    def _copy_destination(self, spec: str) -> str:
        rec = self.query_one(AdviceView).highlighted()
        dest = ((rec or {}).get("apply") or {}).get("dest")
        if dest:
            return str(dest)  # the one the advice's snippet names
        disks = (((self.report or {}).get("probe") or {}).get("local_disks") or {}).get("disks")
        fast = [d for d in disks or [] if d.get("speed")]
        best = max(fast, key=lambda d: d["speed"]["cold_read_bytes_per_s"], default=None)
        # A report from before recommendations carried their apply: the same rule.
        return copy_destination(best["directory"] if best else str(Path.home()), spec)

    def action_apply(self) -> None:
        kind, spec = self.apply_plan()
        if kind is None:
            self.notify(spec, severity="warning")
            return
        size = format_bytes(int(((self.report or {}).get("target") or {}).get("total_bytes", 0)))
        if kind == "warm":
            screen = ConfirmScreen(
                "Warm the page cache",
                f"Read {size} of {spec} into the page cache with 8 parallel readers, so the"
                " next load is served from RAM. Reads only: nothing is written, moved or"
                " deleted. Refused if the model does not fit in available memory.",
            )
        else:
            screen = ConfirmScreen(
                "Copy the model to a local disk",
                f"Copy the weight files and the config/tokenizer files of {spec} ({size}) to"
                " the directory below. Free space is checked first; each file is written under"
                " a temporary name, fsynced, read back and compared with the source, then"
                " renamed. The source is never touched; an existing different file stops it.",
                self._copy_destination(spec),
            )

        def confirmed(value: str | None) -> None:
            if value is None:
                return
            job = warm_job(spec) if kind == "warm" else copy_job(spec, value)
            self._applying = "warming" if kind == "warm" else f"copying to {value}"
            self.query_one(AdviceView).applying(f"{self._applying}: starting")
            self._launch(job)

        self.push_screen(screen, confirmed)

    def action_export(self) -> None:
        if self.report is None:
            return

        def chosen(path: str | None) -> None:
            if path:
                self.export(path)

        self.push_screen(
            PromptScreen(
                "Export the report",
                "A path ending in .json, .md or .html:",
                "loadscope-report.html",
            ),
            chosen,
        )

    def export(self, path: str) -> Path | None:
        assert self.report is not None
        out = Path(path).expanduser()
        render = {
            ".json": lambda d: json.dumps(d, indent=2, default=str),
            ".md": to_markdown,
            ".html": to_html,
        }.get(out.suffix.lower())
        if render is None:
            self.notify(f"{out.name}: use .json, .md or .html", severity="error")
            return None
        try:
            out.write_text(render(self.report) + "\n")
        except OSError as exc:
            self.notify(f"cannot write {out}: {exc.strerror}", severity="error")
            return None
        self.notify(f"wrote {out.resolve()}")
        return out

    def action_open_report(self) -> None:
        def chosen(path: str | None) -> None:
            if path:
                self.open_report(path)

        self.push_screen(
            PromptScreen("Open a saved report", "Path of a doctor JSON report:"), chosen
        )

    def open_report(self, path: str) -> None:
        try:
            doc = load_report(str(Path(path).expanduser()))
        except LoadscopeError as exc:
            self.notify(str(exc), severity="error")
            return
        self.show_report(doc)
        self._source_spec = str((doc.get("target") or {}).get("spec", ""))
        self.sub_title = f"report {Path(path).name}"
        if self._source_spec and not self.running:
            # ``r`` re-runs what is on screen: this report's model, not the session's.
            self.last_request = SessionRequest(
                self._source_spec, self.budget_s, None, self.synth_dir
            )

    def deliver_screenshot(
        self, filename: str | None = None, path: str | None = None, time_format: str | None = None
    ) -> str | None:
        """The palette's Screenshot, saved where the user can find it: the given folder,
        else ~/Downloads when it exists, else the working directory; the path or the
        reason it could not be written is said (Textual's default folder is ~/Downloads,
        absent on most servers, and its failure gives no reason)."""
        folder = Path(path).expanduser() if path else screenshot_folder()
        name = filename or f"loadscope-{time.strftime('%Y%m%d-%H%M%S')}.svg"
        out = folder / name
        try:
            out.write_text(self.export_screenshot())
        except OSError as exc:
            self.notify(f"cannot save the screenshot to {out}: {exc.strerror}", severity="error")
            return None
        self.notify(f"saved the screenshot to {out.resolve()}", title="Screenshot")
        return str(out)

    def action_compare(self) -> None:
        def chosen(text: str | None) -> None:
            if text:
                self.compare(text.split())

        self.push_screen(
            PromptScreen("Compare reports", "Two or more JSON report paths, separated by spaces:"),
            chosen,
        )

    def compare(self, paths: list[str]) -> None:
        try:
            rows = compare([row_of(p, load_report(str(Path(p).expanduser()))) for p in paths])
        except LoadscopeError as exc:
            self.notify(str(exc), severity="error")
            return
        self.push_screen(CompareScreen(rows))

    async def action_quit(self) -> None:
        await self._stop_and_exit(ExitCode.OK)

    async def _stop_and_exit(self, code: int) -> None:
        if self.running:
            self._cancel.set()
            await asyncio.get_running_loop().run_in_executor(None, self._done.wait, 15)
        self.exit(code)

    def _arm_forced_exit(self) -> None:
        """Losing the terminal must end the app: Textual's own shutdown can wait forever
        writing to a terminal that is gone (an SSH drop), so the graceful stop gets
        STOP_GRACE_S, then the process exits anyway, after asking the engine's process
        group to stop (it also sees its stdin close, and cleans up: workers, emulator,
        synthetic files). Safe from a signal handler and from any thread."""
        if self._forced_exit is not None:
            return
        self._cancel.set()  # the run's stopper thread closes the engine's stdin now

        def force() -> None:
            if self._engine_pid is not None:
                with contextlib.suppress(OSError):
                    os.killpg(self._engine_pid, signal.SIGTERM)
            os._exit(int(ExitCode.TERMINATED))

        self._forced_exit = threading.Timer(STOP_GRACE_S, force)
        self._forced_exit.daemon = True
        self._forced_exit.start()

    def _watch_terminal(self, loop: asyncio.AbstractEventLoop) -> None:
        """A thread that notices the terminal hang up (POLLHUP on stdin) even when no
        SIGHUP arrives and the UI thread is blocked; it stops the app like SIGHUP does."""
        try:
            fd = sys.stdin.fileno()
        except (AttributeError, OSError, ValueError):
            return
        if not os.isatty(fd):
            return

        def watch() -> None:
            poller = select.poll()
            poller.register(fd, 0)  # HUP, ERR and NVAL are always reported
            while not self._exited.is_set():
                if poller.poll(500):
                    self._arm_forced_exit()
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(self._on_stop_signal)
                    return

        threading.Thread(target=watch, daemon=True, name="terminal-watch").start()

    def _on_stop_signal(self) -> None:
        self._arm_forced_exit()
        self.run_worker(self._stop_and_exit(ExitCode.TERMINATED), exclusive=True, group="stop")

    # -- the run ----------------------------------------------------------------------------------

    def start(self, request: SessionRequest) -> None:
        if self.running:
            return
        self.last_request = request
        self.report = None
        self._applying = None
        self.sub_title = f"diagnosing {request.spec}"
        self.query_one(BenchView).reset()
        self.query_one(AdviceView).applying(None)
        self._launch(job_for(request))

    def _launch(self, job: dict[str, Any]) -> None:
        """Run one engine job (a diagnosis, or a fix being applied) in its child process."""
        self.running = True
        self._cancel = threading.Event()
        self._done = threading.Event()
        self.refresh_bindings()
        self._run(job, self._cancel, self._done)

    @work(thread=True, exclusive=True, group="run", exit_on_error=False)
    def _run(self, job: dict[str, Any], cancel: threading.Event, done: threading.Event) -> None:
        try:
            engine = EngineProcess(job)
        except OSError as exc:
            self.post_message(RunFailed(f"cannot start the engine: {exc}"))
            done.set()
            return
        self._engine_pid = engine.proc.pid

        def stop_when_asked() -> None:
            cancel.wait()
            engine.cancel()

        stopper = threading.Thread(target=stop_when_asked, daemon=True, name="run-stop")
        stopper.start()
        try:
            for event in engine.events():  # blocking reads: the GIL is free meanwhile
                message = message_from_wire(event)
                if message is not None:
                    self.post_message(message)
        finally:
            done.set()
            cancel.set()  # releases the stopper (closing a finished child's stdin is harmless)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one error funnel: a worker that died of a bug is shown, never swallowed."""
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            if event.worker.group == "run":
                self.post_message(RunFailed(f"internal error: {type(error).__name__}: {error}"))
            else:
                self.notify(
                    f"{event.worker.name}: {type(error).__name__}: {error}", severity="error"
                )

    def _redraw(self) -> None:
        # Only the visible benchmark tab is drawn; its model keeps filling regardless.
        if self.running and self.query_one("#tabs", TabbedContent).active == "bench":
            self.query_one(BenchView).tick()
        profilable = self.can_profile()
        if profilable != self._profilable:  # the footer's Profile key, only when it changes
            self._profilable = profilable
            self.refresh_bindings()

    def _seen(self, message: Any) -> None:
        self.messages_seen.append(type(message).__name__)

    @on(StepStarted)
    def _step(self, m: StepStarted) -> None:
        self._seen(m)
        self.sub_title = f"{self.last_request.spec if self.last_request else ''}: {m.name}"

    @on(ProbesReady)
    def _probes(self, m: ProbesReady) -> None:
        self._seen(m)
        self.query_one(ProbesView).show(m.probe)

    @on(TrialBegan)
    def _began(self, m: TrialBegan) -> None:
        self._seen(m)
        if m.index == 0:
            self.action_tab("bench")
        self.query_one(BenchView).trial_began(m.trial, m.index, m.total)

    @on(TrialSample)
    def _sample(self, m: TrialSample) -> None:
        self._seen(m)
        self.query_one(BenchView).sample(
            m.trial_id,
            m.seconds,
            m.bytes_done,
            m.total_bytes,
            pid=m.pid,
            major_faults=m.major_faults,
            read_syscalls=m.read_syscalls,
            read_bytes=m.read_bytes,
        )

    @on(TrialEnded)
    def _ended(self, m: TrialEnded) -> None:
        self._seen(m)
        self.query_one(BenchView).trial_ended(m.trial)

    @on(RunFinished)
    def _finished(self, m: RunFinished) -> None:
        self._seen(m)
        self.running = False
        self._source_spec = self.last_request.spec if self.last_request else ""
        self.show_report(m.report, live=True)
        self.action_tab("advice")
        self.notify(m.report["verdict"]["headline"], title=m.report["verdict"]["status"])

    @on(ApplyProgress)
    def _apply_progress(self, m: ApplyProgress) -> None:
        self._seen(m)
        rate = f", {format_bytes(m.done / m.seconds)}/s" if m.seconds > 0 else ""
        self.query_one(AdviceView).applying(
            f"{self._applying}: {format_bytes(m.done)} of {format_bytes(m.total)}{rate} (s stops)",
            m.done,
            m.total,
        )

    @on(ApplyFinished)
    def _apply_finished(self, m: ApplyFinished) -> None:
        self._seen(m)
        self.running = False
        self._applying = None
        r = m.result
        if r["kind"] == "warm":
            after = [f["after"] for f in r["files"]]
            known = [a for a in after if a is not None]
            resident = f"{min(known):.0%}" if len(known) == len(after) else "unknown"
            text = (
                f"warmed {format_bytes(r['bytes_read'])} in {r['seconds']:.2f} s;"
                f" every file now at least {resident} resident"
            )
        else:
            copied = sum(1 for f in r["files"] if f["status"] == "copied")
            kept = len(r["files"]) - copied
            text = (
                f"copied {copied} file(s) to {r['dest']} ({kept} already there), verified;"
                f' load it with from_pretrained("{r["dest"]}") or vllm serve {r["dest"]}'
            )
        self.query_one(AdviceView).applied(text)
        self.notify(text, title="applied")
        self.refresh_bindings()

    @on(RunFailed)
    def _failed(self, m: RunFailed) -> None:
        self._seen(m)
        if self._applying is not None:
            self.query_one(AdviceView).applied(f"{self._applying} failed: {m.reason}")
            self._applying = None
        self.running = False
        self.refresh_bindings()
        self.sub_title = "failed"
        self.notify(m.reason, title="the diagnosis failed", severity="error", timeout=30)

    @on(RunCancelled)
    def _cancelled(self, m: RunCancelled) -> None:
        self._seen(m)
        if self._applying is not None:
            self.query_one(AdviceView).applied(f"{self._applying} stopped: {m.reason}")
            self._applying = None
        self.running = False
        self.refresh_bindings()
        self.sub_title = "stopped"
        self.notify(m.reason, title="stopped")

    def show_report(self, doc: dict[str, Any], *, live: bool = False) -> None:
        self.report = doc
        if doc.get("probe"):
            self.query_one(ProbesView).show(doc["probe"])
        if doc.get("bench"):
            self.query_one(BenchView).show(doc["bench"])
        self.query_one(BenchView).show_ranks(doc.get("ranks"))
        self.query_one(AdviceView).show(doc)
        if not live:
            self.action_tab("advice")
        self.sub_title = doc["verdict"]["status"]
        self.refresh_bindings()


def run_app(
    *,
    target: str | None,
    budget_s: float | None,
    emulate: bool,
    report: str | None,
    synth_dir: str | None,
) -> int:
    app = LoadscopeApp(
        target=target, budget_s=budget_s, emulate=emulate, report=report, synth_dir=synth_dir
    )
    try:
        code = app.run()
    finally:
        app._exited.set()
    return int(code if code is not None else ExitCode.OK)


def _explainer(action: str) -> Any:
    def key_handler(self: LoadscopeApp) -> None:
        self.explain(action)

    return key_handler


# Textual calls ``key_<name>`` when no enabled binding took the key: a greyed action's key.
for _a in ACTIONS:
    setattr(LoadscopeApp, f"key_{_a.key}", _explainer(_a.action))
