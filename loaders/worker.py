"""The worker process of one trial: ``python -m loadscope.loaders.worker SPEC_JSON``.

A fresh process per trial gives a clean heap, no page-cache sharing with the
parent, and containment of crashes and the OOM killer. Workers are normally
forked from the fork server (``loaders/forkserver.py``), which has imported
torch once; run on its own (``LOADSCOPE_FORKSERVER=0``) a worker imports torch
itself. Either way torch is imported before the clock starts. The worker
times the strategy until every page of every tensor has been touched,
measures its own faults and I/O around exactly that region, then digests the
tensors (outside the timed region) for the parent to compare with a reference
read. With ``"device": "cuda[:N]"`` in the spec, a GPU strategy loads onto the
device: the CUDA context is created before the clock starts (like the torch
import, it is not the load), the device is synchronized before the clock stops,
and the digests are of the tensors copied back to the CPU. Events go to the
original stdout; anything a library prints is redirected to stderr so it cannot
corrupt the protocol.

``python -m loadscope.loaders.worker --describe`` prints, as JSON, every
strategy's declaration and why it is unavailable here (if it is).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import zlib
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadscope.loaders.events import Done, Emitter, Failed, Start

if TYPE_CHECKING:
    import torch

PAGE = 4096


def digest_bytes(data: Any) -> str:
    """The digest the parent's reference read and every worker agree on: crc32 and length."""
    view = memoryview(data).cast("B")
    return f"{zlib.crc32(view):08x}:{len(view)}"


def tensor_bytes(t: torch.Tensor) -> Any:
    import torch

    if t.device.type != "cpu":
        t = t.cpu()  # digests are taken outside the timed region, of the bytes on the host
    flat = t.contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    return flat.view(torch.uint8).numpy()


def touch(t: torch.Tensor) -> int:
    """Read one byte of every page of ``t`` (so lazy mmap pages are really read); its bytes.

    Device memory is never lazy: a GPU tensor is only counted here, and the worker
    synchronizes its device once, after the last tensor and before the clock stops
    (a synchronize per tensor would serialize the strategy's own overlap).
    """
    import torch

    if t.numel() == 0:
        return 0
    if t.device.type != "cpu":
        return int(t.numel() * t.element_size())
    raw = t.reshape(-1).view(torch.uint8) if t.is_contiguous() else tensor_bytes(t)
    raw = raw if isinstance(raw, torch.Tensor) else torch.from_numpy(raw)
    raw[::PAGE].sum()
    raw[-1].item()
    return int(raw.numel())


def describe() -> dict[str, Any]:
    from loadscope.loaders.strategies import STRATEGIES

    out = {}
    for name, strategy in STRATEGIES.items():
        info = strategy.describe()
        try:
            info["unavailable"] = strategy.unavailable()
        except Exception as exc:  # noqa: BLE001  (reported as the reason it is unusable)
            info["unavailable"] = f"{type(exc).__name__}: {exc}"
        out[name] = info
    return out


def _mean_residency(paths: list[str]) -> float | None:
    from loadscope.probes.pagecache import residency

    fractions = [residency(p).fraction for p in paths]
    known = [f for f in fractions if f is not None]
    return sum(known) / len(known) if known and len(known) == len(fractions) else None


def run(spec: dict[str, Any], emitter: Emitter) -> int:
    import safetensors.torch  # noqa: F401
    import torch  # imported before the clock starts: its import is not the load

    from loadscope.loaders.strategies import get
    from loadscope.loaders.strategy import FileRequest, LoadContext
    from loadscope.probes.iosampler import IoSampler, delta

    strategy = get(spec["strategy"])
    files = [
        FileRequest(f["path"], f["size_bytes"], f["format"], _names(f.get("tensors")))
        for f in spec["files"]
    ]
    device = str(spec.get("device", "cpu"))
    ctx = LoadContext(
        knobs=dict(spec.get("knobs", {})), hints=dict(spec.get("hints", {})), device=device
    )
    # A trial times its own strategy in its own process: never a load shared with other
    # local ranks (a srun step sets SLURM's local ids for every process it starts).
    os.environ["LOADSCOPE_NODE_SHARE"] = "0"
    if scratch := spec.get("scratch_dir"):
        # Libraries that write caches under the temp dir (torch's inductor, when
        # transformers builds a model) write into the run's scratch dir, which the
        # parent removes, whatever happens to this worker.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(str(scratch), "torchinductor")
    _prepare_device(strategy.name, strategy.requires.gpu, device)
    strategy.prepare(files, ctx)
    block_stat = spec.get("block_stat")
    sampler = IoSampler(block_stat_path=Path(block_stat) if block_stat else None)
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
    emitter.emit(
        Start(
            strategy.name, os.getpid(), time.monotonic(), spec["total_bytes"], spec["total_tensors"]
        )
    )
    # (A model in another source than files has no page cache here to read.)
    resident = None if spec.get("source") else _mean_residency([f.path for f in files])
    tensors: dict[str, torch.Tensor] = {}
    done_bytes = 0
    first: float | None = None
    before = sampler.sample()
    t0 = time.perf_counter()
    devices: set[torch.device] = set()
    for name, tensor in strategy.load(files, ctx):
        done_bytes += touch(tensor)
        tensors[name] = tensor
        if tensor.is_cuda:
            devices.add(tensor.device)
        if first is None:
            first = time.perf_counter() - t0
        emitter.progress(done_bytes, len(tensors))
    for d in devices:
        torch.cuda.synchronize(d)  # every copy to the device is part of the load
    # What a fresh process pays for the call that this forked worker had already paid
    # (a module imported once by the fork server), as the strategy measured it.
    seconds = time.perf_counter() - t0 + float(ctx.notes.get("setup_s") or 0.0)
    after = sampler.sample()
    emitter.progress(done_bytes, len(tensors), force=True)
    digests = {name: digest_bytes(tensor_bytes(t)) for name, t in tensors.items()}
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    emitter.emit(
        Done(
            t=time.monotonic(),
            seconds=seconds,
            first_tensor_s=first,
            bytes=done_bytes,
            tensors=len(tensors),
            digests=digests,
            peak_rss_bytes=peak_rss,
            detail={
                "io": asdict(delta(before, after)),
                "residency_at_start": resident,
                # The knobs as the trial ran them: a route's trial must run its code's own.
                "settings": ctx.settings(strategy),
                **ctx.notes,
            },
        )
    )
    return 0


def _prepare_device(strategy: str, gpu: bool, device: str) -> None:
    """Check the strategy fits the device; create the CUDA context before the clock starts."""
    import torch

    from loadscope.loaders.cuda import cuda_device, is_cuda

    if gpu and not is_cuda(device):
        raise ValueError(f"{strategy} is a GPU strategy: it needs --device cuda, not {device!r}")
    if not gpu and device != "cpu":
        raise ValueError(f"{strategy} is a CPU strategy: it loads to the CPU, not {device!r}")
    if gpu:
        target = cuda_device(device)
        torch.empty(1, device=target)
        torch.cuda.synchronize(target)


def _names(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Events go to the real stdout; stray prints (from any library) go to stderr.
    events = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    emitter = Emitter(events)
    if args == ["--describe"]:
        events.write(json.dumps(describe()) + "\n")
        return 0
    if len(args) != 1:
        emitter.emit(
            Failed(time.monotonic(), "usage: python -m loadscope.loaders.worker SPEC_JSON")
        )
        return 2
    try:
        spec = json.loads(Path(args[0][1:]).read_text() if args[0].startswith("@") else args[0])
        return run(spec, emitter)
    except MemoryError:
        emitter.emit(Failed(time.monotonic(), "out of memory (MemoryError) while loading"))
        return 1
    except BaseException as exc:  # noqa: BLE001  (the worker's one funnel: a failed event)
        emitter.emit(Failed(time.monotonic(), f"{type(exc).__name__}: {exc}"))
        return 1


if __name__ == "__main__":
    sys.exit(main())
