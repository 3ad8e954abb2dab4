"""The readahead fix as a measured route: by default as root, under every mmap stack, and
the mount's settings back after SIGINT, SIGTERM and (by the next command) SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadscope.diagnosis.doctor import DoctorOptions, run_doctor
from loadscope.model.targets import resolve
from loadscope.tools.emulator import fuse_connection_settings
from tests.conftest import REPO_ROOT, run_here, slow_synthetic

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="writing the mount's readahead needs root"),
]


@pytest.fixture
def slow_model(tmp_path: Path) -> Iterator[Path]:
    with slow_synthetic(tmp_path, 32 << 20, seed=13, latency_s=0.005) as path:
        yield path


def _settings(path: Path) -> dict[str, int]:
    dev = os.stat(path).st_dev
    return fuse_connection_settings(os.major(dev), os.minor(dev))


def test_the_default_doctor_measures_readahead_under_every_mmap_stack(
    slow_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOADSCOPE_STATE_DIR", str(tmp_path / "state"))
    before = _settings(slow_model)
    report = run_doctor(resolve(str(slow_model)), DoctorOptions(budget_s=15))
    assert _settings(slow_model) == before
    rec = next(r for r in report.advice.recommendations if r.id == "raise-readahead")
    assert rec.measured and rec.expected_speedup is not None, report.failures
    routes = {s.stack: s for s in rec.snippets if s.strategy == "readahead"}
    assert {"vllm", "sglang", "transformers"} <= set(routes)
    for s in routes.values():
        assert "read_ahead_kb" in s.code
        if s.stack == "transformers":
            continue
        # Its trials are its own run's, cited as that run's (never as this run's trial
        # ids, which number other trials), with the figure's range and spread.
        assert s.speedup == rec.expected_speedup and not s.trial_ids
        assert "its own run's trials #1" in s.proxy, s.proxy
        assert s.low is not None and s.high is not None and s.low <= s.speedup <= s.high
        assert s.how == rec.how and s.how.startswith(("measured", "estimated", "unsteady"))
    # transformers: from_pretrained itself with the readahead raised, against it as it is
    # (the model's code and construction count: far less than load_file's gain), or not
    # measured, saying why; never the load_file figure.
    hf = routes["transformers"]
    hf_ran = any(s.strategy == "hf-pretrained" and s.median_seconds for s in report.bench.summary)
    if hf_ran:
        assert hf.speedup is not None and hf.baseline == "hf-pretrained", hf
        assert hf.speedup != rec.expected_speedup and "from_pretrained with" in hf.proxy
    else:
        assert hf.speedup is None and hf.note.startswith("not measured here"), hf
    # The trials cited for a figure are the ones its median is of: as many as the table's
    # "trials" column says (the fit's smaller samples were cited too: "trials 2" beside
    # "trials 1, 15, 19").
    from loadscope.advice.facts import facts_from

    assert report.probe is not None and report.bench is not None
    facts = facts_from(report.probe, report.bench)
    for summary in report.bench.summary:
        if summary.median_seconds and summary.trials:
            cited = facts.trial_ids.get((summary.strategy, summary.cache), [])
            assert len(cited) == summary.trials, (summary.strategy, summary.cache, cited)
    shell = next(s for s in rec.snippets if s.stack == "shell")
    assert "udev" in shell.code and "DaemonSet" in shell.code
    # Measured, it ranks above every estimated fix.
    ranked = [r for r in report.advice.recommendations if not r.optional]
    assert all(r.measured for r in ranked[: ranked.index(rec) + 1])
    assert not list((tmp_path / "state").glob("settings-*.json"))


ONE_STACK = ("--stack", "safetensors")


def _doctor(model: Path, state: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "LOADSCOPE_STATE_DIR": str(state), "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen(
        # --stack: the check's settings are the subject, not which stack's code wins.
        [sys.executable, "-m", "loadscope", "doctor", str(model), "--budget", "12", *ONE_STACK],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for_change(proc: subprocess.Popen[str], model: Path) -> None:
    """Until the doctor has raised the mount's readahead (its readahead trial is running)."""
    deadline = time.monotonic() + 120
    while _settings(model)["read_ahead_kb"] != 8192:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the doctor never raised the readahead"
        time.sleep(0.005)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_the_settings_are_back_after_a_signal(
    slow_model: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    state = tmp_path / "state"
    before = _settings(slow_model)
    proc = _doctor(slow_model, state)
    try:
        _wait_for_change(proc, slow_model)
        assert list(state.glob("settings-*.json"))  # the journal came first
        os.killpg(proc.pid, sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if sig == signal.SIGKILL:
        # Nothing ran in the killed process: the raised value is still there ...
        assert _settings(slow_model)["read_ahead_kb"] == 8192
        # ... until the next loadscope command, whatever it is.
        env = {**os.environ, "LOADSCOPE_STATE_DIR": str(state)}
        nxt = run_here(
            [sys.executable, "-m", "loadscope", "inspect", str(slow_model)], env=env, timeout=60
        )
        assert nxt.returncode == 0, nxt.stderr
        assert "put back to 128" in nxt.stderr
    assert _settings(slow_model) == before
    assert not list(state.glob("settings-*.json"))
