"""Failing storage, emulated: EIO after N bytes, a read that never answers, random EIO.

Each command meets each fault with a clear error naming the file (and the offset
where it can know it) or a timeout, kills what it started, and leaves no mount,
worker or partial file behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from loadscope.actions.localcopy import PARTIAL_SUFFIX, copy_model
from loadscope.actions.warm import evict, warm
from loadscope.base.errors import ReadFailed
from loadscope.diagnosis.doctor import DoctorOptions, run_doctor
from loadscope.engine.bench import BenchError, BenchOptions, run_bench
from loadscope.engine.probing import run_probes
from loadscope.model.inspection import inspect_target
from loadscope.model.targets import Target, resolve
from loadscope.tools.emulator import (
    EmulatorSettings,
    emulated_disk,
    fuse_unavailable_reason,
    is_mounted,
)
from loadscope.tools.synth import synthesize
from tests.conftest import REPO_ROOT, no_workers, tagged_processes

pytestmark = [
    pytest.mark.skipif(
        (why := fuse_unavailable_reason()) is not None, reason=f"emulated disk unavailable: {why}"
    ),
    pytest.mark.hardening("failing-storage"),
]

FAST = {"latency_s": 0.0005, "jitter_s": 0.0, "readahead_kb": 128}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("faulty") / "model"
    synthesize(root, 12 << 20, seed=31, shards=2)
    return root


def _open_past_headers(mnt_path: Path) -> None:
    """Resolve (headers read) before the fault budget runs out, then drop the cache."""
    evict(resolve(str(mnt_path)))


def _resolve_between_faults(path: Path) -> Target:
    """The index and headers, read before the fault budget runs out (or between random EIOs:
    a failure there is the right answer too, but the commands below are what is tested)."""
    for _ in range(50):
        try:
            target = resolve(str(path))
            inspect_target(target)
            return target
        except ReadFailed:
            continue
    raise AssertionError("no header read got through")


@pytest.mark.parametrize(
    "fault",
    [{"fail_after_bytes": 256 << 10}, {"eio_rate": 0.5, "seed": 3}],
    ids=["fail-after", "random-eio"],
)
def test_eio_is_one_clear_error_per_command(
    fault: dict[str, Any], source: Path, tmp_path: Path
) -> None:
    settings = EmulatorSettings(**FAST, **fault)
    mnt = tmp_path / "mnt"
    with emulated_disk(source, mnt, settings) as disk:
        target = _resolve_between_faults(disk.path)
        evict(target)
        with pytest.raises(ReadFailed, match=r"Input/output error at offset \d+") as warm_err:
            warm(target, threads=2, block_bytes=1 << 20)
        assert str(disk.path) in str(warm_err.value)
        dest = tmp_path / "dest"
        with pytest.raises(ReadFailed, match=r"Input/output error at offset \d+"):
            copy_model(target, dest, threads=2, block_bytes=1 << 20)
        assert not list(dest.rglob(f"*{PARTIAL_SUFFIX}"))
        assert not [p for p in dest.rglob("*.safetensors")]  # nothing unverified was renamed
        probe = run_probes(target, budget_s=3, local_disks=False)
        failed = [r for r in (probe.latency, probe.throughput) if not r.ok]
        assert failed, "the probes read past the fault and saw no error"
        assert re.search(r"read of .* at offset \d+ failed: Input/output error", failed[0].reason)
        try:
            report = run_bench(
                target, BenchOptions(strategies=("mmap",), cache=("cold",), repeats=1, warmup=False)
            )
        except Exception as exc:  # noqa: BLE001  (the parent's reference read may fail first)
            assert "Input/output error" in str(exc) or "EIO" in str(exc), exc
        else:
            (trial,) = report.trials
            assert trial.status == "failed"
            # A read() that fails is an error; a page fault on a mapping that fails is SIGBUS.
            assert re.search(r"error|SIGBUS", trial.reason or ""), trial.reason
        assert no_workers()
    assert not is_mounted(mnt)


def test_a_stall_is_a_timeout_not_a_hang(source: Path, tmp_path: Path) -> None:
    settings = EmulatorSettings(**FAST, stall_after_bytes=256 << 10)
    mnt = tmp_path / "mnt"
    t0 = time.monotonic()
    with emulated_disk(source, mnt, settings) as disk:
        target = resolve(str(disk.path))
        evict(target)
        with pytest.raises(ReadFailed, match="stopped answering"):
            warm(target, threads=2, block_bytes=1 << 20, stall_timeout_s=2)
        dest = tmp_path / "dest"
        with pytest.raises(ReadFailed, match="stopped answering"):
            copy_model(target, dest, threads=2, block_bytes=1 << 20, stall_timeout_s=2)
        assert not list(dest.rglob(f"*{PARTIAL_SUFFIX}"))
        options = BenchOptions(
            strategies=("mmap",), cache=("warm",), repeats=1, warmup=False, trial_timeout_s=3
        )
        try:
            report = run_bench(target, options)
        except BenchError as exc:  # the parent's reference read is what meets the stall first
            assert "stopped answering" in str(exc), exc
        else:
            (trial,) = report.trials
            assert trial.status == "failed" and "timed out" in (trial.reason or ""), trial.reason
        assert no_workers()
    assert not is_mounted(mnt)
    assert time.monotonic() - t0 < 120


def test_probes_and_doctor_meet_a_stall_with_a_bounded_clear_answer(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOADSCOPE_STALL_TIMEOUT", "2")
    settings = EmulatorSettings(**FAST, stall_after_bytes=1 << 20)
    mnt = tmp_path / "mnt"
    with emulated_disk(source, mnt, settings) as disk:
        target = resolve(str(disk.path))
        inspect_target(target)  # the headers come back before the stall
        evict(target)
        t0 = time.monotonic()
        probe = run_probes(target, budget_s=3, local_disks=False)
        took = time.monotonic() - t0
        assert took < 3 + 2 + 3, took  # its budget, one grace, and some slack
        assert probe.stalled is not None and "stopped answering" in probe.stalled
        assert str(disk.path) in probe.stalled and "at offset" in probe.stalled
        assert not probe.latency.ok or not probe.throughput.ok
        report = run_doctor(target, DoctorOptions(budget_s=8))
        assert report.advice.verdict.headline.startswith("the storage stopped answering")
        assert report.advice.recommendations[0].id == "storage-stalled"
        assert report.bench is None
        assert any(f.startswith("bench: not run") for f in report.failures)
        assert no_workers()
    assert not is_mounted(mnt)


def test_the_probe_command_says_what_is_stuck_and_returns(source: Path, tmp_path: Path) -> None:
    """A read the storage never answers cannot be killed (D state): the command says so and
    returns; the child holding the stuck read ends when the storage is unmounted."""
    settings = EmulatorSettings(**FAST, stall_after_bytes=1 << 20)
    mnt = tmp_path / "mnt"
    tag = uuid.uuid4().hex
    env = {
        **os.environ,
        "LOADSCOPE_STALL_TIMEOUT": "2",
        "PYTHONWARNINGS": "ignore",
        "LOADSCOPE_TEST_TAG": tag,
    }
    with emulated_disk(source, mnt, settings) as disk:
        evict(resolve(str(disk.path)))
        proc = subprocess.Popen(
            [sys.executable, "-m", "loadscope", "probe", str(disk.path), "--budget", "3"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        lines: list[str] = []
        timer = threading.Timer(60, proc.kill)
        timer.start()
        try:
            for line in proc.stderr:
                lines.append(line)
                if "still wait in the kernel" in line:
                    break
        finally:
            timer.cancel()
        assert any("still wait in the kernel" in ln for ln in lines), lines
        # The command returns now (its stuck child is left to the storage) and lets go
        # of its output: a pipe reader sees the end without waiting for the unmount.
        out, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        assert "stopped answering" in out
        assert "Traceback" not in "".join(lines) + err
        stuck = tagged_processes(tag)
    # Unmounted: the stuck read returns and the child ends too.
    assert not is_mounted(mnt)
    deadline = time.monotonic() + 15
    while [p for p in stuck if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]:
        assert time.monotonic() < deadline, "the stuck child outlived the unmount"
        time.sleep(0.2)
