"""The app's link to its engine child process (``loadscope.tui.engine_link``).

The engine runs in a child process (``loadscope.diagnosis.engine_process``: no GIL
shared with the UI); one thread worker reads its JSON-line events and posts them as
typed messages (:meth:`EngineLink.pump`). Stopping closes the child's stdin, which
sets the engine's cancel event and kills the running trial worker's process group
within ~0.1 s. Losing the terminal (SIGTERM, SIGHUP, or stdin hanging up) stops the
run and, after :data:`STOP_GRACE_S`, exits the process anyway.

Owns: the run's stop events, the engine's pid, the forced exit and the watchers of
the signals and the terminal. Nothing here touches a widget: the app is reached only
through the callables it passes.
May import: the core's engine process (``loadscope.diagnosis.engine_process``), its
errors (``loadscope.base.errors``) and the app's messages; never the app.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from textual.message import Message

from loadscope.base.errors import ExitCode
from loadscope.diagnosis.engine_process import EngineProcess
from loadscope.tui.messages import RunFailed, message_from_wire

#: After SIGTERM or SIGHUP, how long the graceful stop may take before the app exits anyway.
STOP_GRACE_S = 3.0


class EngineLink:
    """The current run's ``cancel`` and ``done`` events, the engine child's pid, and the way
    out when the terminal goes (``exited`` is set once the app has returned)."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self.done = threading.Event()
        self.done.set()
        self.engine_pid: int | None = None
        self.exited = threading.Event()
        self._forced_exit: threading.Timer | None = None

    def renew(self) -> tuple[threading.Event, threading.Event]:
        """Fresh ``cancel`` and ``done`` events for a run about to start."""
        self.cancel = threading.Event()
        self.done = threading.Event()
        return self.cancel, self.done

    def pump(
        self,
        job: dict[str, Any],
        cancel: threading.Event,
        done: threading.Event,
        post: Callable[[Message], Any],
    ) -> None:
        """Run ``job`` in an engine child and post its events as messages until it ends
        (the body of the app's run thread: blocking reads, the GIL is free meanwhile)."""
        try:
            engine = EngineProcess(job)
        except OSError as exc:
            post(RunFailed(f"cannot start the engine: {exc}"))
            done.set()
            return
        self.engine_pid = engine.proc.pid

        def stop_when_asked() -> None:
            cancel.wait()
            engine.cancel()

        stopper = threading.Thread(target=stop_when_asked, daemon=True, name="run-stop")
        stopper.start()
        try:
            for event in engine.events():
                message = message_from_wire(event)
                if message is not None:
                    post(message)
        finally:
            done.set()
            cancel.set()  # releases the stopper (closing a finished child's stdin is harmless)

    def arm_forced_exit(self) -> None:
        """Losing the terminal must end the app: Textual's own shutdown can wait forever
        writing to a terminal that is gone (an SSH drop), so the graceful stop gets
        STOP_GRACE_S, then the process exits anyway, after asking the engine's process
        group to stop (it also sees its stdin close, and cleans up: workers, emulator,
        synthetic files). Safe from a signal handler and from any thread."""
        if self._forced_exit is not None:
            return
        self.cancel.set()  # the run's stopper thread closes the engine's stdin now

        def force() -> None:
            if self.engine_pid is not None:
                with contextlib.suppress(OSError):
                    os.killpg(self.engine_pid, signal.SIGTERM)
            os._exit(int(ExitCode.TERMINATED))

        self._forced_exit = threading.Timer(STOP_GRACE_S, force)
        self._forced_exit.daemon = True
        self._forced_exit.start()

    def watch_for_hangup(
        self, loop: asyncio.AbstractEventLoop, on_stop: Callable[[], None]
    ) -> None:
        """SIGTERM (kill, a scheduler) and SIGHUP (the terminal went away) stop the run like
        ctrl+q does, so the terminal is restored and no worker is left behind; so does
        stdin hanging up. ``on_stop`` is then called on ``loop``.

        Plain signal handlers, not the event loop's: they run even when the loop is stuck
        (Textual's shutdown blocked writing to a terminal that is gone), and arm the forced
        exit before asking the loop for the graceful stop."""

        def hang_up() -> None:
            self.arm_forced_exit()
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(on_stop)

        def on_signal(_signum: int, _frame: object) -> None:
            hang_up()

        for signum in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signum, on_signal)
        self._watch_terminal(hang_up)

    def _watch_terminal(self, hang_up: Callable[[], None]) -> None:
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
            while not self.exited.is_set():
                if poller.poll(500):
                    hang_up()
                    return

        threading.Thread(target=watch, daemon=True, name="terminal-watch").start()
