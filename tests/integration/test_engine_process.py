"""The engine child the app drives: events in order, one ending, stop and death handled."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

from loadscope.actions.localcopy import PARTIAL_SUFFIX
from loadscope.diagnosis.engine_process import EngineProcess, bench_job, copy_job
from loadscope.engine.bench import BenchOptions
from loadscope.loaders.forkserver import WORKER_NAME
from loadscope.tools.synth import synthesize


def _descendants(proc: EngineProcess) -> list[psutil.Process]:
    try:
        return psutil.Process(proc.proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _workers() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == WORKER_NAME]


def _gone(pids: list[int], timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [
            p
            for p in pids
            if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        if not alive:
            return True
        time.sleep(0.1)
    return False


def test_a_bench_job_streams_its_trials_and_ends_once(tmp_path: Path) -> None:
    synthesize(tmp_path / "m", 4 << 20, seed=5)
    options = BenchOptions(strategies=("mmap", "fullread"), cache=("warm",), repeats=1)
    events = list(EngineProcess(bench_job(str(tmp_path / "m"), options)).events())
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "finished" and kinds.count("finished") == 1
    started = [e for e in events if e["event"] == "trial_started"]
    ended = [e for e in events if e["event"] == "trial_finished"]
    assert [e["trial"]["strategy"] for e in started] == ["mmap", "fullread"] * 2  # warm-up too
    assert [e["trial"]["id"] for e in ended] == [e["trial"]["id"] for e in started]
    assert all(e["trial"]["status"] == "ok" and e["trial"]["verified"] for e in ended)
    # Every progress event belongs to a trial that had started and not yet ended.
    open_trials: set[int] = set()
    for e in events:
        if e["event"] == "trial_started":
            open_trials.add(e["trial"]["id"])
        elif e["event"] == "trial_finished":
            open_trials.discard(e["trial"]["id"])
        elif e["event"] == "progress":
            assert e["trial_id"] in open_trials
    trials = events[-1]["report"]["bench"]["trials"]
    assert len(trials) == 4


def test_a_bad_target_is_one_failed_event(tmp_path: Path) -> None:
    options = BenchOptions(strategies=("mmap",), cache=("warm",), repeats=1)
    events = list(EngineProcess(bench_job(str(tmp_path / "missing"), options)).events())
    assert [e["event"] for e in events] == ["failed"]
    assert "missing" in events[0]["reason"]


def test_cancel_stops_the_run_and_leaves_no_process(tmp_path: Path) -> None:
    synthesize(tmp_path / "m", 8 << 20, seed=6)
    options = BenchOptions(strategies=("mmap", "fullread"), cache=("cold",), repeats=200)
    engine = EngineProcess(bench_job(str(tmp_path / "m"), options))
    seen: list[str] = []
    pids: list[int] = []
    for event in engine.events():
        seen.append(event["event"])
        if seen.count("trial_finished") == 2 and not pids:
            pids = [engine.proc.pid, *(p.pid for p in _descendants(engine))]
            engine.cancel()
    assert seen[-1] == "cancelled", seen[-5:]
    assert _gone(pids)
    assert _workers() == []


def test_a_killed_engine_is_a_failed_run_and_its_workers_die(tmp_path: Path) -> None:
    synthesize(tmp_path / "m", 8 << 20, seed=7)
    options = BenchOptions(strategies=("mmap", "fullread"), cache=("cold",), repeats=200)
    engine = EngineProcess(bench_job(str(tmp_path / "m"), options))
    last: dict[str, object] = {}
    pids: list[int] = []
    for event in engine.events():
        last = event
        if event["event"] == "trial_finished" and not pids:
            pids = [p.pid for p in _descendants(engine)]
            os.kill(engine.proc.pid, signal.SIGKILL)
    assert last["event"] == "failed"
    assert "code -9" in str(last["reason"])
    assert _gone(pids)  # the fork server saw its socket close; the workers died with it


def test_a_copy_job_streams_progress_and_stops_cleanly_when_cancelled(tmp_path: Path) -> None:
    synthesize(tmp_path / "m", 128 << 20, seed=8, shards=2)
    dest = tmp_path / "dest"
    engine = EngineProcess(copy_job(str(tmp_path / "m"), str(dest)))
    seen: list[str] = []
    for event in engine.events():
        seen.append(event["event"])
        if event["event"] == "apply_progress" and seen.count("apply_progress") == 1:
            assert 0 <= event["done"] <= event["total"]
            engine.cancel()
    assert seen[-1] == "cancelled", seen[-3:]
    assert not list(dest.rglob(f"*{PARTIAL_SUFFIX}"))  # stopped: no partial file left
    src = {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}
    for p in dest.iterdir():  # what did land under a final name is complete
        assert p.read_bytes() == src[p.name]
