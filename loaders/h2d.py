"""The measured host-to-device ceiling: ``python -m loadscope.loaders.h2d [--device cuda:N]``.

Copies one buffer (256 MiB by default) from host memory to the GPU a few times,
from pinned (page-locked) memory and from ordinary pageable memory, and prints
one JSON object: the median GB/s of each, every repeat's figure, and the device.
No load from the CPU side can reach the GPU faster than the pinned figure, so it
is the ceiling the GPU strategies are judged against. Each copy is timed on the
wall clock up to a device synchronize, after one untimed warm-up copy.

Without a usable CUDA device it prints ``{"status": "unavailable", "reason": ...}``
and exits 0: an absent GPU is an answer, not a failure. Like every
``loadscope.loaders`` program it can also run as a fork-server child (``main``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

DEFAULT_BYTES = 256 << 20
DEFAULT_REPEATS = 5


def measure(
    device: str = "cuda", nbytes: int = DEFAULT_BYTES, repeats: int = DEFAULT_REPEATS
) -> dict[str, Any]:
    """The H2D figures as a JSON-ready dict (status ok), or status unavailable with the reason."""
    from loadscope.loaders.cuda import cuda_device, cuda_unavailable

    why = cuda_unavailable()
    if why:
        return {"status": "unavailable", "reason": why}
    import torch

    if nbytes < 1 or repeats < 1:
        raise ValueError("--bytes and --repeats must be at least 1")
    target = cuda_device(device)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=target)
    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    pageable = torch.empty(nbytes, dtype=torch.uint8)
    pinned.fill_(1)  # fault every page in before the clock: the copy is measured, not the fault
    pageable.fill_(1)
    out: dict[str, Any] = {
        "status": "ok",
        "device": str(target),
        "name": torch.cuda.get_device_name(target),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "buffer_bytes": nbytes,
        "repeats": repeats,
    }
    for kind, src in (("pinned", pinned), ("pageable", pageable)):
        seconds = _time_copies(torch, target, dst, src, repeats)
        rates = [nbytes / s for s in seconds]
        out[f"{kind}_bytes_per_s"] = statistics.median(rates)
        out[f"{kind}_samples_bytes_per_s"] = rates
    return out


def _time_copies(torch: Any, device: Any, dst: Any, src: Any, repeats: int) -> list[float]:
    # Wall time around copy + synchronize: what a loader waits for. (CUDA events would
    # miss the host-side staging of a pageable copy.)
    dst.copy_(src, non_blocking=True)  # warm-up: first-use costs are not the link's
    torch.cuda.synchronize(device)
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - t0)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadscope.loaders.h2d", description=__doc__)
    parser.add_argument("--device", default="cuda", help="cuda or cuda:N (default: cuda)")
    parser.add_argument("--bytes", type=int, default=DEFAULT_BYTES, help="buffer size in bytes")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    t0 = time.monotonic()
    try:
        result = measure(args.device, args.bytes, args.repeats)
    except Exception as exc:  # noqa: BLE001  (reported as this program's one answer)
        result = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    result["elapsed_s"] = round(time.monotonic() - t0, 3)
    print(json.dumps(result), flush=True)
    return 1 if result["status"] == "error" else 0


if __name__ == "__main__":
    sys.exit(main())
