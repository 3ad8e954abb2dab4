"""Speed targets for the foundation: header parsing and synthetic checkpoint writing.

Run: ``.venv/bin/python benchmarks/bench_foundation.py`` (exit 1 when a target is missed).
Medians of interleaved repeats; targets are set with headroom for a noisy 2-core VM,
so a miss means a real regression, not jitter.
"""

from __future__ import annotations

import json
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

from loadscope.loaders.safetensors_format import read_header
from loadscope.tools.synth import synthesize

#: A large MoE checkpoint shard can list ~100k tensors; parsing must stay interactive.
HEADER_TENSORS = 100_000
HEADER_TARGET_S = 1.5
#: Tests and demos build checkpoints on the fly: at least this rate to a local disk.
SYNTH_BYTES = 256 << 20
SYNTH_TARGET_BYTES_PER_S = 150e6
REPEATS = 5


def _big_header(path: Path) -> None:
    header = {
        f"model.layers.{i // 64}.experts.{i % 64}.w{i % 3}.weight": {
            "dtype": "BF16",
            "shape": [4, 4],
            "data_offsets": [32 * i, 32 * i + 32],
        }
        for i in range(HEADER_TENSORS)
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (32 * HEADER_TENSORS))


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _big_header(root / "big.safetensors")
        parse_s, synth_rate = [], []
        for i in range(REPEATS):  # interleaved: both see the same machine state
            t0 = time.perf_counter()
            read_header(root / "big.safetensors")
            parse_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            synthesize(root / f"s{i}", SYNTH_BYTES)
            synth_rate.append(SYNTH_BYTES / (time.perf_counter() - t0))
        parse, rate = statistics.median(parse_s), statistics.median(synth_rate)
    ok_parse, ok_rate = parse <= HEADER_TARGET_S, rate >= SYNTH_TARGET_BYTES_PER_S
    verdict = {True: "ok", False: "MISSED"}
    print(
        f"header parse, {HEADER_TENSORS} tensors: median {parse:.3f} s"
        f" (target <= {HEADER_TARGET_S} s) {verdict[ok_parse]}"
    )
    print(
        f"synth write: median {rate / 1e6:.0f} MB/s"
        f" (target >= {SYNTH_TARGET_BYTES_PER_S / 1e6:.0f} MB/s) {verdict[ok_rate]}"
    )
    return 0 if ok_parse and ok_rate else 1


if __name__ == "__main__":
    sys.exit(main())
