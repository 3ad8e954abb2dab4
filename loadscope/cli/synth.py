"""``loadscope synth``: its arguments and what runs it."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from loadscope.base.errors import ExitCode
from loadscope.base.units import format_bytes, parse_size
from loadscope.cli.common import SEED, SHARDS, Command, opt, size_arg
from loadscope.cli.progress import ByteMeter


def run(args: argparse.Namespace, out: TextIO) -> ExitCode:
    from loadscope.tools.synth import synthesize

    total = args.size * (2 if args.format == "both" else 1)
    # Redrawn on a terminal; silent when piped (a synth is a step of scripts and tests).
    meter = ByteMeter("writing", "live" if sys.stderr.isatty() else "off")
    t0 = time.monotonic()
    written = 0

    def progress(n: int) -> None:
        nonlocal written
        written += n
        meter(written, total, time.monotonic() - t0)

    try:
        result = synthesize(
            args.out,
            args.size,
            shards=args.shards,
            fmt=args.format,
            seed=args.seed,
            force=args.force,
            progress=progress,
        )
    finally:
        meter.close()
    elapsed = time.monotonic() - t0
    s = result.shape
    out.write(
        f"wrote {len(result.files)} file(s), {result.tensor_count} tensors,"
        f" {format_bytes(result.tensor_bytes)} of tensors per format to {result.root}"
        f" in {elapsed:.1f} s\n"
        f"shape: hidden {s.hidden}, {s.layers} layers, intermediate {s.intermediate},"
        f" {s.heads} heads ({s.kv_heads} kv), vocab {s.vocab}; seed {result.seed}\n"
    )
    return ExitCode.OK


COMMAND = Command(
    name="synth",
    help="write a synthetic checkpoint shaped like a decoder LLM",
    description="Write a deterministic synthetic checkpoint shaped like a decoder LLM"
    " (large embedding, attention and MLP matrices, small norms and biases;"
    " bf16/fp16/fp32), with an index when sharded.",
    arguments=(
        opt("out", metavar="OUT", help="output directory (created if missing)"),
        opt(
            "--size",
            type=size_arg,
            default=parse_size("1GiB"),
            help="total tensor bytes, e.g. 512MiB, 2GiB (default 1GiB)",
        ),
        opt("--shards", type=SHARDS, default=1, help="number of weight files (default 1)"),
        opt(
            "--format",
            choices=("safetensors", "torch", "both"),
            default="safetensors",
            help="safetensors, a torch zip checkpoint, or both with identical tensors",
        ),
        opt("--seed", type=SEED, default=0, help="seed of the pseudo-random contents (default 0)"),
        opt("--force", action="store_true", help="overwrite files of a previous synth in OUT"),
    ),
    run=run,
)
