"""Progress of a long command on stderr: redrawn in place on a terminal, lines otherwise.

One reporter for ``doctor``, ``bench``, ``probe`` and ``cluster`` (``warm`` and ``copy``
have :class:`ByteMeter`, the same three modes for bytes moved): the phase, the
running trial (k of N, strategy, cache state), its live rate and bytes, and the time
left of the budget. On a terminal it is one line redrawn in place (rich's ``Live``,
refreshed four times a second so the clock moves even between events, and removed
when the command ends); when stderr is not a terminal, or with ``--no-progress``, it
is one plain line per step (``[  12.3s] trial 3/12 mmap cold: 8.26 s, 65 MB/s``);
``--quiet`` says nothing. Nothing goes to stdout, so ``--json -`` stays parseable.

May import: ``loadscope.engine.bench``, ``loadscope.engine.broadcast``,
``loadscope.base``, and the engine's event types (lazily).
"""

from __future__ import annotations

import re
import sys
import threading
import time
from typing import Any, Literal, TextIO

from loadscope.base.units import format_bytes, format_rate

Mode = Literal["live", "lines", "off"]
#: What a plain progress line looks like (tests tell them from an error line by it).
LINE_RE = re.compile(r"^\[\s*\d+\.\d+s\] ")


def rate_suffix(bytes_per_s: float | None) -> str:
    """``, 65 MB/s`` after a time (decimal, as every report), or nothing when no rate was
    measured."""
    return f", {format_rate(bytes_per_s)}" if bytes_per_s else ""


def mode_for(args: Any, stream: TextIO) -> Mode:
    """``off`` with --quiet, ``lines`` with --no-progress or when ``stream`` is no terminal."""
    if getattr(args, "quiet", False):
        return "off"
    if getattr(args, "no_progress", False) or not stream.isatty():
        return "lines"
    return "live"


class Progress:
    """The reporter; use as a context manager. Thread-safe (trial events come from the
    engine's threads)."""

    def __init__(self, mode: Mode, *, budget_s: float | None = None, stream: TextIO | None = None):
        self.mode = mode
        self.budget_s = budget_s
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self.phase = ""
        self.trial = ""
        self.rate = ""
        self._ranks_done = 0
        self._planned = 0  # trials in the plan so far: it grows when the budget adds rounds
        # The round the budget added that is running: (its number, its first trial's
        # index, its size); None while the plan's own trials run.
        self._added: tuple[int, int, int] | None = None
        self._lock = threading.Lock()
        self._live: Any = None

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Progress:
        if self.mode == "live":
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.stream, stderr=True, highlight=False)
            self._live = Live(_Line(self), console=console, refresh_per_second=4, transient=True)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- what happens ---------------------------------------------------------------------

    def step(self, name: str) -> None:
        """A new phase (``probes: latency``, ``trials``, ``advice``)."""
        with self._lock:
            self.phase, self.trial, self.rate = name, "", ""
        self._line(name)

    def listener(self, event: object) -> None:
        """The engine's trial events (bench's TrialStarted / TrialProgress / TrialFinished,
        and ``bench --ranks``' BroadcastTrialStarted / RankFinished / BroadcastTrialFinished)."""
        from loadscope.engine.bench import TrialFinished, TrialProgress, TrialStarted
        from loadscope.engine.broadcast import (
            BroadcastTrialFinished,
            BroadcastTrialStarted,
            RankFinished,
        )

        if isinstance(event, BroadcastTrialStarted):
            b = event.trial
            warm = " (warm-up)" if b.warmup else ""
            self._started(f"trial {event.index + 1}/{event.total} {b.mode} {b.cache}{warm}")
        elif isinstance(event, RankFinished):
            with self._lock:
                self._ranks_done += 1
                self.rate = f"{self._ranks_done} rank(s) done"
        elif isinstance(event, BroadcastTrialFinished):
            b = event.trial
            ok = b.status == "ok" and b.slowest_seconds
            took = f"slowest rank {b.slowest_seconds:.3g} s" if ok else None
            self._finished(f"{b.mode} {b.cache}", took, b.bytes_per_s, b.status, b.reason)
        elif isinstance(event, TrialStarted):
            t = event.trial
            with self._lock:
                # A plan's first trial sets its size (a doctor may run more than one plan).
                if event.index == 0:
                    self._added = None
                added = event.total - self._planned if event.index > 0 else 0
                self._planned = event.total
                if added > 0:
                    # One total per round: "round 2: trial 1/16", not "17/32". A trial of
                    # round 1 added after the plan is a whole load the plan skipped (the
                    # engine's late trials, run before any extra round): numbered 0.
                    late = t.repeat == 1
                    after = self._added[0] + 1 if self._added else 2
                    number = 0 if late else max(t.repeat, after)
                    self._added = (number, event.index, added)
                counted = self._added
            if added > 0 and counted is not None:
                n = "trial" if added == 1 else "trials"
                more = (
                    f"{added} more {n}, first the whole loads the plan skipped"
                    if counted[0] == 0
                    else f"one more round (round {counted[0]}, {added} {n})"
                )
                self._line(f"time is left in the budget: {more}")
            if counted is None:
                k = f"trial {event.index + 1}/{event.total}"
            else:
                number, first, size = counted
                where = f"round {number}" if number else "more"
                k = f"{where}: trial {event.index - first + 1}/{size}"
            warm = " (warm-up)" if t.warmup else ""
            fit = " (fit)" if getattr(t, "fit", False) else ""
            self._started(f"{k} {t.strategy} {t.cache}{warm}{fit}")
        elif isinstance(event, TrialProgress):
            if event.total_bytes:
                pct = 100 * event.bytes_done / event.total_bytes
                rate = event.bytes_done / event.seconds if event.seconds > 0 else 0.0
                with self._lock:
                    self.rate = (
                        f"{pct:3.0f}% of {format_bytes(event.total_bytes)}  {format_rate(rate)}"
                    )
        elif isinstance(event, TrialFinished):
            t = event.trial
            took = f"{t.seconds:.3g} s" if t.status == "ok" and t.seconds else None
            self._finished(f"{t.strategy} {t.cache}", took, t.bytes_per_s, t.status, t.reason)

    def _started(self, trial: str) -> None:
        with self._lock:
            self.phase = "trials"
            self.trial = trial
            self.rate, self._ranks_done = "", 0

    def _finished(
        self,
        fallback: str,
        took: str | None,
        bytes_per_s: float | None,
        status: str,
        reason: str | None,
    ) -> None:
        """A trial's line: its label, then how long it took (and its rate) when ``took``
        says, else its status and reason."""
        with self._lock:
            label = self.trial or fallback
        if took is not None:
            self._line(f"{label}: {took}{rate_suffix(bytes_per_s)}")
        else:
            self._line(f"{label}: {status}: {reason or ''}".rstrip(": "))
        with self._lock:
            self.trial, self.rate = "", ""

    def note(self, text: str) -> None:
        """A one-off line (both modes): something worth a line of its own."""
        self._line(text)

    # -- drawing --------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def status(self) -> str:
        """The live line's text: phase or trial, rate, elapsed and what is left."""
        with self._lock:
            parts = [self.trial or self.phase or "starting"]
            if self.rate:
                parts.append(self.rate)
        spent = self.elapsed()
        clock = f"{spent:.0f} s"
        if self.budget_s:
            left = max(0.0, self.budget_s - spent)
            clock += f", ~{left:.0f} s of {self.budget_s:g} s left"
        parts.append(clock)
        return "  ".join(parts)

    def _line(self, text: str) -> None:
        if self.mode != "lines":
            return
        with self._lock:
            self.stream.write(f"[{self.elapsed():6.1f}s] {text}\n")
            self.stream.flush()


class _Line:
    """The live renderable: the reporter's status, fitted to the terminal's width."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.progress.status(), no_wrap=True, overflow="ellipsis", style="dim")


class ByteMeter:
    """Bytes moved (``warm``, ``copy``): on a terminal one line redrawn in place (bytes,
    rate, time left); in ``lines`` mode a plain line every ``every_s`` and at the end;
    nothing when ``off``. Call it with (done, total, seconds); :meth:`close` after."""

    def __init__(
        self, label: str, mode: Mode, stream: TextIO | None = None, every_s: float = 5.0
    ) -> None:
        self.label, self.mode, self.every_s = label, mode, every_s
        self.stream = stream if stream is not None else sys.stderr
        self._last = 0.0
        self._final: tuple[int, int, float] | None = None
        self._drawn = False

    def __call__(self, done: int, total: int, seconds: float) -> None:
        self._final = (done, total, seconds)
        gap = 0.2 if self.mode == "live" else self.every_s
        if self.mode == "off" or seconds - self._last < gap:
            return
        self._last = seconds
        self._show(done, total, seconds)

    def _show(self, done: int, total: int, seconds: float) -> None:
        rate = done / seconds if seconds > 0 else 0.0
        eta = f"{(total - done) / rate:.0f} s left" if rate > 0 and done < total else ""
        text = (
            f"{self.label} {format_bytes(done)} of {format_bytes(total)}"
            f"  {format_rate(rate)}  {eta}".rstrip()
        )
        if self.mode == "live":
            self.stream.write(f"\r{text[:78]:<78}")
            self._drawn = True
        else:
            self.stream.write(f"[{seconds:6.1f}s] {text}\n")
        self.stream.flush()

    def close(self) -> None:
        """The live line removed; in ``lines`` mode the last count said, if not yet."""
        if self.mode == "live" and self._drawn:
            self.stream.write("\r" + " " * 78 + "\r")
            self.stream.flush()
        elif self.mode == "lines" and self._final and self._final[2] > self._last:
            self._show(*self._final)
