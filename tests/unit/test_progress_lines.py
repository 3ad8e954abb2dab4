"""The progress lines of ``bench`` and ``doctor``: a round the budget adds is said."""

from __future__ import annotations

import io

from loadscope.cli.progress import Progress
from loadscope.engine.bench import Trial, TrialFinished, TrialStarted


def _run(totals: list[int]) -> list[str]:
    out = io.StringIO()
    with Progress("lines", stream=out) as progress:
        for i, total in enumerate(totals):
            trial = Trial(i + 1, "mmap", "cold", 1, False, seconds=1.0, bytes_per_s=1e6)
            progress.listener(TrialStarted(trial, i, total))
            progress.listener(TrialFinished(trial))
    return out.getvalue().splitlines()


def test_a_round_added_by_the_budget_is_said_before_its_first_trial() -> None:
    lines = _run([2, 2, 4, 4, 5])
    trials = [ln for ln in lines if "trial " in ln and "mmap cold" in ln]
    assert [t.split("trial ")[1].split()[0] for t in trials] == ["1/2", "2/2", "3/4", "4/4", "5/5"]
    added = [i for i, ln in enumerate(lines) if "one more round" in ln]
    assert [lines[i].split("] ", 1)[1] for i in added] == [
        "time is left in the budget: one more round (2 trials)",
        "time is left in the budget: one more round (1 trial)",
    ]
    assert "3/4" in lines[added[0] + 1] and "5/5" in lines[added[1] + 1]


def test_a_plan_that_does_not_grow_says_nothing_of_rounds() -> None:
    assert not any("one more round" in ln for ln in _run([3, 3, 3]))


def test_a_second_plan_larger_than_the_first_is_not_a_round_added() -> None:
    out = io.StringIO()
    with Progress("lines", stream=out) as progress:
        for index, total in ((0, 2), (1, 2), (0, 5)):  # a second run_bench: index 0 again
            trial = Trial(index + 1, "mmap", "cold", 1, False, seconds=1.0)
            progress.listener(TrialStarted(trial, index, total))
            progress.listener(TrialFinished(trial))
    assert "one more round" not in out.getvalue()
