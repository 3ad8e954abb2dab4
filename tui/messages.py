"""Typed messages from the engine to the app: one dataclass per event.

The app's engine runs in a child process (``loadscope.diagnosis.engine_process``) whose
JSON-line events ``message_from_wire`` turns into these.

Progress samples are cumulative (bytes done so far), so a newer one of the same
trial supersedes a queued older one (``can_replace``): a slow UI drops stale
samples instead of falling behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from loadscope.engine.bench import Trial


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
    #: Where the engine kept the report (``loadscope report --last`` finds it), or why not.
    kept: str | None = None
    kept_why: str = ""


@dataclass
class ApplyProgress(Message):
    """A fix being applied (warm, copy): bytes done of total."""

    done: int
    total: int
    seconds: float

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ApplyProgress)


@dataclass
class ApplyFinished(Message):
    result: dict[str, Any]


@dataclass
class TimeFinished(Message):
    """The user's own command timed (``loadscope time``'s table, and its JSON)."""

    result: dict[str, Any]
    text: str


@dataclass
class RunFailed(Message):
    reason: str


@dataclass
class RunCancelled(Message):
    reason: str


def _trial(d: dict[str, Any]) -> Trial:
    return Trial(**d)


def message_from_wire(event: dict[str, Any]) -> Message | None:
    """The app's message for one event line of the engine process (None: not for the app)."""
    kind = event.get("event")
    if kind == "step":
        return StepStarted(event["name"])
    if kind == "probes":
        return ProbesReady(event["probe"])
    if kind == "trial_started":
        return TrialBegan(_trial(event["trial"]), event["index"], event["total"])
    if kind == "progress":
        return TrialSample(
            event["trial_id"],
            event["seconds"],
            event["bytes_done"],
            event["total_bytes"],
            event.get("pid"),
            event.get("major_faults"),
            event.get("read_syscalls"),
            event.get("read_bytes"),
        )
    if kind == "trial_finished":
        return TrialEnded(_trial(event["trial"]))
    if kind == "apply_progress":
        return ApplyProgress(event["done"], event["total"], event["seconds"])
    if kind == "finished" and "apply" in event["report"]:
        return ApplyFinished(event["report"]["apply"])
    if kind == "finished" and "time" in event["report"]:
        return TimeFinished(event["report"]["time"], event["report"]["text"])
    if kind == "finished":
        return RunFinished(event["report"], event.get("kept"), event.get("kept_why") or "")
    if kind == "cancelled":
        return RunCancelled(event["reason"])
    if kind == "failed":
        return RunFailed(event["reason"])
    return None
