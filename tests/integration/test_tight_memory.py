"""A memory cgroup smaller than the model: the guard skips what would not fit, the doctor
still finishes with what is safe and says why, and an OOM that happens anyway is named.

The test makes its own cgroup with whichever memory controller the machine has (v2
``memory.max`` or v1 ``memory.limit_in_bytes``, as root) and runs loadscope inside it;
it skips with the reason where neither can be written.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadscope.probes.memory import oom_kills
from loadscope.tools.synth import synthesize
from tests.conftest import run_here

pytestmark = [pytest.mark.integration, pytest.mark.hardening("tight-memory")]

MiB = 1 << 20
LIMIT = 320 * MiB
MODEL = 384 * MiB


@dataclass
class Cgroup:
    path: Path
    version: int

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside this cgroup (the shell joins it, then execs)."""
        script = f'echo $$ > "{self.path}/cgroup.procs" && exec "$@"'
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        return run_here(["sh", "-c", script, "sh", *argv], env=env, timeout=timeout)

    def oom_kills(self) -> int:
        name, key = (
            ("memory.events", "oom_kill")
            if self.version == 2
            else ("memory.oom_control", "oom_kill")
        )
        for line in (self.path / name).read_text().splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
        return 0

    def procs(self) -> list[int]:
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]


def _own(controller_line: str) -> str:
    return controller_line.split(":", 2)[2].strip("/")


def _make_cgroup() -> Cgroup | str:
    """A fresh cgroup with the limit set, or why none can be made here."""
    if os.geteuid() != 0:
        return "needs root to create a memory cgroup"
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    name = f"loadscope-test-{os.getpid()}"
    v1 = next((ln for ln in lines if "memory" in ln.split(":")[1].split(",")), None)
    if v1 is not None and Path("/sys/fs/cgroup/memory").is_dir():
        path = Path("/sys/fs/cgroup/memory") / _own(v1) / name
        try:
            path.mkdir()
            (path / "memory.limit_in_bytes").write_text(str(LIMIT))
            with contextlib.suppress(OSError):  # swap accounting may be off
                (path / "memory.memsw.limit_in_bytes").write_text(str(LIMIT))
            return Cgroup(path, 1)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.rmdir()
            return f"cgroup v1 memory controller not writable: {exc}"
    v2 = next((ln for ln in lines if ln.startswith("0::")), None)
    base = Path("/sys/fs/cgroup")
    if v2 is not None and (base / "cgroup.controllers").exists():
        parent = base / _own(v2)
        if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
            return "cgroup v2: the memory controller is not enabled for child cgroups here"
        path = parent / name
        try:
            path.mkdir()
            (path / "memory.max").write_text(str(LIMIT))
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")
            return Cgroup(path, 2)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.rmdir()
            return f"cgroup v2 memory controller not writable: {exc}"
    return "no memory cgroup controller mounted"


@pytest.fixture
def cgroup() -> Iterator[Cgroup]:
    made = _make_cgroup()
    if isinstance(made, str):
        pytest.skip(made)
    try:
        yield made
    finally:
        deadline = time.monotonic() + 10
        while made.procs() and time.monotonic() < deadline:
            time.sleep(0.1)
        leftover = made.procs()
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        time.sleep(0.2)
        with contextlib.suppress(OSError):
            made.path.rmdir()
        assert not leftover, f"processes left in the cgroup: {leftover}"


@pytest.fixture(scope="module")
def big_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tight") / "model"
    synthesize(root, MODEL, seed=5, shards=2)
    return root


def test_doctor_finishes_with_what_fits_and_says_why(
    cgroup: Cgroup, big_model: Path, tmp_path: Path
) -> None:
    before = cgroup.oom_kills()
    out = tmp_path / "report.json"
    done = cgroup.run(
        sys.executable, "-m", "loadscope", "doctor", str(big_model), "--budget", "25",
        "--stack", "safetensors", "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 10, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    report = json.loads(out.read_text())
    # The probe saw the limit; the guard skipped the strategies that hold the model in RAM.
    assert report["probe"]["system"]["cgroup"]["limit_bytes"] == LIMIT
    skipped = report["bench"]["skipped"]
    assert "fullread" in skipped and "cgroup limit" in skipped["fullread"]
    # What does fit still ran: the mmap baseline, cold.
    ok = [t for t in report["bench"]["trials"] if t["status"] == "ok"]
    assert any(t["strategy"] == "mmap" and t["cache"] == "cold" for t in ok)
    # A warm cache cannot be reached under this limit: not tried, and said so.
    assert not [t for t in report["bench"]["trials"] if t["cache"] == "warm"]
    assert any("warm trials not run" in n for n in report["bench"]["notes"])
    # The verdict names the real problem.
    assert report["verdict"]["headline"].startswith("memory: the 384 MiB model does not fit")
    assert report["recommendations"][0]["id"] == "memory-limit"
    assert cgroup.oom_kills() == before, "the guard let a worker be OOM-killed"


def test_an_oom_kill_is_reported_as_one(cgroup: Cgroup, big_model: Path) -> None:
    # Force the guard open: a full read of 384 MiB in 320 MiB must be OOM-killed, and said so.
    script = (
        "from loadscope.engine.bench import BenchOptions, run_bench\n"
        "from loadscope.model.targets import resolve\n"
        f"r = run_bench(resolve({str(big_model)!r}), BenchOptions(strategies=('fullread',),"
        " cache=('cold',), repeats=1, warmup=False, memory_headroom_bytes=1 << 40))\n"
        "for t in r.trials: print(t.status, t.reason)\n"
    )
    before = cgroup.oom_kills()
    done = cgroup.run(sys.executable, "-c", script)
    assert done.returncode == 0, done.stderr[-2000:]
    assert cgroup.oom_kills() > before
    assert "failed worker killed by the OOM killer" in done.stdout
    assert f"cgroup limit is {LIMIT >> 20} MiB" in done.stdout


def test_oom_counter_is_readable_here() -> None:
    # The machine-wide counter (/proc/vmstat) exists on every kernel since 4.13.
    assert oom_kills() is not None
