"""The supervising parent's exit code for a child that a passed-on signal ended."""

from __future__ import annotations

import os
import signal

import pytest

from loadscope.base.errors import ExitCode
from loadscope.tui.launch import _exit_code_of


def _child_dies_of(signum: int) -> int:
    pid = os.fork()
    if pid == 0:  # the command's child, its handlers already gone as it exits
        try:
            if signum != signal.SIGKILL:
                signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize(
    ("signum", "expected"),
    [
        (signal.SIGHUP, ExitCode.TERMINATED),  # a hang-up stops as SIGTERM does: 143, not 129
        (signal.SIGTERM, ExitCode.TERMINATED),
        (signal.SIGINT, ExitCode.INTERRUPTED),
        (signal.SIGKILL, 128 + signal.SIGKILL),
    ],
)
def test_a_child_ended_by_a_signal_exits_with_the_commands_code(
    signum: signal.Signals, expected: int
) -> None:
    assert _exit_code_of(_child_dies_of(signum)) == int(expected)


def test_a_child_that_exits_keeps_its_code() -> None:
    assert _exit_code_of(0) == 0
    assert _exit_code_of(10) == 10
