"""The copy route measured (issue 49): a sample of the model copied to the local disk and
loaded cold there against in place, round after round; the copy fix then carries that
figure with its range and the copy's own time, and nothing is left on the disk."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from loadscope.advice.rules import LocalDiskFacts, advise_facts
from loadscope.diagnosis.copy_trial import ROUNDS, measure_copy, sample_files
from loadscope.model.targets import resolve
from tests.conftest import slow_synthetic
from tests.unit.test_advice import facts

pytestmark = pytest.mark.integration


def _digest(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def _copy_fix(model: Path, local: Path):  # type: ignore[no-untyped-def]
    target = resolve(str(model))
    f = facts({"mmap": 1.0, "auto": 0.9}, model=target.total_bytes)
    f.model_root = f.model_path = str(model)
    f.local_disk = LocalDiskFacts(str(local), 50 << 30, 1e9, 2e9, True)
    rec = next(r for r in advise_facts(f).recommendations if r.id == "copy-to-local-disk")
    return target, f, rec


def test_the_copy_fix_carries_the_copy_trials_figure(tmp_path: Path) -> None:
    local = tmp_path / "local disk"
    local.mkdir()
    with slow_synthetic(tmp_path, 16 << 20, seed=3, latency_s=0.005) as model:
        before = _digest(model)
        target, f, rec = _copy_fix(model, local)
        assert not rec.measured and rec.how == ""  # the probe's estimate, until measured
        trial = measure_copy(target, f, rec, time.monotonic() + 120)
        assert _digest(model) == before  # the user's files untouched
    assert trial.reason == "", trial.reason
    assert trial.copy_seconds and trial.copy_seconds > 0
    assert len(trial.in_place_s) == len(trial.local_s) == ROUNDS
    # From the emulated 5 ms disk to a local one: the copy loads much faster.
    assert trial.speedup is not None and trial.speedup > 2, trial
    assert rec.measured and rec.expected_speedup == trial.speedup
    assert rec.how.startswith(("measured", "unsteady")), rec.how
    assert "measured here" in rec.action and "repaid after" in rec.action
    for snip in rec.snippets:
        assert snip.speedup == trial.speedup and snip.low and snip.high
        assert snip.low <= snip.speedup <= snip.high
    assert trial.removed and not any(local.iterdir())


def test_a_copy_that_does_not_fit_the_budget_says_so_and_stays_estimated(
    tmp_path: Path,
) -> None:
    local = tmp_path / "local"
    local.mkdir()
    with slow_synthetic(tmp_path, 8 << 20, seed=4, latency_s=0.005) as model:
        target, f, rec = _copy_fix(model, local)
        gain = rec.expected_speedup
        trial = measure_copy(target, f, rec, time.monotonic() + 0.5)
    assert "--budget" in trial.reason and trial.copy_seconds is None
    assert not rec.measured and rec.expected_speedup == gain
    assert any(e.what == "copy trial: not run" for e in rec.evidence)
    assert not any(local.iterdir())


def test_the_sample_is_whole_files_smallest_first_up_to_the_cap(tmp_path: Path) -> None:
    from loadscope.tools.synth import synthesize

    root = synthesize(tmp_path / "m", 12 << 20, shards=3, seed=5).root
    target = resolve(str(root))
    sizes = [target.files[i].size_bytes for i in sample_files(target, cap=5 << 20)]
    assert (sizes == sorted(sizes) and sum(sizes) <= 5 << 20) or len(sizes) == 1
    assert len(sample_files(target, cap=1 << 40)) == 3
    assert len(sample_files(target, cap=1)) == 1  # at least one file
