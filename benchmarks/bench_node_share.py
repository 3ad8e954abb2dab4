"""Four ranks on one node loading the same cold model: how often the storage serves it.

Under ``torchrun --nproc-per-node 4`` each rank loads a 256 MiB synthetic model served by
the emulated slow disk (5 ms per request, readahead 128 KiB, its request log on), timed
from a barrier after the imports to the end of its load (every page touched); the
slowest rank's time is the step's. Compared, interleaved over rounds, each cold:

- ``shared``: ``loadscope.load_model`` (the local ranks read the model once for the node,
  ``loaders/nodeshare.py``);
- ``direct``: the same with sharing off (``LOADSCOPE_NODE_SHARE=0``): every rank's own
  O_DIRECT reads, the behaviour before;
- ``mmap``: ``safetensors.torch.load_file`` in every rank (the page cache is shared);
- ``alone``: one process, ``loadscope.load_model``.

Targets (issue 38): with ``shared``, the storage serves at most 1.1x the model's bytes,
every rank holds identical tensors, and the slowest rank is within 1.3x of ``alone``
(medians). Exit 1 when one is missed.

Run (root, FUSE): ``.venv/bin/python benchmarks/bench_node_share.py [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_args import evict_model

from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize

RANKS = 4
SIZE = 256 << 20

_RANK = r"""
import hashlib, json, os, sys, time, tempfile
import torch, torch.distributed as dist, safetensors.torch, loadscope
from loadscope.loaders.worker import touch
path, how = sys.argv[1], sys.argv[2]
# Where a node-shared rank's time goes: joining the file's group, reading the chunks it
# claims (and waiting for the others'), mapping its copy-on-write view.
from loadscope.loaders import nodeshare
phases = {"join": 0.0, "fill": 0.0, "map_private": 0.0}
def _timed(owner, name, static=False):
    inner = getattr(owner, name)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            phases[name] += time.perf_counter() - t
    setattr(owner, name, classmethod(lambda cls, *a, **k: wrapper(*a, **k)) if static else wrapper)
_timed(nodeshare._Group, "join", static=True)
_timed(nodeshare._Group, "fill")
_timed(nodeshare._Group, "map_private")
dist.init_process_group("gloo")
# loadscope's own imports before the clock, as a training script's would be.
_tiny = tempfile.mkdtemp()
safetensors.torch.save_file({'x': torch.zeros(8)}, os.path.join(_tiny, 'model.safetensors'))
loadscope.load_model(_tiny, local_ranks=None)
dist.barrier()
phases.update(join=0.0, fill=0.0, map_private=0.0)
cpu0 = time.process_time()
t0 = time.perf_counter()
if how == "mmap":
    import glob
    state = {}
    for f in sorted(glob.glob(os.path.join(path, '*.safetensors'))):
        state.update(safetensors.torch.load_file(f))
else:
    state = loadscope.load_model(path)
t1 = time.perf_counter()
n = sum(touch(t) for t in state.values())
seconds = time.perf_counter() - t0
cpu = time.process_time() - cpu0
digest = hashlib.sha256()
for name in sorted(state):
    digest.update(name.encode())
    digest.update(state[name].contiguous().view(torch.uint8).numpy().tobytes())
got = [None] * dist.get_world_size()
dist.all_gather_object(got, (seconds, digest.hexdigest(), t1 - t0, cpu, dict(phases)))
if dist.get_rank() == 0:
    slow = max(got, key=lambda g: g[0])
    print(json.dumps({"slowest": slow[0], "digests": len({g[1] for g in got}),
                      "load": slow[2], "cpu": sum(g[3] for g in got), "phases": slow[4]}))
dist.destroy_process_group()
"""

_ALONE = r"""
import json, os, sys, time, tempfile
import torch, safetensors.torch, loadscope
from loadscope.loaders.worker import touch
_tiny = tempfile.mkdtemp()
safetensors.torch.save_file({'x': torch.zeros(8)}, os.path.join(_tiny, 'model.safetensors'))
loadscope.load_model(_tiny)
cpu0 = time.process_time()
t0 = time.perf_counter()
state = loadscope.load_model(sys.argv[1])
t1 = time.perf_counter()
n = sum(touch(t) for t in state.values())
print(json.dumps({"slowest": time.perf_counter() - t0, "digests": 1, "load": t1 - t0,
                  "cpu": time.process_time() - cpu0}))
"""


Run = tuple[float, float, int, float, float, dict[str, float]]


def run(how: str, model: Path, log: Path, script: Path, ranks: int) -> Run:
    """(slowest rank's seconds, bytes served / model bytes, distinct digests, the slowest
    rank's seconds in the load call (the rest: touching every page), CPU seconds of all
    ranks together, the slowest rank's node-sharing phases)."""
    evict_model(model)
    log.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "LOADSCOPE_NODE_SHARE"}
    if how == "direct":
        env["LOADSCOPE_NODE_SHARE"] = "0"
    if how == "alone":
        argv = [sys.executable, "-c", _ALONE, str(model)]
    else:
        argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks)]
        argv += ["--master-port", str(29500 + os.getpid() % 1000), str(script), str(model)]
        argv += ["mmap" if how == "mmap" else "loadscope"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
    if out.returncode != 0:
        sys.exit(f"{how} failed: {out.stderr[-3000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    served = sum(int(line.split()[2]) for line in log.read_text().splitlines() if line.strip())
    model_bytes = sum(f.stat().st_size for f in model.glob("*.safetensors"))
    return (
        float(got["slowest"]),
        served / model_bytes,
        int(got["digests"]),
        float(got["load"]),
        float(got["cpu"]),
        {k: float(v) for k, v in (got.get("phases") or {}).items()},
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=RANKS)
    args = ap.parse_args()
    if (why := fuse_unavailable_reason()) is not None:
        print(f"needs the emulated disk: {why}", file=sys.stderr)
        return 2
    hows = ("shared", "direct", "mmap", "alone")
    results: dict[str, list[Run]] = {h: [] for h in hows}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        src = synthesize(Path(tmp) / "src", SIZE, seed=38)
        script = Path(tmp) / "rank.py"
        script.write_text(_RANK)
        settings = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
        with emulated_disk(src.root, Path(tmp) / "mnt", settings, log_requests=True) as disk:
            assert disk.log is not None
            for i in range(args.rounds):
                for how in hows if i % 2 == 0 else tuple(reversed(hows)):
                    results[how].append(run(how, disk.path, disk.log.path, script, args.ranks))
    print(
        f"\n#### {args.ranks} ranks, {SIZE >> 20} MiB, emulated disk 5 ms, {args.rounds} rounds\n"
    )
    print(
        "| load | slowest rank, median s | vs one process | of it in the load call"
        " | CPU s, all ranks | storage served / model | digests |"
    )
    print("|---|---|---|---|---|---|---|")
    alone = statistics.median(r[0] for r in results["alone"])
    for how in hows:
        rows = results[how]
        secs = statistics.median(r[0] for r in rows)
        served = statistics.median(r[1] for r in rows)
        digests = max(r[2] for r in rows)
        load = statistics.median(r[3] for r in rows)
        cpu = statistics.median(r[4] for r in rows)
        print(
            f"| {how} | {secs:.3g} | {secs / alone:.2f}x | {load:.3g} | {cpu:.3g}"
            f" | {served:.2f}x | {digests} |"
        )
    phases = [r[5] for r in results["shared"] if r[5]]
    if phases:
        load = statistics.median(r[3] for r in results["shared"])
        print("\nWhere the slowest `shared` rank's load call went (medians, s):\n")
        print(
            "| joining the file's group | reading its chunks and waiting for the others'"
            " | mapping its view (page tables filled) | the rest (checks, tensors) |"
        )
        print("|---|---|---|---|")
        med = {k: statistics.median(p.get(k, 0.0) for p in phases) for k in phases[0]}
        rest = load - sum(med.values())
        print(f"| {med['join']:.3g} | {med['fill']:.3g} | {med['map_private']:.3g} | {rest:.3g} |")
    shared = results["shared"]
    missed = []
    if statistics.median(r[1] for r in shared) > 1.05:
        missed.append("shared: the storage served more than 1.05x the model")
    if any(r[2] != 1 for r in shared):
        missed.append("shared: ranks held different tensors")
    if statistics.median(r[0] for r in shared) > 1.3 * alone:
        missed.append("shared: the slowest rank took over 1.3x one process alone")
    for line in missed:
        print(f"missed: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
