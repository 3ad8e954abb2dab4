"""The fork server: workers forked with torch imported, each as isolated as a spawned one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from loadscope.engine.bench import BenchOptions, run_bench
from loadscope.loaders.forkserver import WORKER_NAME, ForkServer
from loadscope.model.targets import resolve
from loadscope.tools.synth import synthesize


def _wait_gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie":
            return True
        time.sleep(0.05)
    return False


def _blocked_spec(fifo: Path) -> str:
    """A worker told to read its spec from a FIFO with no writer: it stays alive, blocked."""
    return f"@{fifo}"


@pytest.fixture
def server() -> Iterator[ForkServer]:
    s = ForkServer()
    yield s
    s.close()


def test_a_forked_worker_is_its_own_named_process_group(server: ForkServer) -> None:
    proc = server.spawn(["--describe"])
    out = proc.stdout.read()
    assert proc.wait(timeout=30) == 0
    assert "mmap" in json.loads(out.strip().splitlines()[-1])
    assert proc.returncode == 0 and proc.poll() == 0

    bad = server.spawn(["--no-such-flag", "x"])
    assert bad.wait(timeout=30) == 2
    assert "usage" in bad.stdout.read()


def test_workers_run_in_the_parents_directory_and_die_with_the_server(
    server: ForkServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.mkfifo(tmp_path / "fifo.safetensors")
    monkeypatch.chdir(tmp_path)
    # A relative path: the worker blocks on it only if it runs in the parent's directory.
    proc = server.spawn([_blocked_spec(Path("fifo.safetensors"))])
    child = psutil.Process(proc.pid)
    time.sleep(0.5)
    assert proc.poll() is None, proc.stdout.read()
    assert child.name() == WORKER_NAME
    assert os.getpgid(proc.pid) == proc.pid  # killable with everything it starts
    assert os.getsid(proc.pid) == proc.pid
    assert child.cwd() == str(tmp_path)
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.2)
    # The server is SIGKILLed (nothing of it runs): the worker dies with it.
    os.kill(server._proc.pid, signal.SIGKILL)
    assert _wait_gone(proc.pid), "the worker outlived its fork server"
    assert proc.wait(timeout=10) == -signal.SIGKILL


def test_closing_the_server_kills_what_it_runs(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    server = ForkServer()
    proc = server.spawn([_blocked_spec(fifo)])
    assert proc.poll() is None
    server.close()
    assert _wait_gone(proc.pid)
    assert _wait_gone(server._proc.pid)


def test_killed_worker_reports_its_signal(server: ForkServer, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    proc = server.spawn([_blocked_spec(fifo)])
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM


def test_bench_without_the_fork_server_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synthesize(tmp_path / "m", 2 << 20, seed=3)
    monkeypatch.setenv("LOADSCOPE_FORKSERVER", "0")
    report = run_bench(
        resolve(str(tmp_path / "m")),
        BenchOptions(strategies=("mmap",), cache=("warm",), repeats=1, warmup=False),
    )
    (trial,) = report.trials
    assert trial.status == "ok" and trial.verified is True


def test_a_process_that_used_the_server_leaves_none_running_when_it_exits() -> None:
    """The server ended only after its parent had exited (its teardown with torch imported
    took ~1 s): a command timed from outside, or a script that deletes the model right
    after, met a loadscope process still running. Now the parent waits for it at exit."""
    import sys

    code = (
        "from loadscope.loaders.forkserver import shared_server\n"
        "s = shared_server()\n"
        "p = s.spawn(['-c', 'pass'], env=None)\n"
        "s.wait_for(p.pid, 30)\n"
        "print(s._proc.pid, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    pid = int(done.stdout.split()[-1])
    gone = not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    assert gone, psutil.Process(pid).cmdline()
