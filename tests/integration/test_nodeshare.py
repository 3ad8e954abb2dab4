"""Loading for a node (issue 38): local ranks read a cold file from storage once.

Real processes, each calling ``loadscope.load_model`` as a rank would under torchrun
(``LOCAL_RANK``/``LOCAL_WORLD_SIZE`` in its environment); the shared-memory folder is a
temporary one so the room check can be made to fail. Checked: identical tensors on every
rank and against safetensors, the bytes each rank read, copy-on-write, nothing left in
the shared folder; and the fallbacks: a rank that never calls, ranks loading different
files, too little room, a single process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadscope.tools.synth import SyntheticCheckpoint, synthesize
from tests.conftest import REPO_ROOT, run_here

pytestmark = pytest.mark.integration

_RANK = r"""
import hashlib, json, os, sys, time
import torch, loadscope
from loadscope.loaders import nodeshare
nodeshare.SHM_DIR = os.environ["SHM_DIR"]
nodeshare.JOIN_S = float(os.environ.get("JOIN_S", "10"))
record = loadscope.LoadRecord()
state = loadscope.load_model(sys.argv[1], record=record)
digest = hashlib.sha256()
for name in sorted(state):
    digest.update(name.encode())
    digest.update(state[name].contiguous().view(torch.uint8).numpy().tobytes())
# Copy-on-write: this rank's in-place write must not reach another rank.
first = sorted(state)[0]
if os.environ["LOCAL_RANK"] == "0":
    state[first].view(torch.uint8).fill_(7)
time.sleep(0.5)
after = state[first].view(torch.uint8).reshape(-1)[:4].tolist()
print(json.dumps({
    "digest": digest.hexdigest(),
    "files": [{"strategy": f.strategy, "reason": f.reason} for f in record.files],
    "notes": record.notes,
    "first_after": after,
}))
"""


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> SyntheticCheckpoint:
    return synthesize(tmp_path_factory.mktemp("node"), 12 << 20, shards=2, seed=38)


def _ranks(
    targets: list[str], shm: Path, world: int, *, join_s: float = 10.0
) -> list[dict[str, object]]:
    procs = []
    job = f"test-{os.getpid()}-{time.monotonic_ns()}"  # one job: its ranks share
    for rank, target in enumerate(targets):
        env = {
            **os.environ,
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world),
            "TORCHELASTIC_RUN_ID": job,
            "SHM_DIR": str(shm),
            "JOIN_S": str(join_s),
        }
        env.pop("LOADSCOPE_NODE_SHARE", None)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _RANK, target],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def _evict(ckpt: SyntheticCheckpoint) -> None:
    from loadscope.probes.pagecache import ColdCache

    for f in ckpt.root.glob("*.safetensors"):
        assert ColdCache().evict(f).verified


def _same_job(out: list[dict[str, object]]) -> None:
    assert len({o["digest"] for o in out}) == 1


def test_local_ranks_read_once_and_map_copy_on_write(
    ckpt: SyntheticCheckpoint, tmp_path: Path
) -> None:
    _evict(ckpt)
    shm = tmp_path / "shm"
    shm.mkdir()
    out = _ranks([str(ckpt.root)] * 3, shm, 3)
    import hashlib

    import torch
    from safetensors.torch import load_file

    want = hashlib.sha256()
    state = {}
    for f in sorted(ckpt.root.glob("*.safetensors")):
        state.update(load_file(str(f)))
    for name in sorted(state):
        want.update(name.encode())
        want.update(state[name].contiguous().view(torch.uint8).numpy().tobytes())
    for o in out:
        files = o["files"]
        assert isinstance(files, list)
        assert [f["strategy"] for f in files] == ["node-shared", "node-shared"], o
    assert {o["digest"] for o in out} == {want.hexdigest()}
    # Rank 0 wrote into its tensor: the others still see the file's bytes.
    firsts = [o["first_after"] for o in out]
    assert firsts[0] == [7, 7, 7, 7] and all(f != [7, 7, 7, 7] for f in firsts[1:])
    assert not list(shm.iterdir()), sorted(p.name for p in shm.iterdir())


def test_a_rank_that_never_calls_leaves_the_others_loading_alone(
    ckpt: SyntheticCheckpoint, tmp_path: Path
) -> None:
    _evict(ckpt)
    shm = tmp_path / "shm"
    shm.mkdir()
    out = _ranks([str(ckpt.root)] * 2, shm, 3, join_s=1.0)  # world 3, two call
    for o in out:
        assert all(f["strategy"] != "node-shared" for f in o["files"])  # type: ignore[union-attr]
        assert any(re.search(r"\d of 3 local ranks", n) for n in o["notes"]), o  # type: ignore[union-attr]
    _same_job(out)
    assert not list(shm.iterdir())


def test_ranks_loading_different_files_load_alone(
    ckpt: SyntheticCheckpoint, tmp_path: Path
) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    shards = sorted(str(p) for p in ckpt.root.glob("*.safetensors"))
    _evict(ckpt)
    out = _ranks(shards, shm, 2, join_s=1.0)
    for o in out:
        assert all(f["strategy"] != "node-shared" for f in o["files"])  # type: ignore[union-attr]
        assert any(re.search(r"\d of 2 local ranks", n) for n in o["notes"])  # type: ignore[union-attr]
    assert not list(shm.iterdir())


def test_too_little_shared_memory_falls_back_with_the_reason(
    ckpt: SyntheticCheckpoint, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    shm = tmp_path / "small"
    shm.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(shm)], check=False
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        _evict(ckpt)
        out = _ranks([str(ckpt.root)] * 2, shm, 2)
        for o in out:
            assert all(f["strategy"] != "node-shared" for f in o["files"])  # type: ignore[union-attr]
            assert any("MiB free" in n for n in o["notes"]), o  # type: ignore[union-attr]
        _same_job(out)
    finally:
        subprocess.run(["umount", "-l", str(shm)], check=False)


def test_one_process_keeps_todays_behaviour(ckpt: SyntheticCheckpoint, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_", "SLURM_"))}
    _evict(ckpt)
    code = (
        "import loadscope, sys; r = loadscope.LoadRecord();"
        " loadscope.load_model(sys.argv[1], record=r); print([f.strategy for f in r.files])"
    )
    run = run_here([sys.executable, "-c", code, str(ckpt.root)], env=env, timeout=60, check=True)
    assert "node-shared" not in run.stdout


@pytest.mark.parametrize("bad", [(2, 2), (-1, 2), (0,), ("0", "2"), (True, 2), 3])
def test_local_ranks_that_are_not_a_rank_of_a_world_are_refused(
    ckpt: SyntheticCheckpoint, bad: object
) -> None:
    import loadscope

    with pytest.raises(ValueError, match="local_ranks must be"):
        loadscope.load_model(ckpt.root, local_ranks=bad)  # type: ignore[arg-type]
