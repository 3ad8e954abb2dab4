"""Children watched until they are done: the one loop both trial runners run.

Owns the supervision of a set of children (one ``bench`` worker, or a launch's N
ranks) whose pipes feed one queue of (child index, item), item None when that child's
stdout closed: the 0.1 s tick, the cancel (every child's group killed, the caller's
exception raised), the caller's limit (a reason to stop: every group killed),
a closed stdout turned into the child's exit code (its group killed when the code does
not come), and the reaping whatever happens (a live child given ``reap_wait_s`` to exit,
then its group killed; every pipe joined). What the items mean is the caller's.

May import: ``loadscope.engine.children``, ``loadscope.engine.trials``.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from loadscope.engine.children import Pipes
from loadscope.engine.trials import kill_group

T = TypeVar("T")

#: How often the loop wakes with no item: the cancel, the limit and ``on_tick``.
TICK_S = 0.1


class Events(Generic[T]):
    """The one queue every child's pipe reader feeds: (child index, item), the item None
    once that child's stdout closed."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[int, T | None]] = queue.Queue()

    def put(self, child: int, item: T | None) -> None:
        self._queue.put((child, item))

    def get(self, timeout: float) -> tuple[int, T | None]:
        """The next item; ``queue.Empty`` when none came within ``timeout`` seconds."""
        return self._queue.get(timeout=timeout)


def supervise(
    children: Sequence[Pipes],
    events: Events[T],
    *,
    take: Callable[[int, T], None],
    exited: Callable[[int, int], None],
    done: Callable[[], bool],
    limit: Callable[[], str | None],
    cancel: threading.Event | None,
    cancelled: Callable[[], Exception],
    exit_wait_s: float,
    reap_wait_s: float = 0.0,
    on_tick: Callable[[], None] | None = None,
) -> str | None:
    """Follow ``children`` until ``done()``; the limit's reason when it stopped them.

    Each tick: ``on_tick()``; a set ``cancel`` kills every child's group and raises
    ``cancelled()``; ``limit()`` saying why to stop kills every group and returns
    the reason; else the next item goes to ``take(index, item)``, or, the child's stdout
    closed, its exit code (waited on ``exit_wait_s``, its group killed if it does not
    come) to ``exited(index, code)``. Every child is reaped on the way out."""
    try:
        while not done():
            if on_tick is not None:
                on_tick()
            if cancel is not None and cancel.is_set():
                _kill_all(children)
                raise cancelled()
            if (reason := limit()) is not None:
                _kill_all(children)
                return reason
            try:
                index, item = events.get(timeout=TICK_S)
            except queue.Empty:
                continue
            if item is None:
                exited(index, exit_code(children[index], exit_wait_s))
            else:
                take(index, item)
        return None
    finally:
        reap(children, reap_wait_s)


def exit_code(child: Pipes, wait_s: float) -> int:
    """The exit code of a child whose stdout closed: waited on ``wait_s``, then its group
    killed (a child that never exits reads as killed by SIGKILL)."""
    try:
        return child.proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        kill_group(child.proc)
        code = child.proc.poll()
        return -signal.SIGKILL if code is None else code


def reap(children: Sequence[Pipes], wait_s: float = 0.0) -> None:
    """Every child that still runs given ``wait_s`` (all together) to exit, then its group
    killed; every child's pipes joined."""
    deadline = time.monotonic() + wait_s
    for child in children:
        if child.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            if child.proc.poll() is None:
                kill_group(child.proc)
    for child in children:
        child.join()


def _kill_all(children: Sequence[Pipes]) -> None:
    """Every child's group killed (what a child left running too), and the child reaped."""
    for child in children:
        kill_group(child.proc)
