"""Loading for a node (issues 38 and 48): local ranks read a cold file from storage once,
and no pattern of calls costs more than loading alone.

Four real processes, each a local rank as torchrun makes them (``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, one ``TORCHELASTIC_RUN_ID`` per pattern), load a 4-file model
served by the emulated slow disk with its request log on; the shared-memory folder is a
temporary one (``LOADSCOPE_SHM_DIR``). The same four processes go through every pattern
(imports paid once), each pattern cold: all ranks; rank 0 only; each rank a different
shard; ranks arriving 0.8 s apart; a rank that never calls; and one process alone, the
baseline. Checked per pattern: each call's wall time within 1 s of the single process's,
the storage's bytes from the request log, identical tensors, the bytes each rank counted,
and nothing left in the folder once the ranks are gone.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadscope.tools.emulator import (
    EmulatedDisk,
    EmulatorSettings,
    emulated_disk,
    fuse_unavailable_reason,
)
from loadscope.tools.synth import SyntheticCheckpoint, synthesize
from tests.conftest import REPO_ROOT, run_here

pytestmark = pytest.mark.integration

WORLD = 4
PATTERNS = ("alone", "all", "rank0", "shards", "late", "never")

# One rank: every pattern in turn, the ranks kept in step by marker files (a barrier);
# rank 0 evicts the model and clears the request log before each pattern, and reads the
# bytes the storage served after it. Each rank prints one JSON line per pattern.
_RANK = r"""
import glob, hashlib, json, logging, os, sys, time
import torch, loadscope
from loadscope.probes.pagecache import ColdCache

rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
model, log, sync = sys.argv[1], sys.argv[2], sys.argv[3]
patterns = sys.argv[4].split(",")
files = sorted(glob.glob(os.path.join(model, "*.safetensors")))
warnings = []
class Count(logging.Handler):
    def emit(self, r):
        if r.levelno >= logging.WARNING:
            warnings.append(r.getMessage())
logging.getLogger("loadscope").addHandler(Count())

step = 0
def barrier():
    global step
    step += 1
    open(f"{sync}/{step}.{rank}", "w").close()
    deadline = time.monotonic() + 60
    while len(glob.glob(f"{sync}/{step}.*")) < world:
        if time.monotonic() > deadline:
            sys.exit(f"rank {rank}: another rank never reached step {step} (it failed?)")
        time.sleep(0.002)

def served():
    return sum(int(l.split()[2]) for l in open(log) if l.strip())

loadscope.load_model(sys.argv[5])  # imports and first-call set-up before any clock
for pattern in patterns:
    os.environ["TORCHELASTIC_RUN_ID"] = f"{sync}-{pattern}"
    os.environ.pop("LOADSCOPE_NODE_SHARE", None)
    if rank == 0:
        for f in files:
            assert ColdCache().evict(f).verified, f
        open(log, "w").close()
    barrier()
    calls, digest, record = [], hashlib.sha256(), loadscope.LoadRecord()
    todo = {
        "alone": [model] if rank == 0 else [],
        "all": [model],
        "rank0": [model] if rank == 0 else [],
        "shards": [files[rank]],
        "late": [model],
        "never": [model] if rank < world - 1 else [],
    }[pattern]
    if pattern == "alone":
        os.environ["LOADSCOPE_NODE_SHARE"] = "0"
    if pattern == "late":
        time.sleep(0.8 * rank)
    for target in todo:
        state = None  # the last pattern's tensors freed before the clock, not inside it
        t0 = time.perf_counter()
        if os.path.isdir(target):
            state = loadscope.load_model(target, record=record)
        else:
            state = loadscope.load_file(target, record=record)
        calls.append(time.perf_counter() - t0)
        for name in sorted(state):
            digest.update(name.encode())
            digest.update(state[name].contiguous().view(torch.uint8).numpy().tobytes())
    barrier()
    out = {
        "pattern": pattern, "rank": rank, "calls": calls,
        "wall_seconds": record.wall_seconds,
        "digest": digest.hexdigest() if todo else None,
        "files": [[f.strategy, f.read_bytes, f.size_bytes] for f in record.files],
        "notes": record.notes, "warnings": list(warnings),
        "served": served() if rank == 0 else None,
    }
    print(json.dumps(out), flush=True)
    barrier()
"""


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedDisk]:
    if (reason := fuse_unavailable_reason()) is not None:
        pytest.skip(f"emulated disk unavailable: {reason}")
    root = tmp_path_factory.mktemp("node")
    src = synthesize(root / "src", 24 << 20, shards=4, seed=48)
    settings = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
    with emulated_disk(src.root, root / "mnt", settings, log_requests=True) as d:
        yield d


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> SyntheticCheckpoint:
    return synthesize(tmp_path_factory.mktemp("tiny"), 64 << 10, seed=1)


def _launch(
    model: Path, log: Path, shm: Path, sync: Path, tiny: Path, patterns: tuple[str, ...]
) -> list[subprocess.Popen[str]]:
    procs = []
    for rank in range(WORLD):
        env = {
            **os.environ,
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(WORLD),
            "LOADSCOPE_SHM_DIR": str(shm),
        }
        env.pop("LOADSCOPE_NODE_SHARE", None)
        argv = [sys.executable, "-c", _RANK, str(model), str(log), str(sync)]
        procs.append(
            subprocess.Popen(
                [*argv, ",".join(patterns), str(tiny)],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return procs


def _finished(procs: list[subprocess.Popen[str]], timeout: float = 300) -> list[str]:
    """Each rank's stdout once all have exited 0; every rank killed whatever happens (a
    rank left polling its barrier slowed every later test)."""
    try:
        outs = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            assert p.returncode == 0, stderr[-3000:]
            outs.append(stdout)
        return outs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def runs(
    disk: EmulatedDisk, tiny: SyntheticCheckpoint, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[dict[str, object]]]:
    """Each pattern's four JSON lines, rank by rank; the folder left behind checked."""
    assert disk.log is not None
    tmp = tmp_path_factory.mktemp("ranks")
    shm, sync = tmp / "shm", tmp / "sync"
    shm.mkdir()
    sync.mkdir()
    out: dict[str, list[dict[str, object]]] = {p: [] for p in PATTERNS}
    for stdout in _finished(_launch(disk.path, disk.log.path, shm, sync, tiny.root, PATTERNS)):
        for line in stdout.splitlines():
            doc = json.loads(line)
            out[str(doc["pattern"])].append(doc)
    # Every rank has exited: the job's watcher removes what is left within its poll.
    deadline = time.monotonic() + 5
    while list(shm.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not list(shm.iterdir()), sorted(p.name for p in shm.iterdir())
    for docs in out.values():
        docs.sort(key=lambda d: int(d["rank"]))  # type: ignore[call-overload]
    return out


def _model_bytes(disk: EmulatedDisk) -> int:
    return sum(f.stat().st_size for f in disk.path.glob("*.safetensors"))


def _alone(runs: dict[str, list[dict[str, object]]]) -> float:
    calls = runs["alone"][0]["calls"]
    assert isinstance(calls, list) and len(calls) == 1
    return float(calls[0])


@pytest.mark.parametrize("pattern", ["all", "rank0", "shards", "late", "never"])
def test_no_pattern_of_calls_costs_more_than_loading_alone(
    runs: dict[str, list[dict[str, object]]], pattern: str
) -> None:
    """Each call within 1 s of the same call in one process (the join this replaced waited
    10 s per file when not every rank asked for it), and its record's wall time is the
    call's (waits included)."""
    alone = _alone(runs)
    for doc in runs[pattern]:
        for seconds in doc["calls"]:  # type: ignore[attr-defined]
            assert seconds <= alone + 1.0, (pattern, doc["rank"], seconds, alone)
        if doc["calls"]:
            assert float(doc["wall_seconds"]) >= 0.9 * sum(doc["calls"]), doc  # type: ignore[arg-type]
        assert not doc["warnings"], doc  # nothing fell back: no WARNING


def test_every_rank_holds_the_models_tensors(
    runs: dict[str, list[dict[str, object]]], disk: EmulatedDisk
) -> None:
    want = runs["alone"][0]["digest"]
    for pattern in ("all", "rank0", "late", "never"):
        for doc in runs[pattern]:
            if doc["calls"]:
                assert doc["digest"] == want, (pattern, doc["rank"])
    from safetensors.torch import load_file

    for doc, f in zip(runs["shards"], sorted(disk.path.glob("*.safetensors")), strict=True):
        digest = hashlib.sha256()
        state = load_file(str(f))
        import torch

        for name in sorted(state):
            digest.update(name.encode())
            digest.update(state[name].contiguous().view(torch.uint8).numpy().tobytes())
        assert doc["digest"] == digest.hexdigest()


def test_all_ranks_the_storage_serves_the_model_once(
    runs: dict[str, list[dict[str, object]]], disk: EmulatedDisk
) -> None:
    """Every file node-shared; the request log says the storage served at most 1.05x the
    model (sharing off, it serves 4x: the test fails); the ranks' own counts add up to
    the model, each the bytes its reads returned."""
    model = _model_bytes(disk)
    served = runs["all"][0]["served"]
    assert isinstance(served, int) and served <= 1.05 * model, served / model
    counted = 0
    for doc in runs["all"]:
        files = doc["files"]
        assert isinstance(files, list) and len(files) == 4
        assert {f[0] for f in files} == {"node-shared"}, doc
        counted += sum(int(f[1]) for f in files)
    assert counted == pytest.approx(model, rel=0.01)


@pytest.mark.parametrize("pattern", ["rank0", "shards", "late", "never"])
def test_the_other_patterns_read_the_model_once_too(
    runs: dict[str, list[dict[str, object]]], disk: EmulatedDisk, pattern: str
) -> None:
    """Rank 0 alone reads every chunk itself; a late rank maps what the others read; a
    shard is read by the rank that asks for it: the storage serves the model once."""
    model = _model_bytes(disk)
    served = runs[pattern][0]["served"]
    assert isinstance(served, int) and served <= 1.05 * model, (pattern, served / model)
    if pattern == "rank0":
        (files,) = [d["files"] for d in runs[pattern] if d["calls"]]
        assert sum(int(f[1]) for f in files) == pytest.approx(model, rel=0.01)  # type: ignore[union-attr]


def test_one_process_keeps_todays_behaviour(runs: dict[str, list[dict[str, object]]]) -> None:
    files = runs["alone"][0]["files"]
    assert isinstance(files, list) and files
    assert "node-shared" not in {f[0] for f in files}


def test_too_little_shared_memory_falls_back_once_at_warning(
    disk: EmulatedDisk, tiny: SyntheticCheckpoint, tmp_path: Path
) -> None:
    """A /dev/shm too small for a file: each rank loads alone, says why in its record for
    every file, and at WARNING once (not once per file)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    assert disk.log is not None
    shm, sync = tmp_path / "small", tmp_path / "sync"
    shm.mkdir()
    sync.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(shm)], check=False
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        procs = _launch(disk.path, disk.log.path, shm, sync, tiny.root, ("all",))
        for stdout in _finished(procs, timeout=120):
            doc = json.loads(stdout.strip().splitlines()[-1])
            assert {f[0] for f in doc["files"]} != {"node-shared"}
            assert sum("MiB free" in n for n in doc["notes"]) == 4, doc["notes"]
            assert len(doc["warnings"]) == 1, doc["warnings"]
            assert "--shm-size" in doc["warnings"][0]
        assert not list(shm.iterdir())
    finally:
        subprocess.run(["umount", "-l", str(shm)], check=False)


@pytest.mark.parametrize("bad", [(2, 2), (-1, 2), (0,), ("0", "2"), (True, 2), 3])
def test_local_ranks_that_are_not_a_rank_of_a_world_are_refused(
    tiny: SyntheticCheckpoint, bad: object
) -> None:
    import loadscope

    with pytest.raises(ValueError, match="local_ranks must be"):
        loadscope.load_model(tiny.root, local_ranks=bad)  # type: ignore[arg-type]


def test_a_single_process_outside_a_job_is_not_shared(tiny: SyntheticCheckpoint) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCAL_", "SLURM_"))}
    code = (
        "import loadscope, sys; r = loadscope.LoadRecord();"
        " loadscope.load_model(sys.argv[1], record=r); print([f.strategy for f in r.files])"
    )
    run = run_here([sys.executable, "-c", code, str(tiny.root)], env=env, timeout=60, check=True)
    assert "node-shared" not in run.stdout


def test_the_rank_round_counts_what_the_storage_served_per_pattern(disk: EmulatedDisk) -> None:
    """The rank round re-enacts the stacks' patterns with 4 ranks beside the node-shared
    load, each counted from the emulated disk's request log: every rank's O_DIRECT reads
    make the storage serve the model 4 times; mapping (once warm or not) and node sharing,
    once. The node-shared trial sends the requests the printed ``loadscope.load_model``
    sends (auto's 1 MiB; the round used 8 x 16 MiB before)."""
    from collections import Counter

    from loadscope.engine.broadcast import (
        BroadcastOptions,
        BroadcastTrialFinished,
        BroadcastTrialStarted,
        run_broadcast,
    )
    from loadscope.model.targets import resolve

    assert disk.log is not None
    log = disk.log
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    modes = ("node-shared", "mmap", "direct", "warm-node")

    def listen(event: object) -> None:
        if isinstance(event, BroadcastTrialStarted):
            starts[event.trial.id] = log.end()
        if isinstance(event, BroadcastTrialFinished):
            ends[event.trial.id] = log.end()

    report = run_broadcast(
        resolve(str(disk.path)),
        BroadcastOptions(ranks=WORLD, modes=modes, cache=("cold",), repeats=1, warmup=False),
        listen,
    )
    assert report.failures == [], report.failures
    by_mode = {t.mode: t for t in report.trials}
    for mode, t in by_mode.items():
        assert t.status == "ok" and t.verified, (mode, t.reason)
        assert t.storage_counter == "request log", mode
        amp = t.storage_amplification
        assert amp is not None
        if mode == "direct":
            assert 3.9 <= amp <= 4.2, (mode, amp)
        else:
            assert amp <= 1.05, (mode, amp)
    shared = by_mode["node-shared"]
    text = log.path.read_bytes()[starts[shared.id] : ends[shared.id]].decode()
    sizes = Counter(int(line.split()[2]) for line in text.splitlines() if line.strip())
    assert sizes.most_common(1)[0][0] == 1 << 20, sizes.most_common(3)
    # The stacks' routes take their rank lines from this round's own figures (the facts
    # the doctor builds): every rank's O_DIRECT flag says the node reads the model about
    # 4 times, loadscope's node-shared load once.
    from loadscope.advice.facts import Facts

    f = Facts(
        storage_class="fuse", model_bytes=24 << 20, headroom_bytes=None,
        cgroup_limit_bytes=None, limit_bytes_per_s=None, sequential_limit_bytes_per_s=None,
        parallel_scaling=None, read_ahead_kb=128, bdi_path=None, fuse=True,
        formats={"safetensors"}, cold={}, warm={}, trial_ids={}, ranks=WORLD,
        rank_modes={(m.mode, m.cache): m for m in report.summary},
    )  # fmt: skip
    direct, once = f.ranks_note("direct"), f.ranks_note("node-shared")
    assert direct.startswith(f"with {WORLD} ranks: storage serves "), direct
    assert float(direct.split("serves ")[1].split("x")[0]) >= 3.9, direct
    assert once.startswith(f"with {WORLD} ranks: storage serves 1.0x the model"), once
