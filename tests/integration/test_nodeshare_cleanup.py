"""Nothing a node-shared load makes outlives its job (issue 48 item 2).

Ranks are killed while they read a model from an emulated disk slow enough (100 ms per
request) that the kill lands mid-load: a rank SIGKILLed under torchrun (torchrun then
stops the rest), and every rank SIGTERMed, in the real ``/dev/shm``. The files are looked
for in the folder the ranks really used.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadscope.loaders.shmgroup import PREFIX
from loadscope.probes.pagecache import ColdCache
from loadscope.tools.emulator import (
    EmulatedDisk,
    EmulatorSettings,
    emulated_disk,
    fuse_unavailable_reason,
)
from loadscope.tools.synth import synthesize
from tests.conftest import REPO_ROOT, run_loadscope

pytestmark = pytest.mark.integration

_RANK = r"""
import os, signal, sys, threading, time
import torch, loadscope
print("ready", flush=True)
def kill_mid_load():
    # SIGKILL this rank once the ranks fill a shared file: no clean-up of any kind runs.
    import glob
    while not glob.glob(os.path.join(os.environ["LOADSCOPE_SHM_DIR"], "*.data")):
        time.sleep(0.005)
    os.kill(os.getpid(), signal.SIGKILL)
if os.environ.get("KILL_RANK") == os.environ["LOCAL_RANK"]:
    threading.Thread(target=kill_mid_load, daemon=True).start()
loadscope.load_model(sys.argv[1])
print("loaded", flush=True)
time.sleep(60)
"""


@pytest.fixture(scope="module")
def slow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedDisk]:
    if (reason := fuse_unavailable_reason()) is not None:
        pytest.skip(f"emulated disk unavailable: {reason}")
    root = tmp_path_factory.mktemp("slow")
    src = synthesize(root / "src", 48 << 20, shards=4, seed=48)
    settings = EmulatorSettings(latency_s=0.1, jitter_s=0.0, readahead_kb=128)
    with emulated_disk(src.root, root / "mnt", settings) as d:
        yield d


def _evict(disk: EmulatedDisk) -> None:
    for f in disk.path.glob("*.safetensors"):
        assert ColdCache().evict(f).verified


def _job_files(shm: Path, job: str) -> list[str]:
    digest = hashlib.sha1(job.encode()).hexdigest()[:16]
    return sorted(p.name for p in shm.glob(f"{PREFIX}{digest}*"))


def _wait_for(check: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_rank_killed_under_torchrun_leaves_nothing(slow: EmulatedDisk, tmp_path: Path) -> None:
    """SIGKILL one of four ranks mid-load; torchrun stops the rest; the folder is clean
    after the next loadscope command (the job's watcher removes the files first)."""
    shm = tmp_path / "shm"
    shm.mkdir()
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    _evict(slow)
    env = {**os.environ, "LOADSCOPE_SHM_DIR": str(shm), "KILL_RANK": "1"}
    env.pop("LOADSCOPE_NODE_SHARE", None)
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4"]
    argv += ["--master-port", str(29600 + os.getpid() % 300), str(script), str(slow.path)]
    proc = subprocess.Popen(
        argv,
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0, "torchrun did not see the rank die"
    assert "Signals.SIGKILL" in stderr or "SIGKILL" in stderr, stderr[-3000:]
    run = run_loadscope("inspect", str(slow.path), env=env)
    assert run.code == 0, run.err
    assert not list(shm.iterdir()), sorted(p.name for p in shm.iterdir())


def test_ranks_sigtermed_mid_load_leave_nothing_in_dev_shm(slow: EmulatedDisk) -> None:
    """The real /dev/shm: four ranks SIGTERMed while they fill the shared file; right
    after (the watcher's poll), none of the job's files is left."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm here")
    job = f"sigterm-{os.getpid()}-{time.monotonic_ns()}"
    _evict(slow)
    procs = []
    for rank in range(4):
        env = {
            **os.environ,
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "4",
            "TORCHELASTIC_RUN_ID": job,
        }
        env.pop("LOADSCOPE_NODE_SHARE", None)
        env.pop("LOADSCOPE_SHM_DIR", None)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _RANK, str(slow.path)],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    try:
        assert _wait_for(lambda: any(n.endswith(".data") for n in _job_files(shm, job)), 60)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            assert p.wait(timeout=30) == -signal.SIGTERM
        assert _wait_for(lambda: not _job_files(shm, job), 3), _job_files(shm, job)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_any_command_removes_what_a_killed_job_left(tmp_path: Path) -> None:
    """Files of a job none of whose ranks is alive (its watcher killed too): the next
    loadscope command removes them and says so in one line."""
    shm = tmp_path / "shm"
    shm.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (shm / f"{PREFIX}abc-def.data").write_bytes(b"\0" * (1 << 20))
    (shm / f"{PREFIX}abc-def.mapped.0").write_bytes(b"")
    (shm / f"{PREFIX}abc.pid.{dead.pid}").write_bytes(b"")
    model = synthesize(tmp_path / "model", 64 << 10, seed=1)
    run = run_loadscope(
        "inspect", str(model.root), env={**os.environ, "LOADSCOPE_SHM_DIR": str(shm)}
    )
    assert run.code == 0, run.err
    assert not list(shm.iterdir())
    assert "shared memory: removed 3 file(s) (1.0 MiB)" in run.err, run.err
