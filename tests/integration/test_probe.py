"""``loadscope probe`` end to end: inside its budget, stable JSON paths, live storage classes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadscope.engine.probing import run_probes
from loadscope.model.targets import resolve
from loadscope.probes import mounts
from loadscope.probes.result import STORAGE_CLASSES, Status
from loadscope.report.probe_text import to_text
from loadscope.tools.synth import SyntheticCheckpoint
from tests.conftest import run_loadscope

pytestmark = pytest.mark.integration


def test_probe_synthetic_within_budget_and_stable_paths(tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    t0 = time.monotonic()
    result = run_loadscope(
        "probe",
        "synthetic:256MiB",
        "--budget",
        "6",
        "--json",
        str(out),
        "--synth-dir",
        str(tmp_path),
        timeout=120,
    )
    wall = time.monotonic() - t0
    assert result.code == 0, result.err
    report = json.loads(out.read_text())
    assert report["schema_version"] == 1
    assert report["elapsed_s"] <= 8.0
    f = report["files"][0]
    assert f["path"].endswith("model.safetensors")
    assert f["mount"]["status"] == "ok"
    assert f["mount"]["storage_class"] in STORAGE_CLASSES
    assert f["mount"]["fstype"] and f["mount"]["reason"]
    assert report["latency"]["status"] == "ok"
    assert report["latency"]["p50_us"] <= report["latency"]["p99_us"]
    seq = report["throughput"]["sequential"]
    assert [p["block_bytes"] for p in seq] == [4096, 65536, 1 << 20, 16 << 20]
    assert all(p["bytes_per_s"] > 0 for p in seq)
    assert [p["readers"] for p in report["throughput"]["parallel"]] == [1, 4, 16, 64]
    # The best parallel point again, into fresh memory: the ceiling a loader can reach.
    best = max(report["throughput"]["parallel"], key=lambda p: p["bytes_per_s"])
    ram = report["throughput"]["into_ram"]
    assert (ram["readers"], ram["block_bytes"]) == (best["readers"], best["block_bytes"])
    assert ram["bytes_read"] > 0 and report["throughput"]["into_ram_reason"] == ""
    assert "into fresh RAM, where a loader lands it" in result.out
    for probe in ("system", "latency", "throughput", "hf_cache"):
        assert report[probe]["status"] in ("ok", "unavailable", "error")
    assert "storage" in result.out and "latency" in result.out and "throughput" in result.out
    summary = [line for line in result.out.splitlines() if not line.startswith("full result:")]
    assert max(len(line) for line in summary) <= 80
    assert f"full result: {out}" in result.out
    assert list(p for p in tmp_path.iterdir() if p.name != "probe.json") == []
    assert wall < 120  # building the 1 GiB checkpoint is outside the probe's budget


def test_probe_json_to_stdout(synth_single: SyntheticCheckpoint) -> None:
    result = run_loadscope("probe", str(synth_single.root), "--budget", "3", "--json", "-")
    assert result.code == 0, result.err
    assert json.loads(result.out)["files"][0]["size_bytes"] == synth_single.files[0].stat().st_size


def test_root_filesystem_is_local_block_with_virtio_named(
    synth_single: SyntheticCheckpoint,
) -> None:
    root_mount = mounts.mount_of("/", mounts.read_mountinfo())
    if root_mount.fstype != "ext4" or not (root_mount.source.startswith("/dev/vd")):
        pytest.skip(f"/ is {root_mount.fstype} on {root_mount.source}, not ext4 on virtio")
    path = Path("/var/tmp/loadscope-root-probe.safetensors")
    shutil.copy(synth_single.files[0], path)
    try:
        report = run_probes(resolve(str(path)), budget_s=2)
    finally:
        path.unlink()
    storage = report.files[0].storage
    assert storage.mount.data is not None
    assert storage.mount.data.storage_class == "local-block"
    assert storage.device.data is not None
    assert any(d.transport == "virtio" for d in storage.device.data.disks)
    assert "virtio" in to_text(report)


@pytest.fixture
def tmpfs_dir() -> Iterator[Path]:
    shm = Path("/dev/shm")
    table = mounts.read_mountinfo()
    if not shm.is_dir() or mounts.mount_of(str(shm), table).fstype != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    d = shm / f"loadscope-test-{os.getpid()}"
    d.mkdir()
    try:
        yield d
    finally:
        shutil.rmtree(d)


def test_tmpfs_is_memory(tmpfs_dir: Path, synth_single: SyntheticCheckpoint) -> None:
    shutil.copy(synth_single.files[0], tmpfs_dir / "model.safetensors")
    report = run_probes(resolve(str(tmpfs_dir)), budget_s=2)
    storage = report.files[0].storage
    assert storage.mount.data is not None and storage.mount.data.storage_class == "memory"
    assert storage.device.status is Status.UNAVAILABLE and storage.device.reason
    assert "majflt" in storage.blind_signals


@pytest.fixture
def fuse_dir(tmp_path: Path) -> Iterator[Path]:
    bindfs = shutil.which("bindfs")
    if bindfs is None or not Path("/dev/fuse").exists():
        pytest.skip(
            "needs bindfs and /dev/fuse for a live FUSE mount"
            " (scripts/setup --dev installs bindfs when run as root)"
        )
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    proc = subprocess.run([bindfs, str(src), str(mnt)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"bindfs could not mount: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["fusermount", "-u", str(mnt)], check=False)


def test_fuse_mount_is_fuse(fuse_dir: Path, synth_single: SyntheticCheckpoint) -> None:
    shutil.copy(synth_single.files[0], fuse_dir / "model.safetensors")
    report = run_probes(resolve(str(fuse_dir)), budget_s=2)
    storage = report.files[0].storage
    assert storage.mount.data is not None and storage.mount.data.storage_class == "fuse"
    assert storage.fuse.status in (Status.OK, Status.UNAVAILABLE)
    assert storage.fuse.status is Status.OK or storage.fuse.reason
    assert "minor" in storage.blind_signals["majflt"]


def test_unavailable_sysfs_does_not_fail_the_run(
    synth_single: SyntheticCheckpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from loadscope.probes import blockdev

    real = blockdev.device_chain

    def no_sysfs(major: int, minor: int, sysfs_root: Path = tmp_path) -> blockdev.DeviceReport:
        return real(major, minor, sysfs_root=tmp_path)  # an empty tree: no /sys/dev/block

    monkeypatch.setattr(blockdev, "device_chain", no_sysfs)
    report = run_probes(resolve(str(synth_single.root)), budget_s=2)
    storage = report.files[0].storage
    assert storage.device.status is Status.UNAVAILABLE
    assert storage.device.reason and "sysfs" in storage.device.reason
    assert report.latency.ok and report.throughput.ok
    assert storage.mount.ok


def test_fio_jobs_reproduce_the_probe_and_run_beside_it(tmp_path: Path) -> None:
    """Issue 19: fio's figures beside the probe's, from read-only jobs on the model's own
    file, and the exact fio lines in every report for a storage team."""
    from loadscope.probes import fio
    from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
    from loadscope.tools.synth import synthesize

    src = synthesize(tmp_path / "src", 32 << 20, seed=8).root
    before = (src / "model.safetensors").read_bytes()
    plain = run_probes(resolve(str(src)), budget_s=4)
    commands = plain.to_dict()["fio"]["jobs"]
    measured = sorted(p["block_bytes"] for p in plain.to_dict()["throughput"]["sequential"])
    assert [j["measures"] for j in commands] == [
        "latency",
        *["sequential"] * len(measured),
        "parallel",
    ]
    # one sequential job per block size the probe swept, each named by its size
    assert [j.get("block_bytes") for j in commands[1:-1]] == measured
    assert all(j["label"].startswith("sequential ") for j in commands[1:-1])
    assert all(" --readonly " in j["command"] and str(src) in j["command"] for j in commands)
    assert plain.fio.status is Status.SKIPPED and "fio" in to_text(plain)
    if fio.unavailable_reason() or fuse_unavailable_reason():
        pytest.skip(fio.unavailable_reason() or fuse_unavailable_reason() or "")
    settings = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
    with emulated_disk(src, tmp_path / "mnt", settings) as disk:
        report = run_probes(resolve(str(disk.path)), budget_s=6, run_fio=True)
    assert report.fio.status is Status.OK, report.fio.reason
    jobs = report.to_dict()["fio"]["jobs"]
    for job in jobs:
        assert job["fio"] and job["fio"] > 0 and job["probe"] and job["fio_over_probe"], job
    latency = next(j for j in jobs if j["measures"] == "latency")
    assert latency["fio"] > 1000, latency  # a 5 ms disk: fio saw milliseconds too
    text = to_text(report)
    assert "fio/probe" in text and "--name=loadscope-latency" in text
    assert (src / "model.safetensors").read_bytes() == before  # read-only
