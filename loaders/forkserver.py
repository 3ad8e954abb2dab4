"""A fork server for trial workers: torch is imported once, each trial is a fresh fork.

Starting a Python interpreter and importing torch costs ~2 s of CPU on a small
machine, before every trial: it ate the doctor's budget, competed with the app
for the CPU, and made up most of the test suite's time. The server
(``python -m loadscope.loaders.forkserver``, started by the parent with one end
of a Unix socket pair) imports torch, safetensors and the strategies, then for
each request forks a child that is exactly what a spawned worker was: its own
session and process group (killable with everything it starts), its stdout and
stderr on pipes the parent created (passed over the socket), the parent's
environment (or the one asked for) and working directory, and the ``main`` of a
``loadscope.loaders`` program (the trial worker, or a distributed rank) for the rest. The
server never runs a torch operation (no thread pool, no CUDA context exists to
be inherited); children are reaped by the server, which reports their exit
status back over the socket. It exits when the socket closes (the parent went
away, even if it was killed), killing what it still runs; its children die with
it (``PR_SET_PDEATHSIG``), so no worker outlives a killed loadscope.

Wire format, both ways: one JSON object per line. Requests carry two file
descriptors (stdout, stderr) with their first byte (``SCM_RIGHTS``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from typing import IO, Any

from loadscope.loaders.preload import FIRST_CALL_MODULE, PRELOAD_SECONDS, preload_once

_MAX_FDS = 2
_STDERR_TAIL = 20


class ForkServerError(RuntimeError):
    """The fork server could not be started or went away."""


#: A forked worker's name in ``ps -o comm``, ``top`` and psutil's ``name()``.
WORKER_NAME = "loadscope-trial"


def _as_worker() -> None:
    """Die with the (single-threaded) server, and be named for what this process is."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        libc.prctl(15, WORKER_NAME.encode())  # PR_SET_NAME


def _child(sock: socket.socket, request: dict[str, Any], fds: list[int], ready: int) -> None:
    """In the forked child: become a worker process and never return."""
    code = 1
    try:
        _as_worker()
        # The default dispositions before anyone is told this pid: a SIGTERM that came
        # between the two ran the server's own handler here and exited 1, not by signal.
        for signum in (signal.SIGCHLD, signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.setsid()
        os.close(ready)  # its own session exists: the server may now hand out its pid
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        sock.close()
        os.environ.clear()
        os.environ.update(request["env"])
        with contextlib.suppress(OSError):
            os.chdir(request["cwd"])
        sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, encoding="utf-8", closefd=False)
        import importlib

        program = request.get("module") or "loadscope.loaders.worker"
        if not program.startswith("loadscope.loaders."):
            raise ValueError(f"not a loadscope program: {program}")
        code = importlib.import_module(program).main(list(request["args"]))
    except BaseException:  # noqa: BLE001  (a child must never return into the server loop)
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _recv_request(
    sock: socket.socket, buffer: bytearray
) -> tuple[dict[str, Any], list[int]] | None:
    """One newline-terminated request and the fds that came with it; None at EOF."""
    fds: list[int] = []
    while b"\n" not in buffer:
        data, got, _flags, _addr = socket.recv_fds(sock, 1 << 16, _MAX_FDS)
        fds.extend(got)
        if not data:
            for fd in fds:
                os.close(fd)
            return None
        buffer.extend(data)
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line), fds


def serve(sock: socket.socket) -> int:
    import safetensors.torch  # noqa: F401  (the imports every child would otherwise repeat)
    import torch  # noqa: F401

    # What a user's first loadscope call pays beyond what their script imports (torch,
    # safetensors): the public API's modules, timed before anything here imports them, in
    # this thread's CPU time (the imports are CPU-bound; the server starts while its parent
    # is busy on 2 cores, and wall time read 83 ms for an import of 50-55 ms alone).
    with contextlib.suppress(Exception):
        t0 = time.thread_time()
        importlib.import_module(FIRST_CALL_MODULE)
        PRELOAD_SECONDS[FIRST_CALL_MODULE] = time.thread_time() - t0
    import loadscope.loaders.strategies
    import loadscope.probes.iosampler
    import loadscope.probes.pagecache  # noqa: F401  (what every child imports, imported once)

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    buffer = bytearray()
    children: set[int] = set()
    preloaded: set[str] = set()
    sock.sendall(b'{"ready": true}\n')
    while True:
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj is sock:
                got = _recv_request(sock, buffer)
                if got is None:
                    for pid in children:  # the parent is gone: so is what it started
                        with contextlib.suppress(OSError):
                            os.killpg(pid, signal.SIGKILL)
                    return 0
                request, fds = got
                if len(fds) != _MAX_FDS:
                    for fd in fds:
                        os.close(fd)
                    sock.sendall(b'{"error": "a request needs stdout and stderr fds"}\n')
                    continue
                preload_once(request.get("preload") or [], preloaded)
                if cuda_initialized():
                    # A forked child inherits the parent's CUDA context, unusable after a
                    # fork: every GPU worker would fail. The caller starts a fresh one.
                    for fd in fds:
                        os.close(fd)
                    sock.sendall(
                        b'{"error": "CUDA was initialised in the fork server by an import:'
                        b' a forked worker would inherit a broken context"}\n'
                    )
                    continue
                ready_r, ready_w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(ready_r)
                    _child(sock, request, fds, ready_w)
                os.close(ready_w)
                os.read(ready_r, 1)  # EOF once the child has its own process group (or died)
                os.close(ready_r)
                children.add(pid)
                for fd in fds:
                    os.close(fd)
                sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
        _reap(sock, children)


def cuda_initialized() -> bool:
    """Whether torch's CUDA runtime is initialised in this process (torch not imported:
    no)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    return bool(cuda is not None and cuda.is_initialized())


def _reap(sock: socket.socket, children: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.discard(pid)
        code = os.waitstatus_to_exitcode(status)
        sock.sendall(json.dumps({"exit": pid, "code": code}).encode() + b"\n")


#: The server's own folder for what its imports write under the temp dir (transformers
#: imports torch's inductor, which makes its cache folder there): removed when the
#: server ends, and by the next server when this one was killed outright.
OWN_DIR_PREFIX = "loadscope-forkserver-"


def _exit_cleanly(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


def main() -> int:
    import shutil

    from loadscope.base.tempdirs import owned_tempdir

    # The terminal's signals (Ctrl-C, the hang-up of a closed SSH session) reach the whole
    # foreground group: they are the parent's to handle, which then closes the socket, and
    # this server ends through the clean-up below. A SIGTERM of its own ends it there too.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_cleanly)
    sock = socket.socket(fileno=int(sys.argv[1]))
    own = owned_tempdir(OWN_DIR_PREFIX)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(own / "torchinductor")
    try:
        return serve(sock)
    except (BrokenPipeError, ConnectionResetError):
        return 0
    finally:
        shutil.rmtree(own, ignore_errors=True)


# -- the parent's side -------------------------------------------------------------------------


class ForkedProcess:
    """One forked worker as the parent sees it: the parts of ``Popen`` the bench uses."""

    def __init__(self, server: ForkServer, pid: int, stdout: IO[str], stderr: IO[str]) -> None:
        self._server = server
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr

    @property
    def returncode(self) -> int | None:
        return self._server.exit_code(self.pid)

    @property
    def server_gone(self) -> str | None:
        """Why its fork server went away (its children die with it), or None."""
        return self._server.dead

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self._server.wait_for(self.pid, timeout)


class ForkServer:
    """The parent's handle on one fork server process (thread-safe)."""

    def __init__(self, start_timeout_s: float = 120) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock = mine
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "loadscope.loaders.forkserver", str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as exc:
            mine.close()
            raise ForkServerError(f"cannot start {sys.executable}: {exc.strerror}") from None
        finally:
            theirs.close()
        self._stderr: deque[str] = deque(maxlen=_STDERR_TAIL)
        self._lock = threading.Lock()  # one request and its reply at a time
        self._cond = threading.Condition()
        self._replies: deque[dict[str, Any]] = deque()
        self._codes: dict[int, int] = {}
        self._ready = False
        self.dead: str | None = None
        threading.Thread(target=self._read, daemon=True, name="forkserver-reader").start()
        threading.Thread(target=self._drain_stderr, daemon=True, name="forkserver-err").start()
        with self._cond:
            if not self._cond.wait_for(lambda: self._ready or self.dead, start_timeout_s):
                self.close()
                raise ForkServerError(f"not ready after {start_timeout_s:.0f} s")
            if self.dead:
                raise ForkServerError(self.dead)

    def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr.append(line.rstrip("\n"))

    def _read(self) -> None:
        with self._sock.makefile("r", encoding="utf-8") as lines:
            for line in lines:
                msg = json.loads(line)
                with self._cond:
                    if "ready" in msg:
                        self._ready = True
                    elif "exit" in msg:
                        self._codes[int(msg["exit"])] = int(msg["code"])
                    else:
                        self._replies.append(msg)
                    self._cond.notify_all()
        self._proc.wait()
        tail = next((x for x in reversed(self._stderr) if x.strip()), "")
        with self._cond:
            self.dead = f"the fork server exited with code {self._proc.returncode}" + (
                f": {tail.strip()[:200]}" if tail else ""
            )
            self._cond.notify_all()

    def spawn(
        self,
        args: list[str],
        *,
        env: dict[str, str] | None = None,
        module: str = "loadscope.loaders.worker",
        preload: list[str] | None = None,
    ) -> ForkedProcess:
        """Fork a child running ``module.main(args)`` (a ``loadscope.loaders`` program) with
        ``env`` (default: this process's environment); its stdout and stderr are pipes.
        ``preload``: modules the server imports (once) before this fork."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            request = json.dumps(
                {
                    "args": args,
                    "env": dict(os.environ) if env is None else env,
                    "cwd": os.getcwd(),
                    "module": module,
                    "preload": list(preload or []),
                }
            )
            payload = request.encode() + b"\n"
            with self._lock:
                if self.dead:
                    raise ForkServerError(self.dead)
                try:
                    socket.send_fds(self._sock, [payload[:1]], [out_w, err_w])
                    self._sock.sendall(payload[1:])
                except OSError as exc:
                    raise ForkServerError(f"the fork server is gone: {exc}") from exc
                with self._cond:
                    self._cond.wait_for(lambda: self._replies or self.dead)
                    if not self._replies:
                        raise ForkServerError(self.dead or "the fork server is gone")
                    reply = self._replies.popleft()
            if "pid" not in reply:
                raise ForkServerError(str(reply.get("error", reply)))
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        return ForkedProcess(
            self,
            int(reply["pid"]),
            os.fdopen(out_r, "r", encoding="utf-8", errors="replace"),
            os.fdopen(err_r, "r", encoding="utf-8", errors="replace"),
        )

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            if pid in self._codes:
                return self._codes[pid]
            if self.dead:  # its children were killed with it (PR_SET_PDEATHSIG)
                return -signal.SIGKILL
            return None

    def wait_for(self, pid: int, timeout: float | None) -> int:
        with self._cond:
            if not self._cond.wait_for(lambda: pid in self._codes or self.dead, timeout):
                raise subprocess.TimeoutExpired(f"worker {pid}", timeout or 0)
        code = self.exit_code(pid)
        assert code is not None
        return code

    def close(self) -> None:
        """Close the socket: the server kills what it still runs and exits."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10)


_shared: list[ForkServer] = []  # this process's one server, once started
_shared_lock = threading.Lock()


def shared_server() -> ForkServer:
    """This process's fork server, started on first use and again if it died; closed,
    and waited for, when this process exits (none is left running after it)."""
    with _shared_lock:
        if not _shared:
            atexit.register(_close_shared)
        if not _shared or _shared[0].dead:
            _shared[:] = [ForkServer()]
        return _shared[0]


def _close_shared() -> None:
    with _shared_lock:
        for server in _shared:
            server.close()


def enabled() -> bool:
    """``LOADSCOPE_FORKSERVER=0`` spawns a fresh interpreter per trial instead."""
    return os.environ.get("LOADSCOPE_FORKSERVER", "1") != "0"


if __name__ == "__main__":
    # Run as a program, this module is __main__: what imports it by its name must find
    # this one, not a fresh copy.
    sys.modules.setdefault("loadscope.loaders.forkserver", sys.modules[__name__])
    code = main()
    # Its folder removed, nothing is left to do: the interpreter's teardown with torch
    # imported took ~1 s, which the parent waits for at exit (a process left behind).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
