"""Child processes started the one way loadscope starts them.

Owns :func:`start_session` (a child in a session of its own, so that it and all it
spawns can be killed as one group, started with the stop signals held so that none
leaves it running without a handle) and :func:`popen` (the same with piped text
output). May import: the standard library only.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

#: The signals that stop a run (Ctrl-C, ``kill``, the terminal closing).
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold a stop signal that lands while a child is being spawned until the spawn has
    returned: one raised inside ``Popen`` after the fork left the child running with no
    handle to stop it (its own session: the terminal's signal never reaches it). The held
    signal is then handled as it would have been. Main thread only (elsewhere signals
    are the main thread's)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[tuple[int, Any]] = []
    previous: dict[int, Any] = {s: signal.getsignal(s) for s in STOPS}
    for s in STOPS:
        signal.signal(s, lambda signum, frame: held.append((signum, frame)))
    try:
        yield
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
        for signum, frame in held:
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


def start_session(
    command: list[str], spawned: list[subprocess.Popen[Any]] | None = None, **options: Any
) -> subprocess.Popen[Any]:
    """``command`` in a session of its own (``Popen``'s other ``options`` as given),
    started with the stop signals held (:func:`signals_held`). A held signal is handled
    as the spawn returns, raising there: the child is put in ``spawned`` first, so that
    the caller that catches it can still stop the child (it was left running)."""
    with signals_held():
        proc = subprocess.Popen(command, start_new_session=True, **options)
        if spawned is not None:
            spawned.append(proc)
        return proc


def popen(command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``command`` with piped text stdout and stderr (``OSError`` when it cannot start),
    in a session of its own: killable with all it spawns."""
    return start_session(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
