"""``loadscope time`` against the same script timed by hand the same way (issue 42).

A 256 MiB Llama with tied weights (bf16, saved by transformers itself) on the emulated
slow disk (5 ms per request, readahead 128 KiB, 12 background requests); ``load.py``
calls ``AutoModelForCausalLM.from_pretrained(path, dtype=bfloat16)``, touches every page
of its weights (transformers 5 maps them and reads at first use) and exits. Rounds
of two steps, in alternating order:

- ``loadscope time --model M --fixes readahead,warm --rounds 1 -- python load.py M``;
- by hand, for each variant: the model's files evicted and verified cold (and for
  ``readahead`` the mount's ``read_ahead_kb`` 8192 and ``max_background`` 64 written,
  put back after), then the command run and timed from start to exit (``warm``:
  ``loadscope warm M`` and then the command, timed together).

Per variant: the medians of both and their ratio. Target: every variant within 10%.
Also printed: what ``loadscope time`` saw the script read (bytes, faults, RSS).

Run (root, FUSE): ``.venv/bin/python benchmarks/bench_time_command.py [--rounds 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_args import evict_model

from loadscope.base.units import format_bytes
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason

TOLERANCE = 0.10
VARIANTS = ("as-is", "readahead", "warm")
LOAD = """
import sys, torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
# transformers 5 returns the weights still mapped: a model that runs reads them all.
# Every page touched, as a first forward pass would (issue 49: the lazy script's
# figures, readahead 1.02x and warm first 0.73x, were of a load that had not happened).
for p in m.state_dict().values():
    p.detach().reshape(-1).view(torch.uint8)[::4096].sum()
print("loaded", sum(p.numel() for p in m.parameters()))
"""


def tied_llama(folder: Path) -> None:
    """~256 MiB of bf16 weights, embeddings tied to the head, saved by transformers."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=16,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)


def knobs(model: Path) -> list[tuple[Path, str]]:
    from loadscope.probes.blockdev import bdi_settings, fuse_connection_id

    dev = os.stat(model).st_dev
    major, minor = os.major(dev), os.minor(dev)
    conn = Path("/sys/fs/fuse/connections") / str(fuse_connection_id(major, minor))
    return [
        (Path(bdi_settings(major, minor).path) / "read_ahead_kb", "8192"),
        (conn / "max_background", "64"),
    ]


def by_hand(model: Path, script: Path, variant: str) -> float:
    evict_model(model)
    command = [sys.executable, str(script), str(model)]
    saved: list[tuple[Path, str]] = []
    if variant == "readahead":
        for path, value in knobs(model):
            saved.append((path, path.read_text().strip()))
            path.write_text(value)
    try:
        t0 = time.perf_counter()
        if variant == "warm":
            warm = [sys.executable, "-m", "loadscope", "warm", "--quiet", str(model)]
            subprocess.run(warm, check=True, capture_output=True)
        subprocess.run(command, check=True, capture_output=True)
        return time.perf_counter() - t0
    finally:
        for path, old in saved:
            path.write_text(old)


def with_loadscope(model: Path, script: Path, out: Path) -> dict[str, object]:
    command = [sys.executable, "-m", "loadscope", "time", "--model", str(model), "--fixes"]
    command += ["readahead,warm", "--rounds", "1", "--quiet", "--json", str(out)]
    command += ["--output", os.devnull, "--", sys.executable, str(script), str(model)]
    subprocess.run(command, check=True, capture_output=True)
    doc: dict[str, object] = json.loads(out.read_text())
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if (why := fuse_unavailable_reason()) is not None or os.geteuid() != 0:
        print(f"needs the emulated disk as root: {why or 'not root'}", file=sys.stderr)
        return 2
    hand: dict[str, list[float]] = {v: [] for v in VARIANTS}
    tool: dict[str, list[float]] = {v: [] for v in VARIANTS}
    seen: dict[str, object] = {}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        src = Path(tmp) / "src"
        tied_llama(src)
        script = Path(tmp) / "load.py"
        script.write_text(LOAD)
        settings = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
        with emulated_disk(src, Path(tmp) / "mnt", settings) as disk:
            size = sum(f.stat().st_size for f in disk.path.glob("*.safetensors"))
            for r in range(args.rounds):
                steps = ("hand", "tool") if r % 2 == 0 else ("tool", "hand")
                for step in steps:
                    if step == "hand":
                        for v in VARIANTS:
                            hand[v].append(by_hand(disk.path, script, v))
                        continue
                    doc = with_loadscope(disk.path, script, Path(tmp) / f"time-{r}.json")
                    for var in doc["variants"]:  # type: ignore[attr-defined]
                        tool[var["name"]].append(var["median_seconds"])
                        if var["name"] == "as-is":
                            seen = var["runs"][0]
    print(
        f"\n#### `loadscope time` vs by hand: from_pretrained, {format_bytes(size)} tied Llama,"
        f" emulated disk 5 ms, {args.rounds} rounds\n"
    )
    print("| variant | by hand, median s | loadscope time, median s | ratio | runs (hand / time) |")
    print("|---|---|---|---|---|")
    missed = []
    for v in VARIANTS:
        h, t = statistics.median(hand[v]), statistics.median(tool[v])
        ratio = t / h
        runs = " ".join(f"{x:.2f}" for x in hand[v]) + " / " + " ".join(f"{x:.2f}" for x in tool[v])
        print(f"| {v} | {h:.3g} | {t:.3g} | {ratio:.3f} | {runs} |")
        if abs(ratio - 1) > TOLERANCE:
            missed.append(f"{v}: {ratio:.3f}")
    base = statistics.median(hand["as-is"])
    print(
        "\nBy hand, speed-ups over as is: "
        + ", ".join(f"{v} {base / statistics.median(hand[v]):.2f}x" for v in VARIANTS[1:])
    )
    print(
        f"What the script read (as is, last round): {format_bytes(int(seen['storage_read_bytes']))}"  # type: ignore[call-overload]
        f" from storage, {format_bytes(int(seen['read_call_bytes']))} by read calls,"  # type: ignore[call-overload]
        f" {seen['major_faults']} major faults, peak RSS"
        f" {format_bytes(int(seen['peak_rss_bytes']))}"  # type: ignore[call-overload]
    )
    for line in missed:
        print(f"missed: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
