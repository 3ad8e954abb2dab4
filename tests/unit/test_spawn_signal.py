"""A stop signal that lands while a child is being spawned is handled as the spawn returns:
the caller still gets the child to stop (``time``'s command outlived a Ctrl-C sent just as
it started, in 2 of 5 full test runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from loadscope.base import processes


class Stopped(Exception):
    pass


def test_a_signal_during_the_spawn_leaves_the_child_in_the_callers_hands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = subprocess.Popen

    def spawn_then_signal(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        child = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # lands after the fork, before the return
        return child

    def stop(_signum: int, _frame: object) -> None:
        raise Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    monkeypatch.setattr(processes.subprocess, "Popen", spawn_then_signal)
    spawned: list[subprocess.Popen[Any]] = []
    try:
        with pytest.raises(Stopped):
            processes.start_session([sys.executable, "-c", "import time; time.sleep(60)"], spawned)
    finally:
        signal.signal(signal.SIGTERM, previous)
    (child,) = spawned  # the handle the caller stops it with
    assert child.poll() is None
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
