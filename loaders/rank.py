"""One rank of a multi-rank load: ``python -m loadscope.loaders.rank PLAN_JSON``.

The parent (``loadscope.engine.broadcast``) starts N of these with ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set; they join one
``torch.distributed`` process group (gloo on CPU, NCCL on CUDA) and run the
whole plan of trials together, so torch's import and the group's set-up are
paid once, not per trial. Per trial:

1. a barrier (nobody is still reading the previous trial's files);
2. rank 0 puts the page cache in the asked state and verifies it, as the ``bench``
   parent does (``loaders/cachestate.py``: cold evicted and checked; warm pre-read
   as ``loadscope warm`` reads and checked resident) while the other ranks wait at
   the next barrier;
3. after that barrier each rank starts its clock, loads every tensor of every file
   by the trial's mode, touches every page, and stops its clock;
4. outside the timed region: crc32 of every tensor, and this rank's numbers.

Modes (every rank ends holding every tensor):

* ``independent``: each rank reads every file itself (one full read per file into
  a buffer, tensors are views on it — ``safetensors.torch.load(f.read())``
  without its extra copy);
* ``broadcast``: rank 0 reads each file and ``dist.broadcast``\\ s its bytes as one
  flat buffer (one collective per file, fewer and larger than one per tensor);
  the others allocate a buffer of the file's size, receive it, and parse the
  header from what they received — they read nothing from storage;
* ``broadcast-async``: the same with ``async_op=True``, so rank 0 reads file i+1
  while file i is on the wire; every handle is waited on before the clock stops;
* ``sharded``: file i is owned by rank ``i % world``; owners read their files
  (in parallel with each other) and broadcast them;
* a model in an object store (each file of the plan with a ``fetch_from`` address): a read is
  the whole object fetched with ranged GETs in flight (``independent``: every rank
  fetches the model; ``broadcast``, ``sharded``: it is fetched once for the node);
* ``node-shared``: what ``loadscope.load_file`` does for local ranks: each rank reads
  the chunks it claims of every file into one shared-memory file, and every rank maps
  it copy-on-write (``loaders/nodeshare.py``): one read of storage, one copy in RAM.

And what the stacks do with N ranks, measured beside loadscope's modes:

* ``mmap``: every rank memory-maps every file (``safetensors.torch.load_file``, the
  default loader of transformers, diffusers, vLLM and SGLang): the page cache is
  shared, so the storage serves a page once, but every rank faults;
* ``direct``: every rank reads every file with many large O_DIRECT requests (what
  fastsafetensors and Run:ai's streamer do per rank): nothing is shared;
* ``warm-node``: rank 0 fills the page cache as ``loadscope warm`` does, once for the
  node, then every rank memory-maps the files (the clock includes the warm).

Each rank counts the bytes of every read it issues (its own accounting) and
cross-checks with ``/proc/self/io`` (``read_bytes``: what reached storage).
Per-trial peak RSS comes from ``VmHWM`` after resetting it (``clear_refs``),
falling back to ``ru_maxrss`` (the process's lifetime peak) where that is refused.

Events are JSON lines on the original stdout, each with ``"v"`` and ``"event"``
(``start``, ``cache``, ``trial``, ``failed``, ``done``) and the rank; anything a
library prints goes to stderr, so it cannot corrupt the protocol.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadscope.loaders import mapped
from loadscope.loaders.events import LineWriter
from loadscope.loaders.rank_events import (
    CODEC,
    MODES,
    STACK_MODES,
    RankCache,
    RankDone,
    RankEvent,
    RankFailed,
    RankStart,
    RankTrial,
)
from loadscope.loaders.rank_reads import (
    Reads,
    node_shared,
    read_direct,
    read_file,
    read_mapped,
    read_object,
    read_to_device,
    warm_files,
)
from loadscope.loaders.staged import CudaDevice

if TYPE_CHECKING:
    import torch

#: Reads are issued in pieces of this size (each one counted).
READ_CHUNK_BYTES = 16 << 20
#: One collective carries at most this many bytes (larger files are sent in pieces).
MAX_COLLECTIVE_BYTES = 1 << 30


_Emitter = LineWriter[RankEvent]


# -- reading, with this rank's own accounting (loaders/rank_reads.py) ----------------------------

_Reads = Reads  # the name tests and older callers import


def _empty(size: int, device: torch.device) -> torch.Tensor:
    import torch

    return torch.empty(size, dtype=torch.uint8, device=device)


def _header_from(buf: torch.Tensor, path: str) -> Any:
    """Parse (and validate) the safetensors header held in a file's flat buffer."""
    import struct

    from loadscope.loaders.safetensors_format import MAX_HEADER_BYTES, parse_header

    size = int(buf.numel())
    if size < 8:
        raise RuntimeError(f"{path}: {size} bytes, shorter than a safetensors header")
    (n,) = struct.unpack("<Q", bytes(buf[:8].cpu().numpy()))
    if n > MAX_HEADER_BYTES or 8 + n > size:
        raise RuntimeError(f"{path}: declares a {n}-byte header in a {size}-byte file")
    raw = bytes(buf[8 : 8 + n].cpu().numpy())
    return parse_header(raw, file_size=size, path=path)


def _views(buf: torch.Tensor, path: str) -> dict[str, torch.Tensor]:
    """Every tensor of the file as a view on its flat buffer (a copy where unaligned)."""
    import torch

    from loadscope.loaders.buffers import torch_dtype

    header = _header_from(buf, path)
    out: dict[str, torch.Tensor] = {}
    for t in header.tensors:
        dtype = torch_dtype(t.dtype)
        start = header.data_offset + t.begin
        raw = buf[start : start + t.nbytes]
        itemsize = torch.empty((), dtype=dtype).element_size()
        if t.nbytes == 0:
            out[t.name] = torch.empty(t.shape, dtype=dtype, device=buf.device)
            continue
        if start % itemsize:
            raw = raw.clone()  # a view of this dtype at this offset is impossible
        out[t.name] = raw.view(dtype).reshape(t.shape)
    return out


def _broadcast(
    dist: Any, buf: torch.Tensor, src: int, *, async_op: bool, handles: list[Any]
) -> int:
    """Broadcast ``buf`` from ``src`` in pieces of at most MAX_COLLECTIVE_BYTES; the count."""
    size = int(buf.numel())
    count = 0
    for start in range(0, max(size, 1), MAX_COLLECTIVE_BYTES):
        piece = buf[start : start + MAX_COLLECTIVE_BYTES]
        if piece.numel() == 0:
            continue
        work = dist.broadcast(piece, src=src, async_op=async_op)
        if async_op:
            handles.append(work)
        count += 1
    return count


# -- one trial ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Loaded:
    buffers: list[torch.Tensor]
    collectives: int


def _load(
    mode: str,
    files: list[dict[str, Any]],
    *,
    rank: int,
    world: int,
    device: torch.device,
    reads: Reads,
    chunk: int,
    job: str = "",
    concurrency: int = 32,
) -> _Loaded:
    """Every file's bytes on this rank's device, by ``mode``; each read counted in ``reads``
    (``job``: what tells this trial's shared files from another's, for ``node-shared``)."""
    import torch.distributed as dist

    def read(f: dict[str, Any]) -> torch.Tensor:
        if "fetch_from" in f:  # a model in an object store: GETs, then to the device
            got = read_object(str(f["fetch_from"]), int(f["size_bytes"]), reads, concurrency)
            return got if device.type == "cpu" else got.to(device)
        if device.type == "cpu":
            return read_file(str(f["path"]), int(f["size_bytes"]), reads, chunk)

        # Through pinned buffers, copies overlapped with the reads: the reading rank's
        # side of a broadcast at its best, not at a pageable copy's speed.
        return read_to_device(
            str(f["path"]), int(f["size_bytes"]), CudaDevice(str(device)), reads, chunk
        )

    buffers: list[torch.Tensor] = []
    collectives = 0
    if mode == "independent":
        buffers = [read(f) for f in files]
    elif mode in ("broadcast", "broadcast-async"):
        async_op = mode == "broadcast-async"
        handles: list[Any] = []
        for f in files:
            # rank 0 reads file i+1 while file i's async broadcast is in flight
            buf = read(f) if rank == 0 else _empty(int(f["size_bytes"]), device)
            collectives += _broadcast(dist, buf, 0, async_op=async_op, handles=handles)
            buffers.append(buf)
        for work in handles:
            work.wait()
    elif mode == "sharded":
        handles = []
        for i, f in enumerate(files):
            owner = i % world
            buf = read(f) if owner == rank else _empty(int(f["size_bytes"]), device)
            # async: an owner reads its next file while the receivers take this one
            collectives += _broadcast(dist, buf, owner, async_op=True, handles=handles)
            buffers.append(buf)
        for work in handles:
            work.wait()
    elif mode == "node-shared":
        buffers = [node_shared(f, rank, world, reads, job) for f in files]
    elif mode == mapped.NAME:
        buffers = [read_mapped(str(f["path"]), int(f["size_bytes"]), reads) for f in files]
    elif mode == "direct":
        buffers = [read_direct(str(f["path"]), int(f["size_bytes"]), reads) for f in files]
    elif mode == "warm-node":
        if rank == 0:
            warm_files([(str(f["path"]), int(f["size_bytes"])) for f in files], reads)
        dist.barrier()  # the page cache holds the model: every rank maps it
        buffers = [read_mapped(str(f["path"]), int(f["size_bytes"]), reads) for f in files]
    else:
        raise ValueError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
    if device.type != "cpu" and mode in ("node-shared", *STACK_MODES):
        buffers = [b.to(device) for b in buffers]  # what a user does with CPU tensors
    return _Loaded(buffers, collectives)


def _vm_kib(field_name: str) -> int | None:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in bytes."""
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open("/proc/self/status", encoding="ascii", errors="replace") as fh,
    ):
        for line in fh:
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    return None


def _shared_kib() -> int | None:
    """The part of this process's RSS that other processes may map too (the page cache's
    ``RssFile`` and shared memory's ``RssShmem``), in bytes."""
    file, shmem = _vm_kib("RssFile"), _vm_kib("RssShmem")
    return None if file is None or shmem is None else file + shmem


def _honest_malloc() -> Any:
    """Make freed buffers leave RSS, so each trial's RSS delta and peak are its own.

    glibc raises its mmap threshold after a large free, so the next trial's buffers
    would come from a heap that never shrinks and show no RSS at all. A fixed
    threshold (``mallopt(M_MMAP_THRESHOLD)``) keeps large buffers in their own
    mappings; ``malloc_trim`` returns the rest after each trial. None off glibc.
    """
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 128 << 10)  # M_MMAP_THRESHOLD: glibc's default, and no adjusting
    except (OSError, AttributeError):
        return None
    return libc


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux 4.0+, ``echo 5 > /proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5\n")
    except OSError:
        return False
    return True


def _run_trial(
    trial: dict[str, Any],
    plan: dict[str, Any],
    *,
    rank: int,
    world: int,
    device: torch.device,
    emitter: _Emitter,
    libc: Any,
) -> None:
    import torch.distributed as dist

    # _touched, inside the clock, imports from the worker module: import it now.
    import loadscope.loaders.worker  # noqa: F401
    from loadscope.probes.iosampler import IoSampler, delta

    files: list[dict[str, Any]] = plan["files"]
    trial_id = int(trial["id"])
    dist.barrier()  # nobody is still loading the previous trial
    if rank == 0:
        emitter.emit(_set_cache(trial, plan))
    sampler = IoSampler()
    reads = Reads()
    gc.collect()
    scope = "trial" if _reset_peak_rss() else "process"
    rss_before = _vm_kib("VmRSS")
    shared_before = _shared_kib()
    dist.barrier()  # the cache is ready: every clock starts together
    before = sampler.sample()
    t0 = time.perf_counter()
    loaded = _load(
        str(trial["mode"]),
        files,
        rank=rank,
        world=world,
        device=device,
        reads=reads,
        chunk=int(plan.get("read_chunk_bytes", READ_CHUNK_BYTES)),
        job=f"trial-{trial_id}-{os.getppid()}-{os.environ.get('MASTER_PORT', '')}",
        concurrency=int(plan.get("store_concurrency") or 32),
    )
    tensors, nbytes = _touched(loaded, files, device)
    seconds = time.perf_counter() - t0
    after = sampler.sample()
    rss_after = _vm_kib("VmRSS")
    shared_after = _shared_kib()
    peak, scope, maxrss = _peak_rss(scope)
    io = delta(before, after)
    emitter.emit(
        RankTrial(
            rank=rank,
            trial=trial_id,
            seconds=seconds,
            bytes_read=reads.bytes,
            read_calls=reads.calls,
            storage_read_bytes=io.read_bytes,
            rchar=io.rchar,
            major_faults=io.majflt,
            peak_rss_bytes=peak,
            peak_rss_scope=scope,
            ru_maxrss_bytes=maxrss,
            rss_before_bytes=rss_before,
            rss_after_bytes=rss_after,
            rss_shared_delta_bytes=(
                None
                if shared_before is None or shared_after is None
                else shared_after - shared_before
            ),
            tensors=len(tensors),
            tensor_bytes=nbytes,
            collectives=loaded.collectives,
            digests=_digests(tensors),
        )
    )
    del tensors, loaded
    _release(libc, device)


def _set_cache(trial: dict[str, Any], plan: dict[str, Any]) -> RankCache:
    """Rank 0 puts the page cache in the trial's state and checks it, as ``bench`` does."""
    from loadscope.loaders.cachestate import prepare_cache
    from loadscope.probes.pagecache import ColdCache

    started = time.perf_counter()
    if any("fetch_from" in f for f in plan["files"]):  # an object store: every read fetches
        note = "an object store: no page cache in the way, every read is a fetch"
        return RankCache(0, int(trial["id"]), True, None, note, 0.0)
    verified, resident, note = prepare_cache(
        [(str(f["path"]), int(f["size_bytes"])) for f in plan["files"]],
        str(trial["cache"]),
        ColdCache(allow_drop_caches=bool(plan.get("allow_drop_caches", False))),
    )
    seconds = time.perf_counter() - started
    return RankCache(0, int(trial["id"]), verified, resident, note, seconds)


def _touched(
    loaded: _Loaded, files: list[dict[str, Any]], device: torch.device
) -> tuple[dict[str, torch.Tensor], int]:
    """Still timed: every tensor a view on its file's buffer, every page touched (the GPU
    synchronised); (tensors, bytes)."""
    import torch

    from loadscope.loaders.worker import touch  # imported before the clock (_run_trial)

    tensors: dict[str, torch.Tensor] = {}
    nbytes = 0
    for f, buf in zip(files, loaded.buffers, strict=True):
        for name, t in _views(buf, str(f["path"])).items():
            nbytes += touch(t)
            tensors[name] = t
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return tensors, nbytes


def _peak_rss(scope: str) -> tuple[int, str, int]:
    """(peak RSS, its scope, ru_maxrss): this trial's VmHWM where the reset worked, else
    the process's lifetime peak."""
    peak = _vm_kib("VmHWM") if scope == "trial" else None
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if peak is None:
        return maxrss, "process", maxrss
    return peak, scope, maxrss


def _digests(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """Every tensor's digest, outside the timed region (a GPU tensor copied back first)."""
    from loadscope.loaders.worker import digest_bytes, tensor_bytes

    return {
        name: digest_bytes(tensor_bytes(t if t.device.type == "cpu" else t.cpu()))
        for name, t in tensors.items()
    }


def _release(libc: Any, device: torch.device) -> None:
    """Give the trial's memory back before the next one (to the OS, not only to malloc)."""
    import torch

    gc.collect()
    if libc is not None:
        libc.malloc_trim(0)
    if device.type == "cuda":
        torch.cuda.empty_cache()


# -- the program --------------------------------------------------------------------------------


def _env_int(name: str) -> int:
    value = os.environ.get(name)
    if value is None:
        raise RuntimeError(f"{name} is not set (the parent sets RANK, WORLD_SIZE, MASTER_*)")
    return int(value)


def run(plan: dict[str, Any], emitter: _Emitter, rank: int, world: int) -> int:
    import torch
    import torch.distributed as dist

    device_kind = str(plan.get("device", "cpu"))
    backend = str(plan.get("backend") or ("nccl" if device_kind == "cuda" else "gloo"))
    if device_kind == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank)) % max(1, torch.cuda.device_count())
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    cpus = len(os.sched_getaffinity(0))
    threads = max(1, cpus // max(1, world))
    torch.set_num_threads(threads)
    timeout = datetime.timedelta(seconds=float(plan.get("collective_timeout_s", 300)))
    t_init = time.perf_counter()
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout)
    init_s = time.perf_counter() - t_init
    emitter.emit(
        RankStart(
            rank=rank,
            pid=os.getpid(),
            backend=backend,
            device=str(device),
            torch_version=torch.__version__,
            init_s=init_s,
            threads=threads,
            rss_bytes=_vm_kib("VmRSS"),
            world_size=world,
            t=time.monotonic(),
        )
    )
    trials: list[dict[str, Any]] = plan["trials"]
    libc = _honest_malloc()
    ran, longest = 0, 0.0
    for trial in trials:
        if not _time_left(plan.get("deadline"), longest, rank, device):
            break  # the budget's end: every rank stops here, together
        t_trial = time.monotonic()
        try:
            _run_trial(
                trial, plan, rank=rank, world=world, device=device, emitter=emitter, libc=libc
            )
        except MemoryError:
            emitter.emit(RankFailed(rank, int(trial["id"]), "out of memory (MemoryError)"))
            return 1
        except Exception as exc:  # noqa: BLE001  (the rank's funnel: a failed event naming it)
            emitter.emit(RankFailed(rank, int(trial["id"]), f"{type(exc).__name__}: {exc}"))
            return 1
        ran, longest = ran + 1, max(longest, time.monotonic() - t_trial)
    dist.barrier()
    emitter.emit(RankDone(rank, ran))
    dist.destroy_process_group()
    return 0


def _time_left(deadline: float | None, longest: float, rank: int, device: torch.device) -> bool:
    """Whether the next trial starts: rank 0 decides (the longest trial so far still fits
    before ``deadline``) and every rank receives its decision, so none waits at a barrier
    the others have left."""
    if deadline is None:
        return True
    import torch
    import torch.distributed as dist

    go = torch.tensor([int(time.monotonic() + longest <= deadline)], dtype=torch.int32)
    if device.type == "cuda":
        go = go.to(device)  # NCCL moves device tensors only
    dist.broadcast(go, 0)
    return bool(int(go.item()))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Events go to the real stdout; stray prints (from any library) go to stderr.
    events = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    emitter = _Emitter(events, CODEC)
    rank = -1
    try:
        rank = _env_int("RANK")
        world = _env_int("WORLD_SIZE")
        if len(args) != 1:
            raise RuntimeError("usage: python -m loadscope.loaders.rank PLAN_JSON|@PLAN_FILE")
        text = Path(args[0][1:]).read_text() if args[0].startswith("@") else args[0]
        return run(json.loads(text), emitter, rank, world)
    except BaseException as exc:  # noqa: BLE001  (reported to the parent, never a bare crash)
        emitter.emit(RankFailed(rank, None, f"{type(exc).__name__}: {exc}"))
        return 1


if __name__ == "__main__":
    sys.exit(main())
