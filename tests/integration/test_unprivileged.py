"""probe, bench and doctor as an unprivileged user (``setpriv --reuid=65534``).

What needs root says so; the rest works. Residency reads "unknown" in the probe
report where mincore hides it (never a false 0%), and a cold trial is still
verified: by sampling pages with RWF_NOWAIT reads, which any reader may do.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadscope.base.errors import ExitCode
from loadscope.engine.bench import BenchOptions, WorkerStartFailed, run_bench
from loadscope.loaders import forkserver
from loadscope.model.targets import resolve
from loadscope.probes.pagecache import ColdCache, nowait_residency, residency
from loadscope.tools.synth import synthesize
from tests.as_nobody import NOBODY, SETPRIV, reachable_dir
from tests.conftest import REPO_ROOT, run_here

pytestmark = [pytest.mark.integration, pytest.mark.hardening("no-privileges")]


@dataclass(frozen=True)
class Nobody:
    python: str
    env: dict[str, str]
    home: Path

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        assert SETPRIV is not None
        return run_here(
            [SETPRIV, *NOBODY, self.python, "-m", "loadscope", *args], env=self.env, timeout=timeout
        )


#: The interpreter must import loadscope and start itself again (workers are its children).
_CAN_RUN = (
    "import subprocess, sys, loadscope.cli, torch, safetensors;"
    " subprocess.run([sys.executable, '-c', 'import loadscope'], check=True)"
)


def _interpreters() -> list[str]:
    found = [sys.executable, getattr(sys, "_base_executable", ""), os.path.realpath(sys.executable)]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found += [f"/usr/bin/{version}", f"/usr/local/bin/{version}", shutil.which(version) or ""]
    return list(dict.fromkeys(p for p in found if p))


@pytest.fixture(scope="module")
def nobody() -> Iterator[Nobody]:
    """How to run loadscope as nobody: an interpreter nobody may execute, with our imports.

    A virtualenv under root's private home cannot be executed by nobody; the same
    version's system interpreter with this interpreter's import path can.
    """
    if os.geteuid() != 0 or SETPRIV is None:
        pytest.skip("needs root and setpriv to run loadscope as an unprivileged user")
    home = Path(tempfile.mkdtemp(prefix="loadscope-nobody-home-"))
    os.chown(home, 65534, 65534)
    path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": path, "PYTHONWARNINGS": "ignore"}
    env.pop("LOADSCOPE_DEBUG", None)
    env.pop("HF_HUB_CACHE", None)
    try:
        for python in _interpreters():
            ok = subprocess.run(
                [SETPRIV, *NOBODY, python, "-c", _CAN_RUN],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                check=False,
            )
            if ok.returncode == 0:
                yield Nobody(python, env, home)
                return
        pytest.skip("user nobody can execute no Python interpreter that imports loadscope")
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_model() -> Iterator[Path]:
    """A model owned by root, readable by all, writable by nobody else (a shared /models)."""
    with reachable_dir("loadscope-shared-", 0o755) as base:
        root = base / "model"
        synthesize(root, 24 << 20, seed=9, shards=2)
        for p in [root, *root.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o444)
        yield root


@pytest.fixture
def outdir() -> Iterator[Path]:
    with reachable_dir("loadscope-nobody-out-", 0o777) as d:
        yield d


def test_probe_as_nobody(nobody: Nobody, shared_model: Path) -> None:
    done = nobody.run("probe", str(shared_model), "--budget", "4", "--json", "-")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for f in report["files"]:
        # mincore would claim every page resident: the report must say unknown, not 0%/100%.
        assert f["residency"]["fraction"] is None
        assert "unknown" in f["residency"]["note"]
    assert report["latency"]["status"] == "ok", report["latency"]
    assert report["throughput"]["status"] == "ok", report["throughput"]


def test_bench_as_nobody_verifies_cold_by_sampling(
    nobody: Nobody, shared_model: Path, outdir: Path
) -> None:
    out = outdir / "bench.json"
    done = nobody.run(
        "bench", str(shared_model), "--strategies", "mmap,fullread", "--repeats", "2",
        "--json", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    cold = [t for t in report["trials"] if t["cache"] == "cold" and t["status"] == "ok"]
    assert cold and sum(t["cache_verified"] for t in cold) >= len(cold) - 1, cold
    assert any("RWF_NOWAIT" in t["detail"].get("cache_note", "") for t in cold)
    medians = {(s["strategy"], s["cache"]): s["median_seconds"] for s in report["summary"]}
    assert medians[("mmap", "cold")] is not None


def test_doctor_as_nobody(nobody: Nobody, shared_model: Path, outdir: Path) -> None:
    out = outdir / "doctor.json"
    done = nobody.run(
        "doctor", str(shared_model), "--budget", "20", "--stack", "safetensors", "--json", str(out)
    )
    assert done.returncode in (0, 10), done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(out.read_text())
    assert report["verdict"]["headline"]
    assert any(s["median_seconds"] for s in report["bench"]["summary"])


def test_a_report_path_nobody_cannot_write_is_refused_first(
    nobody: Nobody, shared_model: Path
) -> None:
    done = nobody.run("doctor", str(shared_model), "--json", "/root/report.json")
    assert done.returncode == ExitCode.PERMISSION, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "/root/report.json" in lines[0], done.stderr
    assert "took" not in done.stdout  # refused before any probe ran


def test_sampling_leaves_a_cold_file_cold(tmp_path: Path) -> None:
    # A file of its own: no other test's worker may still be reading it.
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(8 << 20))
    assert ColdCache().evict(f).verified
    assert nowait_residency(f) == 0.0
    assert residency(f).pages_resident == 0  # root sees the truth: the probes left nothing
    with open(f, "rb") as fh:
        fh.read()
    assert nowait_residency(f) == 1.0


def test_an_interpreter_that_cannot_start_is_one_clear_error(
    synth_single: object, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    model = tmp_path / "m"
    synthesize(model, 1 << 20, seed=1)
    with pytest.raises(WorkerStartFailed, match="cannot start a loader worker: /nonexistent"):
        run_bench(resolve(str(model)), BenchOptions(worker_argv=("/nonexistent/python",)))
    locked = tmp_path / "python"
    locked.write_text("#!/bin/sh\n")
    locked.chmod(0o644)  # not executable
    monkeypatch.setattr(sys, "executable", str(locked))
    with pytest.raises(forkserver.ForkServerError, match="cannot start"):
        forkserver.ForkServer()


def test_time_profile_without_ptrace_says_why_and_still_times(
    nobody: Nobody, shared_model: Path
) -> None:
    """Issue 52: ``time --profile`` of a command that makes itself non-dumpable, as a user
    that is not root: py-spy may not attach; one line says why and how to allow it, and
    the timing completes."""
    from loadscope.engine.profiler import py_spy

    spy = py_spy()
    if spy is None:
        pytest.skip("py-spy is not installed")
    with reachable_dir("loadscope-nobody-spy-", 0o755) as base:
        (base / "bin").mkdir()
        shutil.copy(spy, base / "bin" / "py-spy")
        (base / "bin").chmod(0o755)
        script = base / "start.py"
        script.write_text(
            "import ctypes, time\n"
            "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no ptrace\n"
            "time.sleep(0.5)\n"
        )
        script.chmod(0o644)
        env = {**nobody.env, "PATH": f"{base / 'bin'}{os.pathsep}{nobody.env.get('PATH', '')}"}
        done = run_here(
            [SETPRIV, *NOBODY, nobody.python, "-m", "loadscope", "time", "--profile",  # type: ignore[list-item]
             "--rounds", "1", "--fixes", "none", "--model", str(shared_model), "--quiet",
             "--", nobody.python, str(script)],
            env=env, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    text = " ".join(done.stdout.split())  # the reason, wrapped at 80 columns
    assert text.count("where the time goes") == 1, done.stdout
    # py-spy may take a first sample before the command shuts it out: said as well.
    said = ("not profiled: py-spy took no sample", "not profiled: py-spy sampled")
    assert any(f"where the time goes: {x}" in text for x in said), text
    assert "ptrace was most likely refused" in text or "ptrace not permitted" in text, text
    assert "SYS_PTRACE" in text  # how to allow it
    assert "as is, cold" in done.stdout  # the timing itself stands
