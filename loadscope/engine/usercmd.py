"""One run of the user's own command, timed and watched: what ``loadscope time`` measures.

The command runs exactly as given (an argv list, no shell unless the user wrote one), as
this user, in its own session and process group, its output passed through as it comes
(to the terminal, or a file) and matched line by line against an ``until`` pattern; or a
``ready`` URL is polled. The clock stops at exit, at the first matching line, or when
the URL answers 2xx; a command that exits non-zero (or before its ready signal) failed
and is not timed. While it runs, every :data:`SAMPLE_S` the whole process tree is
sampled (at most a tenth of one core: the watcher shares the machine with the
command): bytes read from storage and by read calls (``/proc/PID/io``, kept per
process so that exited children still count), the tree's resident memory, and the
model files' page-cache residency (mincore); at the end the waited
tree's rusage gives major faults and the largest process's peak RSS, and the block
device under the model (when it is one) its read requests and their average size
(device-wide: other readers count too, which the result says). Files the tree opened
or mapped are collected, for runs that did not name the model. Whatever way the run
ends (exit, ready, timeout, Ctrl-C, SIGTERM), the process group is stopped: SIGTERM,
then SIGKILL after :data:`GRACE_S`.

May import: ``loadscope.probes``, ``loadscope.base``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol

from loadscope.base.processes import start_session
from loadscope.probes.pagecache import residency

#: How often the tree is sampled.
SAMPLE_S = 0.1
#: How often a run that must find the model's files (not timed) looks at what is open.
DISCOVER_S = 0.02
#: How long a stopped command's group gets between SIGTERM and SIGKILL.
GRACE_S = 5.0
#: Weight files a run without ``--model`` looks for among the files the tree opened.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack")
#: Smaller files are configs and tokenizers, not weights.
MIN_WEIGHT_BYTES = 1 << 20
#: The last lines of a run's output kept (stderr's, else stdout's): what a failure said.
TAIL_LINES = 12

Status = Literal["ok", "failed", "timeout", "stopped"]


@dataclass(frozen=True, slots=True)
class RunSpec:
    """What to run and how to tell it is done."""

    argv: tuple[str, ...]
    #: Files whose residency is followed (the model's weights); may be empty.
    watch: tuple[str, ...] = ()
    until: re.Pattern[str] | None = None
    ready_url: str | None = None
    timeout_s: float = 3600.0
    #: Where the command's stdout and stderr go (None: this process's own).
    output: IO[bytes] | None = None
    #: Set from another thread to stop the run (the app's Stop): not timed, "stopped".
    cancel: threading.Event | None = None
    #: Told the command's pid once it is spawned, and that it ended (a profiler).
    recorder: Recorder | None = None


class Recorder(Protocol):
    """What watches the run beside loadscope's own sampling (``engine/phase_recorder.py``)."""

    def start(self, pid: int, t0: float) -> None:
        """The command is ``pid``, spawned at ``t0`` (``time.perf_counter()``: the run's
        clock, its tree samples' zero)."""

    def stop(self) -> None: ...

    #: Run in the command's process before its program (``preexec_fn``), or None: how a
    #: profiler gets leave to attach where the kernel limits ptrace to descendants.
    @property
    def before_exec(self) -> Callable[[], None] | None: ...


@dataclass(slots=True)
class TreeSample:
    """The command's process tree at one moment: its reads, RSS and the model's residency."""

    t: float
    read_bytes: int
    rchar: int
    rss_bytes: int
    resident: float | None


@dataclass(slots=True)
class RunResult:
    status: Status
    #: To exit, to the ``until`` line, or to the URL's answer; None when not timed.
    seconds: float | None
    ready_by: str
    exit_code: int | None
    reason: str = ""
    matched: str | None = None
    major_faults: int | None = None
    storage_read_bytes: int | None = None
    read_call_bytes: int | None = None
    peak_rss_bytes: int | None = None
    #: Read requests the block device under the model completed, and their mean size.
    device_requests: int | None = None
    device_request_bytes: float | None = None
    device: str = ""
    samples: list[TreeSample] = field(default_factory=list)
    #: The share of the watched files in the page cache as the run ended: what it read,
    #: for a run that started evicted (None: not watched, or mincore not allowed).
    resident_after: float | None = None
    #: Weight files the tree opened or mapped (absolute paths).
    opened: list[str] = field(default_factory=list)
    #: The last lines the command wrote (stderr's when it wrote any, else stdout's).
    tail: list[str] = field(default_factory=list)
    #: Why the command's output could not be written where it goes (a full disk).
    output_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RunResult:
        """A run read back from ``time --json`` (fields it does not know are left out)."""
        known = set(cls.__dataclass_fields__)
        fields = {k: v for k, v in doc.items() if k in known and k != "samples"}
        run = cls(**fields)
        names = TreeSample.__dataclass_fields__
        run.samples = [TreeSample(**{k: s[k] for k in names}) for s in doc.get("samples") or []]
        return run


class _Output:
    """Pass one of the command's streams through, and watch it for the ``until`` line."""

    def __init__(self, src: IO[bytes], dst: IO[bytes] | int, until: re.Pattern[str] | None):
        self.src, self.dst, self.until = src, dst, until
        self.matched: tuple[float, str] | None = None
        #: The last lines, for a command that failed.
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        #: Why the output could not be passed on (the first failed write), if it could not.
        self.error: str | None = None
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _write(self, data: bytes) -> None:
        try:
            if isinstance(self.dst, int):
                os.write(self.dst, data)
            else:
                self.dst.write(data)
                self.dst.flush()
        except (OSError, ValueError) as exc:  # a full disk, a closed pipe: said, not raised
            if self.error is None:
                self.error = getattr(exc, "strerror", None) or str(exc)

    def _pump(self) -> None:
        pending = b""
        fd = self.src.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                if pending:
                    self._check(pending)
                return
            self._write(chunk)
            pending += chunk
            *lines, pending = re.split(rb"[\r\n]", pending)
            for line in lines:
                self._check(line)
            if len(pending) > 1 << 20:  # a line without end: look at what there is
                self._check(pending)
                pending = b""

    def _check(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace")
        if text.strip():
            self.tail.append(text.rstrip()[:300])
        if self.until is None or self.matched is not None:
            return
        if self.until.search(text):
            self.matched = (time.perf_counter(), text.strip())


class _Tree:
    """The command's process tree, sampled: read bytes and rchar kept per process (an
    exited child's last values still count), resident memory summed over the live ones."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.io: dict[int, tuple[int, int]] = {}
        self.opened: set[str] = set()

    def pids(self) -> list[int]:
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            with contextlib.suppress(OSError):
                for task in os.listdir(f"/proc/{p}/task"):
                    text = Path(f"/proc/{p}/task/{task}/children").read_text()
                    todo.extend(int(c) for c in text.split())
        return out

    def sample(self, opened: bool) -> tuple[int, int, int]:
        rss = 0
        for p in self.pids():
            with contextlib.suppress(OSError, ValueError):
                fields = dict(
                    line.split(": ", 1) for line in Path(f"/proc/{p}/io").read_text().splitlines()
                )
                self.io[p] = (int(fields["read_bytes"]), int(fields["rchar"]))
            with contextlib.suppress(OSError, ValueError, IndexError):
                rss += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf(
                    "SC_PAGE_SIZE"
                )
            if opened:
                self._collect(p)
        return sum(r for r, _ in self.io.values()), sum(c for _, c in self.io.values()), rss

    def _collect(self, pid: int) -> None:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    self._keep(os.readlink(f"/proc/{pid}/fd/{fd}"))
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    self._keep(parts[5])

    def _keep(self, path: str) -> None:
        if path.endswith(WEIGHT_SUFFIXES) and path not in self.opened:
            with contextlib.suppress(OSError):
                if os.path.getsize(path) >= MIN_WEIGHT_BYTES:
                    self.opened.add(path)


def block_stat(path: str) -> tuple[str, tuple[int, int] | None]:
    """The block device under ``path`` ("8:0"-style name) and its (reads completed,
    sectors read) now; None where the storage is not a block device (FUSE, NFS, tmpfs)."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return "", None
    name = f"{os.major(dev)}:{os.minor(dev)}"
    if os.major(dev) == 0:
        return name, None
    try:
        fields = Path(f"/sys/dev/block/{name}/stat").read_text().split()
        return name, (int(fields[0]), int(fields[2]))
    except (OSError, IndexError, ValueError):
        return name, None


def _url_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return 200 <= int(response.status) < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


class _Waiter:
    """wait4 the command itself on a thread: the exit's time to the microsecond, and the
    rusage of the command and of every child it waited for."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.exit_code: int | None = None
        self.usage: Any = None
        self.at: float | None = None
        self.done = threading.Event()
        threading.Thread(target=self._wait, daemon=True).start()

    def _wait(self) -> None:
        try:
            _, status, self.usage = os.wait4(self.proc.pid, 0)
            self.exit_code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            self.exit_code = -1
        self.at = time.perf_counter()
        self.proc.returncode = self.exit_code  # Popen must not wait for it again
        self.done.set()


def _stop_group(pgid: int, waiter: _Waiter) -> None:
    """SIGTERM the command's process group, SIGKILL what is left after GRACE_S."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + GRACE_S
    while time.monotonic() < end:
        if waiter.done.is_set() and not _group_alive(pgid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    waiter.done.wait(timeout=GRACE_S)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Clock:
    """When the residency of the watched files may be read again: mincore over a big
    model is not free, so it takes at most a tenth of the sampling thread's time."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = files
        self.next_at = 0.0
        self.last: float | None = None

    def resident(self, now: float) -> float | None:
        if not self.files or now < self.next_at:
            return self.last
        t0 = time.perf_counter()
        total = got = 0
        for f in self.files:
            r = residency(f)
            if r.fraction is None:
                self.last = None
                return None
            total += r.size_bytes
            got += r.resident_bytes or 0
        self.last = got / total if total else None
        self.next_at = now + max(SAMPLE_S, 10 * (time.perf_counter() - t0))
        return self.last


def run_once(spec: RunSpec) -> RunResult:
    """Run ``spec.argv`` once, watched (see the module docstring)."""
    device, before = block_stat(spec.watch[0]) if spec.watch else ("", None)
    out: IO[bytes] | int = spec.output if spec.output is not None else 1
    err: IO[bytes] | int = spec.output if spec.output is not None else 2
    t0 = time.perf_counter()
    proc: subprocess.Popen[bytes] | None = None
    waiter: _Waiter | None = None
    streams: list[_Output] = []
    tree, clock = _Tree(0), _Clock(spec.watch)
    result = RunResult("failed", None, "exit", None)
    # Everything from the spawn on inside the try: a Ctrl-C or SIGTERM that lands between
    # the spawn and the watch must still stop the command (its group is its own session,
    # so the terminal's signal never reaches it).
    spawned: list[subprocess.Popen[bytes]] = []
    try:
        try:
            hook = spec.recorder.before_exec if spec.recorder is not None else None
            proc = start_session(
                list(spec.argv),
                spawned,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                **({"preexec_fn": hook} if hook is not None else {}),
            )
        except OSError as exc:
            result.reason = f"cannot run {spec.argv[0]}: {exc.strerror or exc}"
            result.ready_by = ""
            return result
        assert proc.stdout is not None and proc.stderr is not None
        waiter = _Waiter(proc)
        streams = [_Output(proc.stdout, out, spec.until), _Output(proc.stderr, err, spec.until)]
        tree = _Tree(proc.pid)
        if spec.recorder is not None:
            spec.recorder.start(proc.pid, t0)
        _watch(spec, waiter, streams, tree, clock, t0, result)
    finally:
        # A stop signal held during the spawn raised as it returned: the child is in
        # ``spawned``, never in ``proc``; it is stopped all the same.
        proc = proc or (spawned[0] if spawned else None)
        if proc is not None:
            waiter = waiter or _Waiter(proc)
            if not waiter.done.is_set() or _group_alive(proc.pid):
                _stop_group(proc.pid, waiter)
            for s in streams:
                s.thread.join(timeout=2.0)
            for pipe in (proc.stdout, proc.stderr):
                with contextlib.suppress(OSError, AttributeError):
                    pipe.close()  # type: ignore[union-attr]
        if spec.recorder is not None:
            spec.recorder.stop()
    assert waiter is not None
    if waiter.usage is not None:
        result.major_faults = int(waiter.usage.ru_majflt)
        result.peak_rss_bytes = int(waiter.usage.ru_maxrss) * 1024
    result.storage_read_bytes = sum(r for r, _ in tree.io.values())
    result.read_call_bytes = sum(c for _, c in tree.io.values())
    after = block_stat(spec.watch[0])[1] if spec.watch else None
    result.device = device
    if before is not None and after is not None:
        result.device_requests = after[0] - before[0]
        if result.device_requests > 0:
            result.device_request_bytes = (after[1] - before[1]) * 512 / result.device_requests
    if spec.watch:
        clock.next_at = 0.0  # read now, whenever it was last read
        result.resident_after = clock.resident(time.perf_counter())
    result.opened = sorted(tree.opened)
    result.tail = list(streams[1].tail or streams[0].tail)
    result.output_error = next((s.error for s in streams if s.error), None)
    return result


def _ready(streams: list[_Output]) -> tuple[float, str] | None:
    return next((s.matched for s in streams if s.matched), None)


def _watch(
    spec: RunSpec,
    waiter: _Waiter,
    streams: list[_Output],
    tree: _Tree,
    clock: _Clock,
    t0: float,
    result: RunResult,
) -> None:
    result.ready_by = "until" if spec.until else "url" if spec.ready_url else "exit"
    next_sample = 0.0
    # Only a run that must find the model's files looks at what the tree opened.
    discover = not spec.watch
    while True:
        now = time.perf_counter()
        if now >= next_sample:
            read, rchar, rss = tree.sample(opened=discover)
            result.samples.append(TreeSample(now - t0, read, rchar, rss, clock.resident(now)))
            # The watcher shares the CPU with the command: at most a tenth of one core. A
            # run that finds the model's files (not timed) looks every DISCOVER_S.
            every = DISCOVER_S if discover else SAMPLE_S
            next_sample = now + max(every, 10 * (time.perf_counter() - now) * (not discover))
        if (matched := _ready(streams)) is not None:
            result.status, result.seconds, result.matched = "ok", matched[0] - t0, matched[1]
            return
        if spec.ready_url and _url_ready(spec.ready_url):
            result.status, result.seconds = "ok", time.perf_counter() - t0
            return
        if waiter.done.is_set():
            _ended(spec, waiter, streams, t0, result)
            return
        if spec.cancel is not None and spec.cancel.is_set():
            result.status, result.reason = "stopped", "stopped before it finished: not timed"
            return
        if now - t0 > spec.timeout_s:
            result.status = "timeout"
            result.reason = f"timed out after {spec.timeout_s:g} s: stopped, not timed"
            return
        waiter.done.wait(min(SAMPLE_S, max(0.0, next_sample - time.perf_counter())) or 0.005)


def _ended(
    spec: RunSpec, waiter: _Waiter, streams: list[_Output], t0: float, result: RunResult
) -> None:
    """The command exited: timed when it exited 0 (or printed its ready line first)."""
    result.exit_code = waiter.exit_code
    for s in streams:  # the last lines may hold the ready line
        s.thread.join(timeout=2.0)
    if (matched := _ready(streams)) is not None:
        result.status, result.seconds, result.matched = "ok", matched[0] - t0, matched[1]
    elif waiter.exit_code != 0:
        result.reason = f"the command failed (exit {waiter.exit_code}): not timed"
    elif result.ready_by != "exit":
        what = "its --until line" if result.ready_by == "until" else "--ready answering"
        result.reason = f"the command exited (exit 0) before {what}: not timed"
    else:
        result.status, result.seconds = "ok", (waiter.at or time.perf_counter()) - t0
