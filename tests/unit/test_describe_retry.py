"""The strategies' description survives a fork server that went away (CI saw a describe
worker end with exit code -9 and nothing said: its server had died, and a server's
children die with it); a worker that fails with a reason is not asked again."""

from __future__ import annotations

import signal
from types import SimpleNamespace
from typing import Any

import pytest

from loadscope.engine import trial_run
from loadscope.engine.bench_records import BenchError


def _fake_workers(outcomes: list[tuple[int, list[str], list[str]]]) -> list[Any]:
    made: list[Any] = []

    def make(_spec: Any) -> Any:
        code, lines, said = outcomes[len(made)]
        worker = SimpleNamespace(
            proc=SimpleNamespace(wait=lambda timeout: code),
            lines=lines,
            pipes=SimpleNamespace(join_stdout=lambda: None, stderr=said),
        )
        made.append(worker)
        return worker

    return [make, made]


def test_a_worker_killed_before_it_said_anything_is_asked_once_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make, made = _fake_workers([(-signal.SIGKILL, [], []), (0, ['{"mmap": {}}'], [])])
    monkeypatch.setattr(trial_run, "_Worker", make)
    assert trial_run.describe_strategies() == {"mmap": {}}
    assert len(made) == 2


def test_a_worker_that_says_why_it_failed_is_not_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make, made = _fake_workers([(1, [], ["ImportError: no torch"]), (0, ['{"mmap": {}}'], [])])
    monkeypatch.setattr(trial_run, "_Worker", make)
    with pytest.raises(BenchError, match="cannot start a loader worker: ImportError: no torch"):
        trial_run.describe_strategies()
    assert len(made) == 1


def test_killed_twice_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    make, made = _fake_workers([(-signal.SIGKILL, [], []), (-signal.SIGKILL, [], [])])
    monkeypatch.setattr(trial_run, "_Worker", make)
    with pytest.raises(BenchError, match="exit code -9"):
        trial_run.describe_strategies()
    assert len(made) == 2
