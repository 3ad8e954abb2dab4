"""What a fresh process's first ``loadscope.load_file`` pays beyond the call itself.

A resident 8 MiB synthetic model; each run a fresh interpreter that imports torch and
safetensors (as a user's script does), then ``import loadscope`` and two calls of
``loadscope.load_file`` on the same file, each timed. The first call's set-up is the
first call less the second; also which strategy modules the first call imported (the
public API imports none). Medians over the runs.

Run: ``.venv/bin/python benchmarks/bench_first_call.py [--runs 7]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from loadscope.tools.synth import synthesize

_CHILD = r"""
import json, sys, time
import torch, safetensors.torch
t0 = time.perf_counter()
import loadscope
t1 = time.perf_counter()
loadscope.load_file(sys.argv[1])
t2 = time.perf_counter()
loadscope.load_file(sys.argv[1])
t3 = time.perf_counter()
registry = [m for m in sys.modules if m.startswith("loadscope.loaders.strategies")]
print(json.dumps({"import": t1 - t0, "first": t2 - t1, "second": t3 - t2,
                  "strategy_modules": len(registry)}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = synthesize(Path(tmp) / "m", 8 << 20, seed=2).root / "model.safetensors"
        path.read_bytes()  # resident: the calls map it, the set-up is what is left
        runs = [
            json.loads(
                subprocess.run(
                    [sys.executable, "-c", _CHILD, str(path)],
                    # A user's folder: from this checkout, `-c` would import loadscope
                    # from the source folders beside it, not the installed package.
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            for _ in range(args.runs)
        ]
    med = {k: statistics.median(r[k] for r in runs) for k in ("import", "first", "second")}
    print(f"{args.runs} fresh processes, medians:")
    print(f"  import loadscope   {med['import'] * 1e3:6.1f} ms")
    print(f"  first load_file    {med['first'] * 1e3:6.1f} ms")
    print(f"  second load_file   {med['second'] * 1e3:6.1f} ms")
    print(f"  first-call set-up  {(med['first'] - med['second']) * 1e3:6.1f} ms")
    print(f"  strategy modules the first call imported: {runs[0]['strategy_modules']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
