"""Host-wide settings put back on every way out: the journal, the stale restore, the lock.

The readahead fix is measured by writing the mount's sysfs knobs; here ordinary files stand
in for them (the doctor's own run on the emulated disk is in the integration tests).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadscope.actions import hostsettings
from loadscope.actions.hostsettings import Busy, MountLock, changed, restore_stale


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "state"
    monkeypatch.setenv("LOADSCOPE_STATE_DIR", str(where))
    return where


@pytest.fixture
def knobs(tmp_path: Path) -> list[Path]:
    out = []
    for name, value in (("read_ahead_kb", "128"), ("max_background", "12")):
        p = tmp_path / name
        p.write_text(f"{value}\n")
        out.append(p)
    return out


def test_the_journal_is_written_before_the_change_and_removed_after(
    knobs: list[Path], state: Path
) -> None:
    with changed("0-44", [(knobs[0], "8192"), (knobs[1], "64")]) as saved:
        assert [k.read_text().strip() for k in knobs] == ["8192", "64"]
        doc = json.loads((state / "settings-0-44.json").read_text())
        assert doc["pid"] == os.getpid()
        assert [(s["old"], s["new"]) for s in doc["settings"]] == [("128", "8192"), ("12", "64")]
        assert [s.old for s in saved] == ["128", "12"]
    assert [k.read_text().strip() for k in knobs] == ["128", "12"]
    assert not (state / "settings-0-44.json").exists()


def test_an_exception_inside_puts_the_values_back(knobs: list[Path]) -> None:
    with pytest.raises(KeyboardInterrupt), changed("0-44", [(knobs[0], "8192")]):
        raise KeyboardInterrupt
    assert knobs[0].read_text().strip() == "128"


def _killed_run_journal(state: Path, knobs: list[Path]) -> None:
    """What a run killed with SIGKILL leaves: raised values and its journal."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    state.mkdir(parents=True, exist_ok=True)
    knobs[0].write_text("8192\n")
    knobs[1].write_text("64\n")
    (state / "settings-0-44.json").write_text(
        json.dumps(
            {
                "pid": dead.pid,
                "settings": [
                    {"path": str(knobs[0]), "old": "128", "new": "8192"},
                    {"path": str(knobs[1]), "old": "12", "new": "64"},
                ],
            }
        )
    )


def test_the_next_run_restores_what_a_killed_one_left(knobs: list[Path], state: Path) -> None:
    _killed_run_journal(state, knobs)
    lines = restore_stale()
    assert [k.read_text().strip() for k in knobs] == ["128", "12"]
    assert len(lines) == 2 and "put back to 128" in lines[0]
    assert not (state / "settings-0-44.json").exists()
    assert restore_stale() == []


def test_a_value_changed_since_is_left_alone(knobs: list[Path], state: Path) -> None:
    _killed_run_journal(state, knobs)
    knobs[0].write_text("4096\n")  # an admin set it meanwhile
    lines = restore_stale()
    assert knobs[0].read_text().strip() == "4096"
    assert any("is 4096 now" in line and "left" in line for line in lines)


def test_a_live_owners_journal_is_not_touched(knobs: list[Path], state: Path) -> None:
    _killed_run_journal(state, knobs)
    doc = json.loads((state / "settings-0-44.json").read_text())
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        doc["pid"] = live.pid
        (state / "settings-0-44.json").write_text(json.dumps(doc))
        assert restore_stale() == []
        assert knobs[0].read_text().strip() == "8192"
    finally:
        live.kill()
        live.wait()


def test_a_second_run_on_the_mount_waits_and_says_so(state: Path) -> None:
    code = (
        "import sys, time\n"
        "from loadscope.actions.hostsettings import MountLock\n"
        "with MountLock((0, 44)):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(float(sys.argv[1]))\n"
    )
    env = {**os.environ, "LOADSCOPE_STATE_DIR": str(state)}
    holder = subprocess.Popen(
        [sys.executable, "-c", code, "1.0"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said: list[str] = []
        started = time.monotonic()
        with MountLock((0, 44), on_wait=said.append) as lock:
            assert lock.waited_s > 0.3
        assert time.monotonic() - started >= 0.3
        assert len(said) == 1 and f"pid {holder.pid}" in said[0] and "waiting" in said[0]
        # Another mount is never waited for.
        with MountLock((0, 45)) as other:
            assert other.waited_s == 0
    finally:
        holder.wait(timeout=10)


def test_lock_files_do_not_pile_up_and_holders_never_overlap(state: Path) -> None:
    """The lock file goes when its holder lets go (they piled up in /run/loadscope until a
    reboot), and a waiter whose file was removed under it takes the new one: three runs
    at once still hold the mount one at a time."""
    code = (
        "import time\n"
        "from loadscope.actions.hostsettings import MountLock\n"
        "with MountLock((0, 46)):\n"
        "    a = time.time(); time.sleep(0.3); b = time.time()\n"
        "print(a, b, flush=True)\n"
    )
    env = {**os.environ, "LOADSCOPE_STATE_DIR": str(state)}
    runs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(3)
    ]
    spans = sorted(tuple(map(float, r.communicate(timeout=30)[0].split())) for r in runs)
    assert len(spans) == 3
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, spans
    assert not list(state.glob("mount-*.lock"))


def test_a_lock_held_past_the_wait_refuses_in_one_line(state: Path) -> None:
    with MountLock((0, 44)), pytest.raises(Busy, match="another loadscope"):  # noqa: SIM117
        with MountLock((0, 44), wait_s=0.3):
            pass


def test_the_state_folder_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOADSCOPE_STATE_DIR")
    where = hostsettings.state_dir()
    assert where.stat().st_mode & 0o077 == 0
    assert where.is_dir() and os.access(where, os.W_OK)
