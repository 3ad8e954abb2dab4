"""The local-disk probe: candidate directories for a copy, measured with a temp file only."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from loadscope.engine.probing import mount_and_class
from loadscope.probes import mounts
from loadscope.probes.localdisk import local_candidates, measure_dir
from loadscope.probes.result import Unavailable

pytestmark = pytest.mark.integration


def test_measure_dir_writes_reads_back_cold_and_cleans_up(tmp_path: Path) -> None:
    speed = measure_dir(str(tmp_path), 16 << 20)
    assert speed.write_bytes_per_s > 0 and speed.cold_read_bytes_per_s > 0
    assert speed.cold_verified, speed.note
    assert list(tmp_path.iterdir()) == []


def test_measure_dir_refuses_what_it_cannot_measure(tmp_path: Path) -> None:
    with pytest.raises(Unavailable, match="not a directory"):
        measure_dir(str(tmp_path / "missing"))


def test_candidates_come_from_the_env_one_per_filesystem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    dirs = [str(a), str(b), "/dev/shm", str(tmp_path / "missing")]
    monkeypatch.setenv("LOADSCOPE_LOCAL_DIRS", os.pathsep.join(dirs))
    table = mounts.read_mountinfo()
    shm_dev = os.stat("/dev/shm").st_dev if os.path.isdir("/dev/shm") else -1
    klass = mounts.describe_mount(mounts.mount_of(str(a), table), table, wsl=False)
    if (klass.resolved_class or klass.storage_class) != "local-block":
        pytest.skip(f"{tmp_path} is on {klass.storage_class} here, not a local disk")
    mount_of = functools.partial(mount_and_class, table, False)
    found = local_candidates(mount_of, 8 << 20, shm_dev)
    # b shares a's filesystem; /dev/shm is the "model's" and memory anyway; missing is skipped
    assert [d.directory for d in found] == [str(a)]
    assert found[0].speed is not None and found[0].storage_class == "local-block"
    assert list(a.iterdir()) == []
    too_big = local_candidates(mount_of, 1 << 60, shm_dev)
    assert too_big[0].speed is None and too_big[0].reason == "not enough free space"
