"""The emulated network block volume (issue 17, item 4): ext4 on a loop device over the
slow disk, recognised as network block storage, and gone after every way of stopping."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from loadscope.tools.blockemu import (
    WORK_PREFIX,
    block_unavailable_reason,
    emulated_block_disk,
    is_block_emulator_mount,
)
from loadscope.tools.emulator import EmulatorSettings, mounts_at
from loadscope.tools.synth import SyntheticCheckpoint, synthesize
from tests.conftest import REPO_ROOT, run_loadscope

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        (why := block_unavailable_reason()) is not None,
        reason=f"block volume emulation unavailable: {why}",
    ),
]

FAST = EmulatorSettings(latency_s=0.001, jitter_s=0.0)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> SyntheticCheckpoint:
    return synthesize(tmp_path_factory.mktemp("blk-src"), 8 << 20, seed=6)


def _work_dirs() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith(WORK_PREFIX)}


def _loops() -> str:
    return subprocess.run(["losetup", "-a"], capture_output=True, text=True, check=False).stdout


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_gone(mnt: Path, before: set[str]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (mounts_at(mnt) or _work_dirs() - before):
        time.sleep(0.2)
    assert mounts_at(mnt) == []
    assert _work_dirs() - before == set()
    # No loop device outlives its volume's work folder (this test's is gone; another test
    # file's volume may be up meanwhile on another worker, its folder still there: a
    # volume detaches its loop device before it removes the folder).
    live = _work_dirs()
    loops = [line for line in _loops().splitlines() if WORK_PREFIX in line]
    assert not [line for line in loops if not any(d in line for d in live)], loops


def test_a_volume_is_ext4_on_a_loop_device_and_exact(
    source: SyntheticCheckpoint, tmp_path: Path
) -> None:
    before = _work_dirs()
    digests = {p.name: _digest(p) for p in source.files}
    mnt = tmp_path / "vol mnt"  # a space in the path
    with emulated_block_disk(source.root, mnt, FAST) as vol:
        (mount,) = mounts_at(mnt)
        assert mount.fstype == "ext4" and mount.source == vol.loop
        assert vol.loop.startswith("/dev/loop") and is_block_emulator_mount(mount)
        assert "ro" in mount.mount_options
        for name, digest in digests.items():
            assert _digest(mnt / name) == digest
        with pytest.raises(OSError):
            (mnt / "new").write_text("x")
        # The loop device's own readahead is the setting's (the block layer's, not FUSE's).
        ra = Path(f"/sys/block/{os.path.basename(vol.loop)}/queue/read_ahead_kb").read_text()
        assert int(ra) == FAST.readahead_kb
    _assert_gone(mnt, before)
    assert {p.name: _digest(p) for p in source.files} == digests  # the source untouched


def test_the_probe_follows_the_loop_device_to_the_slow_disk(
    source: SyntheticCheckpoint, tmp_path: Path
) -> None:
    with emulated_block_disk(source.root, tmp_path / "mnt", FAST):
        out = run_loadscope("probe", str(tmp_path / "mnt"), "--json", "-", timeout=120)
    assert out.code == 0, out.err
    mount = json.loads(out.out)["files"][0]["mount"]
    assert mount["fstype"] == "ext4" and mount["storage_class"] == "network-block"
    assert "loop device over" in mount["reason"] and "fuse.loadscope" in mount["reason"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_stopping_the_command_leaves_nothing(
    source: SyntheticCheckpoint, tmp_path: Path, sig: signal.Signals
) -> None:
    """SIGKILL too: the volume's own process sees its parent die and takes it down."""
    before = _work_dirs()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadscope", "emulate", "--block", str(source.root), str(mnt)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not mounts_at(mnt) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert mounts_at(mnt), proc.communicate(timeout=10)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    _assert_gone(mnt, before)


def test_unmount_takes_down_a_volume_whose_server_was_killed(
    source: SyntheticCheckpoint, tmp_path: Path
) -> None:
    before = _work_dirs()
    mnt = tmp_path / "mnt"
    with emulated_block_disk(source.root, mnt, FAST) as vol:
        vol.process.kill()  # the volume's own process: nothing of it can clean up
        vol.process.wait(timeout=10)
        assert any(is_block_emulator_mount(m) for m in mounts_at(mnt))
        out = run_loadscope("emulate", "--unmount", str(mnt))
        assert out.code == 0 and "unmounted" in out.out, out.err
    _assert_gone(mnt, before)


def test_unmount_refuses_a_mount_stacked_over_a_volume(
    source: SyntheticCheckpoint, tmp_path: Path
) -> None:
    """``--unmount`` of a volume with a user's tmpfs mounted over it unmounted the tmpfs
    (umount takes the top mount), said "unmounted", exit 0, and left the volume."""
    mnt = tmp_path / "mnt"
    from tests.conftest import foreign_tmpfs_at

    with emulated_block_disk(source.root, mnt, FAST), foreign_tmpfs_at(mnt):
        out = run_loadscope("emulate", "--unmount", str(mnt))
        assert out.code == 4 and "it is a tmpfs mount" in out.err, out.err
        assert [m.fstype for m in mounts_at(mnt)] == ["ext4", "tmpfs"]


def test_the_doctor_names_the_regime_with_its_latency(tmp_path: Path) -> None:
    from loadscope.diagnosis.doctor import DoctorOptions, run_doctor
    from loadscope.model.targets import resolve

    src = synthesize(tmp_path / "src", 32 << 20, seed=9)
    slow = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
    with emulated_block_disk(src.root, tmp_path / "mnt", slow) as vol:
        # --stack safetensors: the regime is the subject, not which stack's code wins.
        options = DoctorOptions(budget_s=25, device="cpu", stacks=("safetensors",))
        report = run_doctor(resolve(str(vol.path)), options)
    verdict = report.advice.verdict
    assert verdict.status == "problem", verdict.headline
    assert verdict.headline.startswith("network block volume (cold 4 KiB reads p50 ")
    top = report.advice.recommendations[0]
    assert top.measured and (top.expected_speedup or 0) >= 1.5, top
