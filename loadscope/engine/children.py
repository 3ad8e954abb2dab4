"""The child processes both trial runners supervise: a ``bench`` worker, a ``--ranks`` rank.

Owns how a child is started (forked from the fork server, torch already imported,
else a fresh interpreter in its own process group) and how its pipes are read: a
thread turns each stdout line into an item for the caller (decoded events, or the raw
lines), another keeps the last lines of stderr (the reason a dead child gives), so a
child that fills either pipe never stalls.

May import: ``loadscope.loaders``.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable

from loadscope.loaders import forkserver
from loadscope.loaders.forkserver import ForkedProcess

Child = subprocess.Popen[str] | ForkedProcess
#: Lines of a child's stderr kept for its exit reason.
STDERR_TAIL = 40


def forked(
    args: list[str],
    *,
    module: str,
    env: dict[str, str] | None = None,
    preload: list[str] | None = None,
) -> ForkedProcess | None:
    """``module.main(args)`` forked from the shared fork server; None where the fork server
    is off (``LOADSCOPE_FORKSERVER=0``) or cannot start."""
    if not forkserver.enabled():
        return None
    try:
        return forkserver.shared_server().spawn(args, env=env, module=module, preload=preload)
    except forkserver.ForkServerError:
        return None  # a fresh interpreter still works, only slower to start


def python_module(module: str) -> list[str]:
    """The command that runs ``module`` in a fresh interpreter."""
    return [sys.executable, "-m", module]


class Pipes:
    """Reads one child's pipes: every stdout line to ``on_line``, then ``on_end()`` once
    stdout closes; the last :data:`STDERR_TAIL` lines of stderr in ``stderr``."""

    def __init__(
        self, proc: Child, on_line: Callable[[str], None], on_end: Callable[[], None]
    ) -> None:
        self.proc = proc
        self.stderr: deque[str] = deque(maxlen=STDERR_TAIL)
        self._out = threading.Thread(target=self._read_stdout, args=(on_line, on_end), daemon=True)
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._out.start()
        self._err.start()

    def _read_stdout(self, on_line: Callable[[str], None], on_end: Callable[[], None]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            on_line(line)
        on_end()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def join_stdout(self, timeout: float = 10) -> None:
        """After the exit: wait until everything the child wrote to stdout has been read."""
        self._out.join(timeout)

    def join(self, timeout: float = 5) -> None:
        self._out.join(timeout)
        self._err.join(timeout)
