"""Temporary folders named by their owner, reaped by the next run once the owner is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loadscope.base.tempdirs import _host, owned_tempdir, reap_stale


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_folder_whose_process_is_gone_is_reaped_and_no_other(tmp_path: Path) -> None:
    # A SIGKILLed doctor left its synthetic checkpoint (gigabytes) in the temp dir for good.
    host, dead = _host(), _dead_pid()
    gone = tmp_path / f"loadscope-synthetic-{dead}@{host}@abc"
    alive = tmp_path / f"loadscope-synthetic-{os.getpid()}@{host}@def"
    elsewhere = tmp_path / f"loadscope-synthetic-{dead}@another-host@ghi"  # a shared folder
    longer = tmp_path / f"loadscope-synthetic-{dead}@{host}-2@mno"  # "node-2" is not "node"
    other_kind = tmp_path / f"loadscope-demo-{dead}@{host}@jkl"
    for d in (gone, alive, elsewhere, longer, other_kind):
        (d / "model").mkdir(parents=True)
        (d / "model" / "model.safetensors").write_bytes(b"x")
    made = owned_tempdir("loadscope-synthetic-", tmp_path)
    assert made.name.startswith(f"loadscope-synthetic-{os.getpid()}@{host}@") and made.is_dir()
    assert not gone.exists()
    assert alive.exists() and elsewhere.exists() and longer.exists() and other_kind.exists()
    assert reap_stale("loadscope-demo-", tmp_path) == [other_kind]


def test_a_zombie_owner_is_gone(tmp_path: Path) -> None:
    # A command SIGKILLed under a parent that does not reap it stays a zombie: its folder
    # was kept for as long as the zombie lasted.
    import time

    from loadscope.base.tempdirs import process_alive as _alive

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while _alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(proc.pid)  # exited, not yet waited for: a zombie
        assert _alive(os.getpid())
    finally:
        proc.wait()
