"""py-spy recording one command's process tree for ``time --profile``: started with the
command's pid once it is spawned, stopped once it ended, its chrometrace read into the
phase table (:mod:`loadscope.engine.phases`) or into why there is none: py-spy missing,
ptrace refused (and how to allow it), a command too short for a sample, a run py-spy
lost early.

May import: :mod:`loadscope.engine.phases`, :mod:`loadscope.engine.profiler` (py-spy and
its permission check), the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from loadscope.engine.phases import (
    MOST_UNSAMPLED,
    RATE_HZ,
    STOP_TIMEOUT_S,
    UNSAMPLED,
    PhaseTable,
    Stretch,
    stretches,
    table_of,
)
from loadscope.engine.profiler import (
    HOW_TO_ENABLE,
    explain,
    ptrace_blocked_reason,
    py_spy,
    tracer_declaration,
)


class Recorder:
    """py-spy recording one command's tree: :meth:`start` with its pid once spawned,
    :meth:`stop` once it ended, then :meth:`table` for its wall time (and :attr:`parts`,
    the stretches it was made of, for :func:`cross_check`)."""

    def __init__(self, rate_hz: int = RATE_HZ) -> None:
        self.rate_hz = rate_hz
        self.reason = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.mkdtemp(prefix="loadscope-phases-")
        self._out = Path(self._dir) / "trace.json"
        self._log = Path(self._dir) / "py-spy.log"
        #: py-spy's start on the run's clock: its trace counts from there (py-spy's own
        #: start-up, some milliseconds, is the error of placing the trace on the run).
        self.offset_s = 0.0
        #: Yama's scope 1, not root: the command names loadscope as its tracer first.
        self.before_exec = tracer_declaration()
        #: The main thread's stretches, once :meth:`table` read them.
        self.parts: list[Stretch] = []

    @staticmethod
    def unavailable() -> str | None:
        """Why no profile can be taken here (before any run), or None."""
        if py_spy() is None:
            return "py-spy is not installed (pip install py-spy)"
        if (why := ptrace_blocked_reason(declared=True)) is not None:
            return f"{why}: {HOW_TO_ENABLE}"
        return None

    def start(self, pid: int, t0: float) -> None:
        if (why := self.unavailable()) is not None:
            self.reason = why
            return
        exe = py_spy()
        assert exe is not None
        argv = [exe, "record", "--pid", str(pid), "--subprocesses", "--idle", "--threads"]
        argv += ["--full-filenames", "--rate", str(self.rate_hz), "--format", "chrometrace"]
        argv += ["--output", str(self._out)]
        with open(self._log, "wb") as log:
            self.offset_s = time.perf_counter() - t0
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )

    def stop(self) -> None:
        """Once the command ended: py-spy stops by itself; where the command was stopped
        at a ready signal and lives on in the tree, py-spy is told to write (SIGINT)."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.reason = f"py-spy did not write its samples within {STOP_TIMEOUT_S:g} s"

    def _why_no_samples(self) -> str:
        log = self._log.read_text(errors="replace") if self._log.exists() else ""
        if "ermission" in log or "EPERM" in log:
            return explain(log)
        if os.geteuid() != 0:
            # A command that makes itself non-dumpable (prctl) refuses ptrace to any user
            # but root once it has: py-spy then reads no stack and reports no error.
            return (
                "ptrace was most likely refused (a process that makes itself non-dumpable"
                f" refuses it to a user that is not root): {HOW_TO_ENABLE}"
            )
        return (
            "py-spy reported no error (a command that ends within its first samples, or"
            " before it attached, leaves none: profile a longer run)"
        )

    def table(self, wall_s: float) -> PhaseTable:
        try:
            if self.reason:
                return PhaseTable(wall_s, reason=self.reason)
            raw = self._out.read_text(errors="replace") if self._out.exists() else ""
            if not raw:  # the same words as a trace with no sample of the main thread
                why = f"py-spy took no sample of the command: {self._why_no_samples()}"
                return PhaseTable(wall_s, reason=why)
            try:
                trace = json.loads(raw)
            except ValueError:
                return PhaseTable(wall_s, reason="py-spy wrote a trace that does not parse")
            self.parts = stretches(trace if isinstance(trace, list) else [])
            table = table_of(self.parts, wall_s)
            missed = table.seconds(UNSAMPLED) or 0.0
            if not table.reason and missed > MOST_UNSAMPLED * table.wall_s:
                # Attached, then shut out (a command that made itself non-dumpable after
                # py-spy's first samples): not a profile of the run.
                sampled = table.wall_s - missed
                table.reason = f"py-spy sampled {sampled:.2g} s of the {table.wall_s:.3g} s run"
            if table.reason:  # why: what py-spy said, or what most likely stopped it
                table.reason += f": {self._why_no_samples()}"
            table.rate_hz = self.rate_hz
            return table
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
