"""The progress lines of ``bench`` and ``doctor``: a round the budget adds is said."""

from __future__ import annotations

import io

from loadscope.cli.progress import Progress
from loadscope.engine.bench import Trial, TrialFinished, TrialStarted


def _run(totals: list[int], repeats: list[int] | None = None) -> list[str]:
    out = io.StringIO()
    with Progress("lines", stream=out) as progress:
        for i, total in enumerate(totals):
            r = repeats[i] if repeats else 1
            trial = Trial(i + 1, "mmap", "cold", r, r == 0, seconds=1.0, bytes_per_s=1e6)
            progress.listener(TrialStarted(trial, i, total))
            progress.listener(TrialFinished(trial))
    return out.getvalue().splitlines()


def _counters(lines: list[str]) -> list[str]:
    """Each finished trial's counter: ``trial 1/4`` or ``round 2: trial 1/2``."""
    return [ln.split("] ", 1)[1].split(" mmap cold")[0] for ln in lines if "mmap cold" in ln]


def test_a_round_added_by_the_budget_is_said_before_its_first_trial() -> None:
    lines = _run([2, 2, 4, 4, 5], [1, 1, 2, 2, 3])
    # One total per round: the plan's "1/2", then each added round counted on its own
    # (it said "3/4", "4/4", "5/5": a total that jumped as rounds were added).
    assert _counters(lines) == [
        "trial 1/2",
        "trial 2/2",
        "round 2: trial 1/2",
        "round 2: trial 2/2",
        "round 3: trial 1/1",
    ]
    added = [i for i, ln in enumerate(lines) if "one more round" in ln]
    assert [lines[i].split("] ", 1)[1] for i in added] == [
        "time is left in the budget: one more round (round 2, 2 trials)",
        "time is left in the budget: one more round (round 3, 1 trial)",
    ]
    assert "round 2: trial 1/2" in lines[added[0] + 1]
    assert "round 3: trial 1/1" in lines[added[1] + 1]


def test_an_added_round_is_named_by_the_engines_round_number() -> None:
    # A warm-up round 0 and rounds 1 and 2 planned (16 trials), then the budget adds
    # rounds 3 and 4: "13/16", "17/32", "33/48" before.
    repeats = [0] * 4 + [1] * 6 + [2] * 6 + [3] * 6 + [4] * 6
    totals = [16] * 16 + [22] * 6 + [28] * 6
    counters = _counters(_run(totals, repeats))
    assert counters[12:17] == [
        "trial 13/16",
        "trial 14/16",
        "trial 15/16",
        "trial 16/16",
        "round 3: trial 1/6",
    ]
    assert counters[-7:-5] == ["round 3: trial 6/6", "round 4: trial 1/6"]
    assert counters[-1] == "round 4: trial 6/6"


def test_trial_rates_are_decimal_as_in_every_report() -> None:
    from loadscope.engine.bench import TrialProgress

    out = io.StringIO()
    with Progress("lines", stream=out) as progress:
        trial = Trial(1, "mmap", "cold", 1, False, seconds=2.0, bytes_per_s=1.5e9)
        progress.listener(TrialStarted(trial, 0, 1))
        progress.listener(TrialProgress(trial, 1.0, 1_500_000_000, 3_000_000_000))
        live = progress.status()
        progress.listener(TrialFinished(trial))
    # It said "1.4 GiB/s" mid-trial and "1.4 GiB/s" at the end, beside "1.5 GB/s" in reports.
    assert "1.5 GB/s" in live and "GiB/s" not in live, live
    assert out.getvalue().rstrip().endswith("trial 1/1 mmap cold: 2 s, 1.5 GB/s"), out.getvalue()


def test_whole_loads_the_plan_skipped_are_not_called_a_round() -> None:
    """Issue 49: the late whole trials (round 1, added after the plan) read "one more
    round (round 2, 1 trial)"; then an extra round after them is numbered as the engine
    numbers it."""
    lines = _run([2, 2, 3, 4], [1, 1, 1, 2])
    assert _counters(lines) == ["trial 1/2", "trial 2/2", "more: trial 1/1", "round 2: trial 1/1"]
    said = [ln.split("] ", 1)[1] for ln in lines if "time is left" in ln]
    assert said == [
        "time is left in the budget: 1 more trial, first the whole loads the plan skipped",
        "time is left in the budget: one more round (round 2, 1 trial)",
    ]


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
