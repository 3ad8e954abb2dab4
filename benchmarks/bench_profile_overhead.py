"""What ``time --profile`` costs the command it profiles (issue 52): the same cold start
run with and without py-spy attached, interleaved.

The command is ``tests/integration/test_time_profile.py``'s script with known phases
(``import torch``, a ``load_file`` of 64 MiB and its copy into a module, ``torch.compile``
of a small module and its first call), its download replaced by a 1 s sleep (no server).
Each run starts with the model's files evicted and verified cold, and is timed by
``loadscope``'s own runner (``engine/usercmd.py``: spawn to exit), the profiled one with
the :class:`~loadscope.engine.phase_recorder.Recorder` that ``time --profile`` uses attached.

Pairs in alternating order (plain then profiled, then profiled then plain); printed: each
pair's ratio, the medians and their ratio. Target: the profiled median within 10% of the
plain one.

``--one plain|profiled`` runs the command once that way and exits: what the library's
command timer compares as whole commands, A B A B::

    farm-bench -n 6 --vs 'python benchmarks/bench_profile_overhead.py --one profiled' \\
        -- python benchmarks/bench_profile_overhead.py --one plain

Run: ``.venv/bin/python benchmarks/bench_profile_overhead.py [--pairs 6] [--rate 25]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from bench_args import evict_model

from loadscope.engine.phase_recorder import Recorder
from loadscope.engine.phases import RATE_HZ
from loadscope.engine.usercmd import RunSpec, run_once
from loadscope.tools.synth import synthesize

TOLERANCE = 0.10
#: Where ``--one`` keeps its model between calls (made once).
KEPT = Path(tempfile.gettempdir()) / "loadscope-bench-profile"


def _script() -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.integration.test_time_profile import SCRIPT

    return SCRIPT.replace("urllib.request.urlopen(sys.argv[2]).read()", "time.sleep(1.0)")


def _prepare(folder: Path) -> tuple[Path, Path]:
    model = folder / "m" / "model.safetensors"
    if not model.exists():
        synthesize(folder / "m", 64 << 20, seed=3)
    script = folder / "start.py"
    script.write_text(_script())
    return model, script


def run(model: Path, script: Path, profiled: bool, rate: int) -> float:
    """One cold run; its seconds (spawn to exit)."""
    evict_model(model.parent)
    recorder = Recorder(rate) if profiled else None
    argv = (sys.executable, str(script), str(model), "-")
    with open("/dev/null", "wb") as sink:
        result = run_once(RunSpec(argv, (str(model),), output=sink, recorder=recorder))
    if result.status != "ok" or result.seconds is None:
        sys.exit(f"the run failed: {result.reason or result.status}")
    if recorder is not None:
        table = recorder.table(result.seconds)
        if table.reason:
            sys.exit(f"not profiled: {table.reason}")
    return result.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--rate", type=int, default=RATE_HZ, help="py-spy's samples a second")
    parser.add_argument("--one", choices=("plain", "profiled"), help="one run, then exit")
    args = parser.parse_args()
    if (why := Recorder.unavailable()) is not None:
        sys.exit(f"cannot profile here: {why}")
    if args.one:
        KEPT.mkdir(exist_ok=True)
        model, script = _prepare(KEPT)
        run(model, script, args.one == "profiled", args.rate)
        return
    with tempfile.TemporaryDirectory(prefix="loadscope-bench-") as tmp:
        model, script = _prepare(Path(tmp))
        plain: list[float] = []
        profiled: list[float] = []
        for i in range(args.pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {p: run(model, script, p, args.rate) for p in order}
            plain.append(got[False])
            profiled.append(got[True])
            print(
                f"pair {i + 1}: plain {got[False]:.2f} s, profiled {got[True]:.2f} s,"
                f" {got[True] / got[False]:.3f}x",
                flush=True,
            )
    a, b = statistics.median(plain), statistics.median(profiled)
    ratios = sorted(p / q for p, q in zip(profiled, plain, strict=True))
    verdict = "PASS" if b / a <= 1 + TOLERANCE else "FAIL"
    print(
        f"median plain {a:.2f} s, profiled ({args.rate} Hz) {b:.2f} s: {b / a:.3f}x"
        f" (pairs {ratios[0]:.3f}x to {ratios[-1]:.3f}x); target <= {1 + TOLERANCE:.2f}x:"
        f" {verdict}"
    )


if __name__ == "__main__":
    main()
