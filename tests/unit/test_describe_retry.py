"""The strategies' description survives a fork server that went away (CI saw a describe
worker end with exit code -9 and nothing said: its server had died, and a server's
children die with it); a worker that failed on its own is not asked again."""

from __future__ import annotations

import signal
from types import SimpleNamespace
from typing import Any

import pytest

from loadscope.engine import trial_run
from loadscope.engine.bench_records import BenchError

GONE = "the fork server exited with code -9"
Outcome = tuple[int, list[str], list[str], str | None]


def _fake_workers(outcomes: list[Outcome]) -> list[Any]:
    made: list[Any] = []

    def make(_spec: Any) -> Any:
        code, lines, said, gone = outcomes[len(made)]
        worker = SimpleNamespace(
            proc=SimpleNamespace(wait=lambda timeout: code, server_gone=gone),
            lines=lines,
            pipes=SimpleNamespace(join=lambda: None, stderr=said),
        )
        made.append(worker)
        return worker

    return [make, made]


def test_a_worker_whose_server_went_away_is_asked_once_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make, made = _fake_workers([(-signal.SIGKILL, [], [], GONE), (0, ['{"mmap": {}}'], [], None)])
    monkeypatch.setattr(trial_run, "_Worker", make)
    assert trial_run.describe_strategies() == {"mmap": {}}
    assert len(made) == 2


@pytest.mark.parametrize(
    ("outcome", "says"),
    [
        ((1, [], ["ImportError: no torch"], None), "ImportError: no torch"),
        ((-signal.SIGKILL, [], [], None), "exit code -9"),  # killed itself (an OOM kill)
    ],
    ids=["says-why", "killed-alone"],
)
def test_a_worker_that_failed_on_its_own_is_not_asked_again(
    monkeypatch: pytest.MonkeyPatch, outcome: Outcome, says: str
) -> None:
    make, made = _fake_workers([outcome, (0, ['{"mmap": {}}'], [], None)])
    monkeypatch.setattr(trial_run, "_Worker", make)
    with pytest.raises(BenchError, match=f"cannot start a loader worker: {says}"):
        trial_run.describe_strategies()
    assert len(made) == 1


def test_a_server_gone_twice_is_one_clear_error_naming_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make, made = _fake_workers([(-signal.SIGKILL, [], [], GONE), (-signal.SIGKILL, [], [], GONE)])
    monkeypatch.setattr(trial_run, "_Worker", make)
    with pytest.raises(BenchError, match=GONE):
        trial_run.describe_strategies()
    assert len(made) == 2
