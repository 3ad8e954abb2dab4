"""Typed messages from the engine thread to the app: one dataclass per event.

Progress samples are cumulative (bytes done so far), so a newer one of the same
trial supersedes a queued older one (``can_replace``): a slow UI drops stale
samples instead of falling behind.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from textual.message import Message

from loadscope.bench import BenchEvent, Trial, TrialProgress, TrialStarted


@dataclass
class StepStarted(Message):
    name: str


@dataclass
class ProbesReady(Message):
    probe: dict[str, Any]


@dataclass
class TrialBegan(Message):
    trial: Trial
    index: int
    total: int


@dataclass
class TrialSample(Message):
    trial_id: int
    seconds: float
    bytes_done: int
    total_bytes: int
    pid: int | None
    major_faults: int | None
    read_syscalls: int | None
    read_bytes: int | None

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TrialSample) and message.trial_id == self.trial_id


@dataclass
class TrialEnded(Message):
    trial: Trial


@dataclass
class RunFinished(Message):
    report: dict[str, Any]


@dataclass
class RunFailed(Message):
    reason: str


@dataclass
class RunCancelled(Message):
    reason: str


def message_for(event: BenchEvent) -> Message:
    """The app's message for one engine event; trials are copied, never shared with the
    engine thread that keeps mutating its own."""
    if isinstance(event, TrialStarted):
        return TrialBegan(copy.copy(event.trial), event.index, event.total)
    if isinstance(event, TrialProgress):
        return TrialSample(
            event.trial.id,
            event.seconds,
            event.bytes_done,
            event.total_bytes,
            event.pid,
            event.major_faults,
            event.read_syscalls,
            event.read_bytes,
        )
    return TrialEnded(copy.deepcopy(event.trial))
