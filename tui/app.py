"""The loadscope app: onboarding, probes, live benchmark and advice over the same engine.

The engine runs in a child process that :mod:`loadscope.tui.engine_link` starts, reads
and stops; one thread worker posts its events as typed messages. The UI thread owns
every buffer the views draw, and redraws the live charts at 5 Hz. The app's actions
(keys, palette, availability) are declared once in :mod:`loadscope.tui.actions`; what
copy and apply do is in :mod:`loadscope.tui.fixes`, what it does with a report as a
whole (shown, opened, exported, compared) in :mod:`loadscope.tui.report_actions`, its
base class.

Owns: the layout, the actions' handlers, the run's lifecycle and the engine's messages.
May import: everything in the core and the rest of ``loadscope.tui``.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import shlex
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from loadscope.advice.snippets import snippet_heading, snippets_of
from loadscope.base.errors import ExitCode
from loadscope.diagnosis.doctor import DEFAULT_BUDGET_S
from loadscope.diagnosis.engine_process import job_for
from loadscope.diagnosis.session import SessionRequest
from loadscope.tools.emulator import EmulatorSettings, fuse_unavailable_reason
from loadscope.tui import actions, fixes
from loadscope.tui.engine_link import EngineLink
from loadscope.tui.messages import (
    ApplyFinished,
    ApplyProgress,
    ProbesReady,
    RunCancelled,
    RunFailed,
    RunFinished,
    StepStarted,
    TimeFinished,
    TrialBegan,
    TrialEnded,
    TrialSample,
)
from loadscope.tui.probes_view import ProbesView
from loadscope.tui.report_actions import ReportActions
from loadscope.tui.report_files import tell_kept
from loadscope.tui.screens import (
    OnboardingScreen,
    ProfileScreen,
    PromptScreen,
    SnippetPickScreen,
    TextScreen,
)
from loadscope.tui.views import AdviceView, BenchView

#: Redraws per second of the live charts (the engine samples faster; stale samples drop).
REDRAW_HZ = 5


_M = TypeVar("_M", bound=Message)
_Handler = Callable[["LoadscopeApp", _M], None]


def _engine_message(kind: type[_M]) -> Callable[[_Handler[_M]], _Handler[_M]]:
    """``@on(kind)`` for one of the engine's messages: the app adds the message's name to
    ``messages_seen`` (in the order they are handled), then ``handler`` runs."""

    def decorate(handler: _Handler[_M]) -> _Handler[_M]:
        @functools.wraps(handler)
        def noted(app: LoadscopeApp, message: _M) -> None:
            app.messages_seen.append(type(message).__name__)
            handler(app, message)

        return on(kind)(noted)

    return decorate


class LoadscopeApp(ReportActions):
    """Why does my model load slowly here, and what do I change?"""

    TITLE = "loadscope"
    CSS_PATH = "app.tcss"
    BINDINGS: ClassVar[list[BindingType]] = actions.bindings()

    def __init__(
        self,
        *,
        target: str | None = None,
        budget_s: float | None = None,
        emulate: bool = False,
        report: str | None = None,
        synth_dir: str | None = None,
        stacks: tuple[str, ...] = (),
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
        #: The user's stacks (``tui --stack``): each run times only their routes.
        self.stacks = stacks
        self.browse_root = browse_root or Path.cwd()
        self.hf_cache = hf_cache
        self._fuse_reason = fuse_reason
        self.report: dict[str, Any] | None = None
        #: Where the last finished run's report was kept (the reports folder), if it was.
        self.kept_report: str | None = None
        self.last_request: SessionRequest | None = None
        self.running = False
        self._link = EngineLink()
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
            self._link.watch_for_hangup(asyncio.get_running_loop(), self._on_stop_signal)
        self.set_interval(1 / REDRAW_HZ, self._redraw)
        if self.initial_report:
            self.open_report(self.initial_report)
        elif self.target:
            self.start(
                SessionRequest(
                    self.target,
                    self.budget_s,
                    self._emulation(self.emulate),
                    self.synth_dir,
                    stacks=self.stacks,
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
        """Why ``action`` cannot run now (None: it can), by its rule in the actions table.
        Greys its key in the footer; pressing the key anyway says this."""
        return actions.why_not(self, action)

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
        yield from actions.palette_commands(self)

    def action_tab(self, tab: str) -> None:
        actions.switch_tab(self, tab)

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
                        self.stacks,
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
            self._link.cancel.set()
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
        rec = self.highlighted_fix()
        if rec is None:
            self.notify("no recommendation is highlighted", severity="warning")
            return
        snippets = snippets_of(rec)
        if not snippets:
            self.notify("this recommendation has no snippet", severity="warning")
            return

        def copy(choice: int | None) -> None:
            if choice is not None:
                fixes.copy_snippets(self, rec, snippets, choice)

        if len(snippets) == 1:
            copy(0)
            return
        self.push_screen(
            SnippetPickScreen(rec["title"], [snippet_heading(s) for s in snippets]), copy
        )

    def highlighted_fix(self) -> dict[str, Any] | None:
        """The recommendation highlighted in the Advice tab, if any."""
        return self.query_one(AdviceView).highlighted()

    def apply_plan(self) -> tuple[str | None, str]:
        """(the highlighted fix's kind, the model spec) or (None, why it cannot be applied)."""
        return fixes.apply_plan(self.highlighted_fix(), self._source_spec)

    def action_apply(self) -> None:
        kind, spec = self.apply_plan()
        if kind is None:
            self.notify(spec, severity="warning")
            return
        rec = self.highlighted_fix()

        def confirmed(value: str | None) -> None:
            if value is None:
                return
            job, self._applying = fixes.fix_job(kind, spec, value)
            self.query_one(AdviceView).applying(f"{self._applying}: starting")
            self._launch(job)

        self.push_screen(fixes.confirmation(kind, spec, rec, self.report), confirmed)

    def model_spec(self) -> str:
        """The model the last diagnosis (or opened report) was of: what a fix acts on."""
        return self._source_spec

    def action_time_command(self) -> None:
        spec = self.model_spec()
        if self.running or not spec:
            self.explain("time_command")
            return

        def chosen(line: str | None) -> None:
            if not line:
                return
            try:
                argv = shlex.split(line)
            except ValueError as exc:
                self.notify(f"the command: {exc}", severity="error")
                return
            self._applying = "timing your command"
            self.query_one(AdviceView).applying(f"{self._applying}: starting")
            self.action_tab("advice")
            # One more cold run sampled by py-spy: the start-up by phase (where py-spy
            # may attach; else the table says why and the timing stands).
            self._launch({"kind": "time", "spec": spec, "argv": argv, "profile": True})

        self.push_screen(
            PromptScreen(
                "Time your command",
                "The command that loads the model, as you run it ({model} is its path);"
                " it runs cold as it is and after each no-code fix:",
                "python load.py {model}",
            ),
            chosen,
        )

    async def action_quit(self) -> None:
        await self._stop_and_exit(ExitCode.OK)

    async def _stop_and_exit(self, code: int) -> None:
        if self.running:
            self._link.cancel.set()
            await asyncio.get_running_loop().run_in_executor(None, self._link.done.wait, 15)
        self.exit(code)

    def _on_stop_signal(self) -> None:
        self._link.arm_forced_exit()
        self.run_worker(self._stop_and_exit(ExitCode.TERMINATED), exclusive=True, group="stop")

    # -- the run ----------------------------------------------------------------------------------

    def start(self, request: SessionRequest) -> None:
        if self.running:
            return
        self.last_request = request
        self.report = None
        self.kept_report = None
        self._applying = None
        self.sub_title = f"diagnosing {request.spec}"
        self.query_one(BenchView).reset()
        self.query_one(ProbesView).clear()
        self.query_one(AdviceView).applying(None)
        self._launch(job_for(request))

    def _launch(self, job: dict[str, Any]) -> None:
        """Run one engine job (a diagnosis, or a fix being applied) in its child process."""
        self.running = True
        cancel, done = self._link.renew()
        self.refresh_bindings()
        self._run(job, cancel, done)

    @work(thread=True, exclusive=True, group="run", exit_on_error=False)
    def _run(self, job: dict[str, Any], cancel: threading.Event, done: threading.Event) -> None:
        self._link.pump(job, cancel, done, self.post_message)

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

    @_engine_message(StepStarted)
    def _step(self, m: StepStarted) -> None:
        if self._applying is not None:  # a job's own steps (the runs of the user's command)
            self.query_one(AdviceView).applying(f"{self._applying}: {m.name} (s stops)")
            return
        self.sub_title = f"{self.last_request.spec if self.last_request else ''}: {m.name}"
        if m.name not in ("trials", "advice"):
            self.query_one(ProbesView).probing(m.name)

    @_engine_message(ProbesReady)
    def _probes(self, m: ProbesReady) -> None:
        self.query_one(ProbesView).show(m.probe)

    @_engine_message(TrialBegan)
    def _began(self, m: TrialBegan) -> None:
        if m.index == 0:
            self.action_tab("bench")
        self.query_one(BenchView).trial_began(m.trial, m.index, m.total)

    @_engine_message(TrialSample)
    def _sample(self, m: TrialSample) -> None:
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

    @_engine_message(TrialEnded)
    def _ended(self, m: TrialEnded) -> None:
        self.query_one(BenchView).trial_ended(m.trial)

    @_engine_message(RunFinished)
    def _finished(self, m: RunFinished) -> None:
        self.running = False
        self._source_spec = self.last_request.spec if self.last_request else ""
        self.show_report(m.report, live=True)
        self.action_tab("advice")
        self.notify(m.report["verdict"]["headline"], title=m.report["verdict"]["status"])
        self.kept_report = m.kept
        tell_kept(self, m.kept, m.kept_why)

    @_engine_message(ApplyProgress)
    def _apply_progress(self, m: ApplyProgress) -> None:
        self.query_one(AdviceView).applying(
            fixes.progress_text(self._applying, m.done, m.total, m.seconds), m.done, m.total
        )

    @_engine_message(ApplyFinished)
    def _apply_finished(self, m: ApplyFinished) -> None:
        self.running = False
        self._applying = None
        text = fixes.outcome_text(m.result)
        self.query_one(AdviceView).applied(text)
        self.notify(text, title="applied")
        self.refresh_bindings()

    @_engine_message(TimeFinished)
    def _time_finished(self, m: TimeFinished) -> None:
        self.running = False
        self._applying = None
        base: dict[str, Any] = next((v for v in m.result["variants"] if v["name"] == "as-is"), {})
        median = base.get("median_seconds")
        line = (
            f"your command: {median:.3g} s cold as it is; the table is in the report"
            if isinstance(median, int | float)
            else "your command was not timed: see why"
        )
        self.query_one(AdviceView).applied(line)
        if self.report is not None:
            self.report["user_command"] = m.result  # exported with the report
            self.query_one(BenchView).show_user_command(self.report)
        self.push_screen(
            TextScreen(
                "Your command, timed",
                m.text,
                "esc closes; the table goes into the report you export (e)",
            )
        )
        self.refresh_bindings()

    def _cut_short(self, outcome: str, reason: str) -> None:
        """A run that ``outcome`` ("failed", "stopped"): a fix's line says so, the keys
        come back, the subtitle says it."""
        if self._applying is not None:
            self.query_one(AdviceView).applied(f"{self._applying} {outcome}: {reason}")
            self._applying = None
        self.running = False
        self.refresh_bindings()
        self.sub_title = outcome

    @_engine_message(RunFailed)
    def _failed(self, m: RunFailed) -> None:
        self._cut_short("failed", m.reason)
        self.notify(m.reason, title="the diagnosis failed", severity="error", timeout=30)

    @_engine_message(RunCancelled)
    def _cancelled(self, m: RunCancelled) -> None:
        self._cut_short("stopped", m.reason)
        self.notify(m.reason, title="stopped")


def run_app(
    *,
    target: str | None,
    budget_s: float | None,
    emulate: bool,
    report: str | None,
    synth_dir: str | None,
    stacks: tuple[str, ...] = (),
) -> int:
    app = LoadscopeApp(
        target=target,
        budget_s=budget_s,
        emulate=emulate,
        report=report,
        synth_dir=synth_dir,
        stacks=stacks,
    )
    try:
        code = app.run()
    finally:
        app._link.exited.set()
    return int(code if code is not None else ExitCode.OK)


# Textual calls ``key_<name>`` when no enabled binding took the key: a greyed action's key.
actions.install_explainers(LoadscopeApp)
