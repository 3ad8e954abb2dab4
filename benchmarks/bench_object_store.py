"""A model in a bucket on the test bed: the probe against the bed's settings, and
``loadscope.load_model("s3://...")`` against Run:ai's streamer (vLLM's and SGLang's
route) at its defaults and at several concurrencies, interleaved A B C ..., in fresh
processes (each times its own load call: the import is every route's alike).

The bed (``loadscope/tools/objstore.py``): 20 ms to first byte, 50 MB/s per
connection, 1 GB/s in all (the issue's settings), a 512 MiB model in 4 shards. First,
whether the bed itself bounds the figures: the probe's ceiling against what one client
at its defaults reaches.

    python benchmarks/bench_object_store.py [--size 512MiB] [--rounds 3] [--out FILE]
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

from loadscope.base.units import format_rate, parse_size
from loadscope.tools.objstore import ObjectStore, StoreSettings
from loadscope.tools.synth import synthesize

FIRST_BYTE_S, PER_CONNECTION, TOTAL = 0.02, 50e6, 1e9

LOAD_MODEL = """
import sys, time, loadscope, torch
t = time.perf_counter()
state = loadscope.load_model(sys.argv[1])
print(time.perf_counter() - t, sum(v.numel() * v.element_size() for v in state.values()))
"""
RUNAI = """
import sys, time
from runai_model_streamer import SafetensorsStreamer, list_safetensors
t = time.perf_counter()
n = 0
with SafetensorsStreamer() as s:
    s.stream_files(list_safetensors(sys.argv[1]))
    for name, tensor in s.get_tensors():
        n += tensor.clone().numel() * tensor.element_size()
print(time.perf_counter() - t, n)
"""


def run(code: str, address: str, env: dict[str, str]) -> tuple[float, int]:
    done = subprocess.run(
        [sys.executable, "-c", code, address],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    seconds, nbytes = done.stdout.split()
    return float(seconds), int(nbytes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="512MiB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        synthesize(root / "models" / "llm", parse_size(args.size), shards=4, seed=7)
        settings = StoreSettings(FIRST_BYTE_S, PER_CONNECTION, TOTAL)
        with ObjectStore(root, settings) as store:
            env = {
                **os.environ,
                "AWS_ENDPOINT_URL": store.url,
                "AWS_ACCESS_KEY_ID": "bench",
                "AWS_SECRET_ACCESS_KEY": "bench",
                "AWS_EC2_METADATA_DISABLED": "true",
                "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
            }
            address = "s3://models/llm"
            probe_json = root / "probe.json"
            subprocess.run(
                [sys.executable, "-m", "loadscope", "probe", address, "--budget", "60",
                 "--json", str(probe_json), "--quiet"],
                env=env, check=True, timeout=600,
            )  # fmt: skip
            block = json.loads(probe_json.read_text())["object_store"]
            routes = {
                "loadscope.load_model": (LOAD_MODEL, {}),
                "runai defaults": (RUNAI, {}),
                **{
                    f"runai concurrency {n}": (RUNAI, {"RUNAI_STREAMER_CONCURRENCY": str(n)})
                    for n in (16, 32, 64)
                },
            }
            times: dict[str, list[float]] = {name: [] for name in routes}
            size = 0
            for _ in range(args.rounds):
                for name, (code, extra) in routes.items():
                    seconds, size = run(code, address, {**env, **extra})
                    times[name].append(seconds)
    medians = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "probe": {
            "first_byte_p50_s": block["first_byte_p50_s"],
            "one_connection_bytes_per_s": block["per_connection"][-1]["bytes_per_s"],
            "ceiling_bytes_per_s": block["ceiling_bytes_per_s"],
            "saturates_at": block["saturates_at"],
            "bound": block["bound"],
        },
        "bytes": size,
        "seconds": times,
        "median_s": medians,
    }
    print(json.dumps(result, indent=2))
    ceiling = block["ceiling_bytes_per_s"]
    print(
        f"\nprobe: first byte {block['first_byte_p50_s'] * 1e3:.1f} ms"
        f" (bed {FIRST_BYTE_S * 1e3:g}),"
        f" one connection {format_rate(block['per_connection'][-1]['bytes_per_s'])}"
        f" (bed {format_rate(PER_CONNECTION)}), ceiling {format_rate(ceiling)}"
        f" (bed {format_rate(TOTAL)})"
    )
    base = medians["loadscope.load_model"]
    for name, m in medians.items():
        rate = size / m
        print(
            f"{name:24s} {m:7.3f} s {format_rate(rate):>10s} {rate / ceiling:5.2f}x ceiling"
            f"  load_model {m / base:5.2f}x faster"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
