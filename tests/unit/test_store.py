"""The kept reports (issue 40): one file per run, never one for two runs, the newest
found again, the oldest pruned, and a folder that cannot be written said, not raised."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from loadscope.report import store


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOADSCOPE_REPORTS", str(tmp_path / "reports"))
    return tmp_path / "reports"


def test_two_runs_in_one_second_keep_two_reports_and_last_is_the_newest(folder: Path) -> None:
    first, why = store.save('{"n": 1}\n', "/models/my model")
    second, _ = store.save('{"n": 2}\n', "/models/my model")
    assert first and second and first != second and not why
    assert first.name.startswith("doctor-") and "my-model" in first.name
    assert store.last() == second and second.read_text() == '{"n": 2}\n'
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
    assert not [p for p in folder.iterdir() if p.name.endswith(".partial")]


def test_a_folder_that_cannot_be_written_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADSCOPE_REPORTS", "/proc/loadscope-reports")
    path, why = store.save("{}\n", "m")
    assert path is None and "/proc/loadscope-reports" in why
    assert store.last() is None


def test_the_oldest_are_pruned(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = [store.save(f'{{"n": {i}}}\n', "m")[0] for i in range(5)]
    for i, path in enumerate(made):  # distinct times: the order is by when each was kept
        assert path is not None
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    monkeypatch.setattr(store, "KEEP", 3)
    newest, _ = store.save('{"n": 5}\n', "m")
    assert store.saved() == [made[3], made[4], newest]


def test_a_kept_report_is_readable_by_its_owner_only(folder: Path) -> None:
    """The reports name the host and the model's paths: 0600, also in a folder that
    already existed open to others (the text was written 0644 and renamed over the name)."""
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    path, _ = store.save('{"n": 1}\n', "m")
    assert path is not None and oct(path.stat().st_mode & 0o777) == oct(0o600)


def test_a_name_a_killed_run_took_is_removed_an_hour_later(folder: Path) -> None:
    folder.mkdir()
    taken = folder / "doctor-2026-01-01T00-00-00-m.json"
    taken.touch()  # reserved, never written: the run was killed
    fresh = folder / "doctor-2026-01-01T00-00-01-m.json"
    fresh.touch()  # another run's, being written now
    old = time.time() - 2 * store.ABANDONED_S
    os.utime(taken, (old, old))
    store.save('{"n": 1}\n', "m")
    assert not taken.exists() and fresh.exists()
