"""The engine in its own process, speaking JSON lines: what the app drives.

Run in a thread of the app's own process, the engine (reference digests, cache
eviction and verification, event decoding, /proc sampling) held the app's GIL
often enough to push input-to-screen latency past 200 ms on two cores. Here it
runs in a child, ``python -m loadscope.diagnosis.engine_process JOB_JSON``, which prints
one JSON event per line (``step``, ``probes``, ``trial_started``, ``progress``,
``trial_finished``, then exactly one of ``finished``, ``cancelled``,
``failed``); the parent only reads lines.

Stopping: the parent closes the child's stdin (or the child gets SIGTERM or
SIGINT); the child sets the engine's cancel event, which kills the running
worker's process group, and exits. If the parent dies, stdin closes too. If the
child is killed outright, its fork server sees its socket close and kills the
workers (``loaders/forkserver.py``): nothing is left behind either way.

Jobs: ``{"kind": "diagnose", "spec", "budget_s", "emulate": {EmulatorSettings
fields} | null, "synth_dir", "device", "ranks"}`` (probes, trials, advice, as ``doctor``) or
``{"kind": "bench", "spec", "options": {"strategies", "cache", "repeats",
"warmup"}}`` (a fixed set of trials, as ``bench``), ``{"kind": "warm", "spec",
"threads"}`` and ``{"kind": "copy", "spec", "dest"}`` (the fixes loadscope
applies, with ``apply_progress`` events), and ``{"kind": "time", "spec", "argv"}`` (the
user's own command, cold as it is and after each no-code fix, ``step`` events per run).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict
from typing import IO, Any

from loadscope.actions.localcopy import CopyCancelled, copy_model
from loadscope.actions.warm import WarmCancelled, warm
from loadscope.base.errors import LoadscopeError
from loadscope.base.processes import start_session
from loadscope.diagnosis.session import SessionRequest, diagnose
from loadscope.diagnosis.timing import TimeCancelled
from loadscope.engine.bench import (
    BenchCancelled,
    BenchEvent,
    BenchOptions,
    TrialProgress,
    TrialStarted,
    run_bench,
)
from loadscope.engine.probing import ProbeReport
from loadscope.model.inspection import open_checked
from loadscope.report.store import save
from loadscope.tools.emulator import EmulatorSettings

#: The most progress events per trial per second passed on (the app draws at 5 Hz).
PROGRESS_HZ = 20
_STDERR_TAIL = 20
TERMINAL_EVENTS = ("finished", "cancelled", "failed")


def job_for(request: SessionRequest) -> dict[str, Any]:
    """The wire form of a diagnosis request."""
    return {
        "kind": "diagnose",
        "spec": request.spec,
        "budget_s": request.budget_s,
        "emulate": asdict(request.emulate) if request.emulate is not None else None,
        "synth_dir": request.synth_dir,
        "device": request.device,
        "ranks": request.ranks,
        "stacks": list(request.stacks),
    }


def warm_job(spec: str, threads: int = 8) -> dict[str, Any]:
    """The wire form of ``loadscope warm``: the model read into the page cache."""
    return {"kind": "warm", "spec": spec, "threads": threads}


def copy_job(spec: str, dest: str) -> dict[str, Any]:
    """The wire form of ``loadscope copy``: the model copied to ``dest``, verified."""
    return {"kind": "copy", "spec": spec, "dest": dest}


def bench_job(spec: str, options: BenchOptions) -> dict[str, Any]:
    """The wire form of a fixed set of trials."""
    return {
        "kind": "bench",
        "spec": spec,
        "options": {
            "strategies": list(options.strategies or ()),
            "cache": list(options.cache),
            "repeats": options.repeats,
            "warmup": options.warmup,
        },
    }


# -- the child ----------------------------------------------------------------------------------


class _Wire:
    """Events out on the real stdout, progress thinned to PROGRESS_HZ per trial."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()
        self._last: dict[int, float] = {}

    def send(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields}, default=str)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def bench_event(self, event: BenchEvent) -> None:
        if isinstance(event, TrialStarted):
            self.send(
                "trial_started", trial=asdict(event.trial), index=event.index, total=event.total
            )
        elif isinstance(event, TrialProgress):
            now = time.monotonic()
            if now - self._last.get(event.trial.id, 0.0) < 1 / PROGRESS_HZ:
                return
            self._last[event.trial.id] = now
            self.send(
                "progress",
                trial_id=event.trial.id,
                seconds=event.seconds,
                bytes_done=event.bytes_done,
                total_bytes=event.total_bytes,
                pid=event.pid,
                major_faults=event.major_faults,
                read_syscalls=event.read_syscalls,
                read_bytes=event.read_bytes,
            )
        else:
            self.send("trial_finished", trial=asdict(event.trial))


def _run_job(job: dict[str, Any], wire: _Wire, cancel: threading.Event) -> None:
    if job["kind"] == "diagnose":
        emulate = job.get("emulate")
        request = SessionRequest(
            job["spec"],
            float(job["budget_s"]),
            EmulatorSettings(**emulate) if emulate else None,
            job.get("synth_dir"),
            job.get("device") or "auto",
            job.get("ranks"),
            tuple(job.get("stacks") or ()),
        )

        def on_probes(probe: ProbeReport) -> None:
            wire.send("probes", probe=json.loads(probe.to_json()))

        report = diagnose(
            request,
            listener=wire.bench_event,
            on_probes=on_probes,
            progress=lambda name: wire.send("step", name=name),
            cancel=cancel,
        )
        text = report.to_json()
        # Kept as every doctor run's is: `loadscope report --last` renders it, `o` opens it.
        kept, why = save(text, request.spec)
        wire.send(
            "finished", report=json.loads(text), kept=str(kept) if kept else None, kept_why=why
        )
    elif job["kind"] == "bench":
        o = job["options"]
        options = BenchOptions(
            strategies=tuple(o["strategies"]) or None,
            cache=tuple(o["cache"]),
            repeats=int(o["repeats"]),
            warmup=bool(o["warmup"]),
            cancel=cancel,
        )
        with open_checked(job["spec"], loads=True) as target:
            bench = run_bench(target, options, wire.bench_event)
        wire.send("finished", report={"bench": json.loads(bench.to_json())})
    elif job["kind"] in ("warm", "copy"):
        last = [0.0]

        def progress(done: int, total: int, seconds: float) -> None:
            if seconds - last[0] >= 1 / PROGRESS_HZ or done >= total:
                last[0] = seconds
                wire.send("apply_progress", done=done, total=total, seconds=seconds)

        with open_checked(job["spec"]) as target:
            if job["kind"] == "warm":
                result = warm(
                    target, threads=int(job.get("threads") or 8), progress=progress, cancel=cancel
                ).to_dict()
            elif not target.on_files:  # a bucket: `loadscope copy s3://...`'s own code
                from loadscope.actions.storecopy import copy_from_store

                result = copy_from_store(
                    target.spec, job["dest"], progress=progress, cancel=cancel
                ).to_dict()
            else:
                result = copy_model(target, job["dest"], progress=progress, cancel=cancel).to_dict()
        wire.send("finished", report={"apply": {"kind": job["kind"], **result}})
    elif job["kind"] == "time":
        from loadscope.diagnosis.timing import for_doctor
        from loadscope.diagnosis.timing_text import to_text

        timed = for_doctor(
            job["spec"],
            tuple(job["argv"]),
            progress=lambda line: wire.send("step", name=line),
            lock=True,
            cancel=cancel,
            profile=bool(job.get("profile")),
        )
        wire.send("finished", report={"time": timed.to_dict(), "text": to_text(timed)})
    else:
        raise LoadscopeError(f"unknown job kind {job['kind']!r}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Events go to the real stdout; anything else printed goes to stderr.
    wire = _Wire(os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8"))
    os.dup2(2, 1)
    cancel = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: cancel.set())

    def watch_stdin() -> None:
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.read(1 << 16):
                pass
        cancel.set()  # the parent closed our stdin, or went away

    threading.Thread(target=watch_stdin, daemon=True, name="stdin-watch").start()
    try:
        _run_job(json.loads(args[0]), wire, cancel)
        return 0
    except (BenchCancelled, WarmCancelled, CopyCancelled, TimeCancelled) as exc:
        wire.send("cancelled", reason=str(exc))
        return 0
    except LoadscopeError as exc:
        wire.send("failed", reason=str(exc))
        return int(exc.exit_code)
    except Exception as exc:  # noqa: BLE001  (the child's one funnel: a failed event)
        wire.send("failed", reason=f"internal error: {type(exc).__name__}: {exc}")
        return 1


# -- the parent ---------------------------------------------------------------------------------


class EngineProcess:
    """One engine child: its events as dicts, and a stop that always works."""

    def __init__(self, job: dict[str, Any]) -> None:
        # A session of its own: the terminal's Ctrl-C is the app's to handle.
        self.proc = start_session(
            [sys.executable, "-m", "loadscope.diagnosis.engine_process", json.dumps(job)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._stderr: deque[str] = deque(maxlen=_STDERR_TAIL)
        threading.Thread(target=self._drain_stderr, daemon=True, name="engine-err").start()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line.rstrip("\n"))

    def events(self) -> Iterator[dict[str, Any]]:
        """Every event until the child exits; a child that dies without saying how it
        ended yields a ``failed`` event with its exit code and last stderr line."""
        assert self.proc.stdout is not None
        ended = False
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            ended = ended or event.get("event") in TERMINAL_EVENTS
            yield event
        code = self.proc.wait()
        if not ended:
            tail = next((x for x in reversed(self._stderr) if x.strip()), "")
            why = f"the engine exited with code {code}" + (
                f": {tail.strip()[:200]}" if tail else ""
            )
            yield {"event": "failed", "reason": f"{why}: {tail.strip()[:200]}" if tail else why}

    def cancel(self, grace_s: float = 15) -> None:
        """Ask the child to stop (stdin closed); kill it if it has not within ``grace_s``."""
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()

        def reaper() -> None:
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)

        threading.Thread(target=reaper, daemon=True, name="engine-reaper").start()


if __name__ == "__main__":
    sys.exit(main())
