"""Children in a session of their own, started with the stop signals held
(``base/processes.py``): a Ctrl-C, SIGTERM or SIGHUP landing inside ``Popen`` after the
fork left the child running with no handle to stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from loadscope.base.processes import STOPS, signals_held, start_session


@pytest.mark.parametrize("signum", STOPS, ids=lambda s: signal.Signals(s).name)
def test_a_stop_during_a_spawn_is_handled_once_the_child_has_a_handle(signum: int) -> None:
    seen: list[int] = []
    previous = signal.signal(signum, lambda s, _f: seen.append(s))
    try:
        with signals_held():
            os.kill(os.getpid(), signum)
            time.sleep(0.05)
            assert seen == []  # held: the spawn is not broken into
        assert seen == [signum]  # then handled as it would have been
        assert signal.getsignal(signum) is not signal.SIG_DFL
    finally:
        signal.signal(signum, previous)


def test_a_session_child_is_started_with_the_handlers_back_in_place() -> None:
    before = {s: signal.getsignal(s) for s in STOPS}
    proc = start_session([sys.executable, "-c", "import os; print(os.getsid(0))"],
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    out, _ = proc.communicate(timeout=30)
    assert int(out) == proc.pid != os.getsid(0)  # its own session, led by itself
    assert {s: signal.getsignal(s) for s in STOPS} == before
