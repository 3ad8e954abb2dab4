"""The staged host-to-device pipeline behind the ``staged`` strategy, with the device abstracted.

Large parallel ``pread``s fill a small ring of K pinned host buffers ("slots") of B
bytes each; as soon as a slot is full, an asynchronous copy sends it to the device
(on its own CUDA stream) while the reader threads already fill the next slots. A
slot is refilled only after the event recorded behind its copy says the copy has
finished, so at most K slots are ever in flight and host staging memory is
exactly K x B bytes, whatever the model's size: never a full CPU copy of the
model. Each file lands in one device byte buffer; its tensors are views on that
buffer (dtype and shape from the safetensors header), each yielded as soon as
the copies carrying its bytes have completed. Sampled tensor subsets read only
their byte spans.

The device is a :class:`StagingDevice`: :class:`CudaDevice` drives torch.cuda
(pinned memory, a stream, one event per slot); the tests drive the same pipeline
with a fake device whose copies happen later on another thread, which checks
that no slot is overwritten before its copy ran. The pipeline reports its ring
size (the peak host staging memory) and where it waited in ``notes``:
``slot_wait_s`` (the copy engine was the bottleneck) and ``read_wait_s`` (the
storage was).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from loadscope.loaders.buffers import group_by_span, selected, torch_dtype
from loadscope.loaders.cuda import cuda_device
from loadscope.loaders.safetensors_format import SafetensorsHeader, TensorEntry, read_header
from loadscope.loaders.strategy import FileRequest, Knob

if TYPE_CHECKING:
    import torch

#: The name this path goes by: the ``staged`` strategy's, and ``load_file(device=)``'s choice.
NAME = "staged"

#: The pipeline's settings (the ``staged`` strategy's knobs, and ``load_file(device=...)``'s).
KNOBS = (
    Knob("slots", 4, "pinned host buffers in the ring"),
    Knob("slot_bytes", 32 << 20, "bytes per pinned buffer (one H2D copy each)"),
    Knob("threads", 8, "reader threads"),
    Knob("block_bytes", 4 << 20, "bytes per read request"),
)

#: A span's device offset keeps its file offset modulo this, so that every tensor aligned in
#: the file is aligned on the device too (and stays a zero-copy view).
DEVICE_ALIGN = 256

#: ``pread(fd, buffer, offset) -> bytes read``: the one system call the readers make.
PreadFn = Callable[[int, memoryview, int], int]


class StagingError(RuntimeError):
    """The staged pipeline could not deliver a file's bytes to the device."""


class StagedReadError(StagingError):
    """A read failed (EIO, ...) or came back short (the file is truncated or shrinking)."""


class StagedCopyError(StagingError):
    """A host-to-device copy could not be started or did not complete."""


class StagingDevice(Protocol):
    """The copy engine the pipeline drives (``CudaDevice``, or a fake in tests)."""

    #: For messages and notes, e.g. "cuda:0".
    name: str

    def alloc_ring(self, slots: int, slot_bytes: int) -> list[memoryview]:
        """``slots`` writable pinned host buffers of ``slot_bytes`` each; slot i is item i."""
        ...

    def alloc_device(self, nbytes: int) -> torch.Tensor:
        """A uint8 buffer of ``nbytes`` on the device; tensors are views on it."""
        ...

    def copy_async(
        self, dst: torch.Tensor, dst_offset: int, slot: int, slot_offset: int, nbytes: int
    ) -> None:
        """Queue a copy of ``slot[slot_offset:+nbytes]`` to ``dst[dst_offset:+nbytes]``."""
        ...

    def record(self, slot: int) -> None:
        """Mark, after the copies queued so far, the point at which ``slot`` is free again."""
        ...

    def wait(self, slot: int) -> None:
        """Block until the copies before ``slot``'s last record have completed."""
        ...

    def synchronize(self) -> None:
        """Block until every queued copy has completed."""
        ...


# -- the plan: where every byte goes ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Segment:
    """A contiguous byte range of a file and where it lands in the file's device buffer."""

    file_offset: int
    device_offset: int
    nbytes: int


@dataclass(slots=True)
class FilePlan:
    request: FileRequest
    header: SafetensorsHeader
    #: ``(file offset, device offset, entries)`` per contiguous span of requested tensors.
    spans: list[tuple[int, int, list[TensorEntry]]]
    segments: list[Segment]
    device_bytes: int


def plan_file(request: FileRequest) -> FilePlan:
    """Lay out the requested tensors of one file in a device buffer, span by span."""
    header = read_header(request.path)
    spans: list[tuple[int, int, list[TensorEntry]]] = []
    segments: list[Segment] = []
    at = 0
    for start, end, entries in group_by_span(header, selected(header, request)):
        if end > start:
            at = -(-at // DEVICE_ALIGN) * DEVICE_ALIGN + start % DEVICE_ALIGN
            segments.append(Segment(start, at, end - start))
        spans.append((start, at, entries))
        at += end - start
    return FilePlan(request, header, spans, segments, at)


@dataclass(frozen=True, slots=True)
class Piece:
    """Part of a segment that one slot carries."""

    file: int  # index into the plans
    file_offset: int
    slot_offset: int
    device_offset: int
    nbytes: int


@dataclass(slots=True)
class Fill:
    """One use of one slot: the pieces read into it, then copied out of it."""

    index: int
    slot: int
    pieces: list[Piece]
    reads: list[Future[None]] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.pieces)


def plan_fills(plans: list[FilePlan], slot_bytes: int, slots: int) -> list[Fill]:
    """Cut every segment into slot-sized pieces, packing small spans into shared slots."""
    fills: list[Fill] = []
    pieces: list[Piece] = []
    used = 0
    for i, plan in enumerate(plans):
        for seg in plan.segments:
            done = 0
            while done < seg.nbytes:
                if used == slot_bytes:
                    fills.append(Fill(len(fills), len(fills) % slots, pieces))
                    pieces, used = [], 0
                n = min(slot_bytes - used, seg.nbytes - done)
                pieces.append(Piece(i, seg.file_offset + done, used, seg.device_offset + done, n))
                used += n
                done += n
    if pieces:
        fills.append(Fill(len(fills), len(fills) % slots, pieces))
    return fills


def device_offset_of(
    plan: FilePlan, span_start: int, span_device_offset: int, t: TensorEntry
) -> int:
    """Where tensor ``t`` of the span starting at file offset ``span_start`` lies on the device."""
    return span_device_offset + plan.header.data_offset + t.begin - span_start


def device_tensor(buffer: torch.Tensor, at: int, t: TensorEntry) -> torch.Tensor:
    """Tensor ``t`` as a view on the device byte ``buffer`` at offset ``at``.

    A tensor whose offset its dtype cannot view (unaligned in the file) is copied on the
    device instead.
    """
    import torch

    dtype = torch_dtype(t.dtype)
    if t.nbytes == 0:
        return torch.empty(t.shape, dtype=dtype, device=buffer.device)
    raw = buffer[at : at + t.nbytes]
    if at % dtype.itemsize:
        raw = raw.clone()
    return raw.view(dtype).reshape(t.shape)


def device_tensors(plan: FilePlan, buffer: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """The file's requested tensors as views on its device byte ``buffer``."""
    for span_start, span_device_offset, entries in plan.spans:
        for t in entries:
            at = device_offset_of(plan, span_start, span_device_offset, t)
            yield t.name, device_tensor(buffer, at, t)


@dataclass(frozen=True, slots=True)
class _Ready:
    """A tensor and the fill after whose copy all of its bytes are on the device."""

    fill: int
    file: int
    device_offset: int
    entry: TensorEntry


# -- the pipeline -------------------------------------------------------------------------------


def _pread(fd: int, buffer: memoryview, offset: int) -> int:
    return os.preadv(fd, [buffer], offset)


def staged_load(
    files: list[FileRequest],
    device: StagingDevice,
    *,
    slots: int,
    slot_bytes: int,
    threads: int,
    block_bytes: int,
    notes: dict[str, Any] | None = None,
    pread: PreadFn = _pread,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Load the requested tensors of ``files`` onto ``device`` through a ring of pinned slots.

    ``slots`` x ``slot_bytes`` is the host staging memory (smaller when the load is);
    ``threads`` readers each issue preads of at most ``block_bytes``. Each tensor is
    yielded, in file order, once all of its bytes are on the device. ``notes`` receives the ring's
    size and the time spent waiting for copies (``slot_wait_s``) and reads (``read_wait_s``).
    """
    for knob, value in (
        ("slots", slots),
        ("slot_bytes", slot_bytes),
        ("threads", threads),
        ("block_bytes", block_bytes),
    ):
        if value < 1:
            raise ValueError(f"staged: {knob} must be at least 1, not {value}")
    plans = [plan_file(f) for f in files]
    total = sum(seg.nbytes for plan in plans for seg in plan.segments)
    # A small load needs neither large slots nor more slots than it can fill.
    slot_bytes = max(1, min(slot_bytes, total))
    slots = max(1, min(slots, -(-total // slot_bytes)))
    fills = plan_fills(plans, slot_bytes, slots)
    pipeline = _Pipeline(plans, fills, device, slots, slot_bytes, threads, block_bytes, pread)
    out = notes if notes is not None else {}
    ok = False
    try:
        yield from pipeline.run()
        ok = True
    finally:
        pipeline.close(ok)
        out.update(pipeline.stats(total))


class _Pipeline:
    def __init__(
        self,
        plans: list[FilePlan],
        fills: list[Fill],
        device: StagingDevice,
        slots: int,
        slot_bytes: int,
        threads: int,
        block_bytes: int,
        pread: PreadFn,
    ) -> None:
        self.plans, self.fills, self.device = plans, fills, device
        self.slots, self.slot_bytes, self.block_bytes = slots, slot_bytes, block_bytes
        self.threads = threads
        self.pread = pread
        self.ring: list[memoryview] = []
        self.ring_alloc_s = 0.0
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="staged-read")
        self.stop = threading.Event()
        self.fds: dict[int, int] = {}
        self.buffers: dict[int, torch.Tensor] = {}
        self.slot_wait_s = 0.0
        self.read_wait_s = 0.0
        self.copies = 0
        self.device_bytes = 0
        self.empty: torch.Tensor | None = None
        # A tensor is usable once the fill carrying its last byte has been waited for (an
        # empty one when the tensor before it is), a file once all of its tensors are;
        # both are yielded and closed in file order.
        ends: dict[int, list[tuple[int, int]]] = {}  # file -> [(piece's device end, fill)]
        for f in fills:
            for p in f.pieces:
                ends.setdefault(p.file, []).append((p.device_offset + p.nbytes, f.index))
        self.ready: list[_Ready] = []
        self.file_done: list[int] = []
        ready = -1
        for i, plan in enumerate(plans):
            marks = ends.get(i, [])
            keys = [end for end, _ in marks]
            for span_start, span_device_offset, entries in plan.spans:
                for t in entries:
                    at = device_offset_of(plan, span_start, span_device_offset, t)
                    if t.nbytes:
                        ready = max(ready, marks[bisect.bisect_left(keys, at + t.nbytes)][1])
                    self.ready.append(_Ready(ready, i, at, t))
            self.file_done.append(ready)
        self.next_tensor = 0
        self.next_file = 0

    def run(self) -> Iterator[tuple[str, torch.Tensor]]:
        t0 = time.perf_counter()
        self.ring = self.device.alloc_ring(self.slots, self.slot_bytes) if self.fills else []
        self.ring_alloc_s = time.perf_counter() - t0
        reading: deque[Fill] = deque()  # reads submitted, copy not yet issued
        copying: deque[Fill] = deque()  # copy issued, not yet known to be complete
        yield from self._complete(-1)
        for fill in self.fills:
            if fill.index >= self.slots:
                # The slot is still held by the fill K places back: it is the oldest one not
                # yet waited for. Issue its copy if its reads are still running, then wait.
                while reading and reading[0].index <= fill.index - self.slots:
                    copying.append(self._issue(reading.popleft()))
                previous = copying.popleft()
                self._wait(previous)
                yield from self._complete(previous.index)
            self._submit(fill)
            reading.append(fill)
            while reading and all(r.done() for r in reading[0].reads):
                copying.append(self._issue(reading.popleft()))
        while reading:
            copying.append(self._issue(reading.popleft()))
        while copying:
            previous = copying.popleft()
            self._wait(previous)
            yield from self._complete(previous.index)
        yield from self._complete(len(self.fills))

    # -- reads -----------------------------------------------------------------------------

    def _fd(self, i: int) -> int:
        fd = self.fds.get(i)
        if fd is not None:
            return fd
        plan = self.plans[i]
        fd = os.open(plan.request.path, os.O_RDONLY | os.O_CLOEXEC)
        size = os.fstat(fd).st_size
        if size < plan.header.file_size:
            os.close(fd)
            raise StagedReadError(
                f"{plan.request.path}: the file is {size} bytes but its header says"
                f" {plan.header.file_size}; bytes from offset {size} on are missing"
                " (it shrank after its header was read)"
            )
        self.fds[i] = fd
        return fd

    def _submit(self, fill: Fill) -> None:
        view = self.ring[fill.slot]
        for p in fill.pieces:
            fd = self._fd(p.file)
            if p.file not in self.buffers:
                nbytes = self.plans[p.file].device_bytes
                self.buffers[p.file] = self.device.alloc_device(nbytes)
                self.device_bytes += nbytes
            path = self.plans[p.file].request.path
            for off in range(0, p.nbytes, self.block_bytes):
                n = min(self.block_bytes, p.nbytes - off)
                dst = view[p.slot_offset + off : p.slot_offset + off + n]
                fill.reads.append(
                    self.executor.submit(self._read, fd, path, dst, p.file_offset + off)
                )

    def _read(self, fd: int, path: str, dst: memoryview, offset: int) -> None:
        done = 0
        while done < len(dst) and not self.stop.is_set():
            try:
                n = self.pread(fd, dst[done:], offset + done)
            except OSError as exc:
                raise StagedReadError(
                    f"{path}: read of {len(dst) - done} bytes at offset {offset + done}"
                    f" failed: {exc.strerror or exc}"
                ) from exc
            if n <= 0:
                size = os.fstat(fd).st_size
                raise StagedReadError(
                    f"{path}: short read at offset {offset + done}: end of file after"
                    f" {done} of {len(dst)} bytes (the file is {size} bytes now: truncated,"
                    " or shrinking while it was read)"
                )
            done += n

    # -- copies ----------------------------------------------------------------------------

    def _where(self, fill: Fill) -> str:
        first = fill.pieces[0]
        more = f" and {len(fill.pieces) - 1} more piece(s)" if len(fill.pieces) > 1 else ""
        return (
            f"slot {fill.slot}: {fill.nbytes} bytes of {self.plans[first.file].request.path}"
            f" from file offset {first.file_offset}{more}"
        )

    def _issue(self, fill: Fill) -> Fill:
        t0 = time.perf_counter()
        for r in fill.reads:
            r.result()  # raises the reader's StagedReadError
        self.read_wait_s += time.perf_counter() - t0
        try:
            for p in fill.pieces:
                self.device.copy_async(
                    self.buffers[p.file], p.device_offset, fill.slot, p.slot_offset, p.nbytes
                )
                self.copies += 1
            self.device.record(fill.slot)
        except Exception as exc:
            raise StagedCopyError(
                f"starting the copy to {self.device.name} failed ({self._where(fill)}): {exc}"
            ) from exc
        return fill

    def _wait(self, fill: Fill) -> None:
        t0 = time.perf_counter()
        try:
            self.device.wait(fill.slot)
        except Exception as exc:
            raise StagedCopyError(
                f"the copy to {self.device.name} failed ({self._where(fill)}): {exc}"
            ) from exc
        finally:
            self.slot_wait_s += time.perf_counter() - t0

    def _complete(self, completed: int) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield the tensors whose bytes are all on the device once fill ``completed`` is."""
        while self.next_tensor < len(self.ready) and self.ready[self.next_tensor].fill <= completed:
            r = self.ready[self.next_tensor]
            self.next_tensor += 1
            buffer = self.buffers.get(r.file)
            if buffer is None:  # only empty tensors have no bytes to be views of
                if self.empty is None:
                    self.empty = self.device.alloc_device(0)
                buffer = self.empty
            yield r.entry.name, device_tensor(buffer, r.device_offset, r.entry)
        while self.next_file < len(self.plans) and self.file_done[self.next_file] <= completed:
            fd = self.fds.pop(self.next_file, None)
            if fd is not None:
                os.close(fd)
            self.buffers.pop(self.next_file, None)  # its tensors keep it alive
            self.next_file += 1

    def close(self, ok: bool) -> None:
        self.stop.set()
        self.executor.shutdown(wait=True, cancel_futures=True)
        if not ok and self.ring:
            # An error is already on its way up; this only keeps the ring alive until the
            # copies still running from it have ended (a second error would hide the first).
            with contextlib.suppress(Exception):
                self.device.synchronize()
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def stats(self, total: int) -> dict[str, Any]:
        return {
            "staging_device": self.device.name,
            "ring_slots": self.slots if self.ring else 0,
            "slot_bytes": self.slot_bytes if self.ring else 0,
            #: The peak host memory the pipeline holds: its ring, never the model.
            "peak_staging_host_bytes": self.slots * self.slot_bytes if self.ring else 0,
            "ring_alloc_s": round(self.ring_alloc_s, 6),
            "reader_threads": self.threads,
            "block_bytes": self.block_bytes,
            "fills": len(self.fills),
            "copies": self.copies,
            "staged_bytes": total,
            "device_buffer_bytes": self.device_bytes,
            "slot_wait_s": round(self.slot_wait_s, 6),
            "read_wait_s": round(self.read_wait_s, 6),
        }


# -- the real device ----------------------------------------------------------------------------


class CudaDevice:
    """torch.cuda as a :class:`StagingDevice`: one pinned ring, one copy stream, K events."""

    def __init__(self, device: str) -> None:
        import torch

        self.device = cuda_device(device)
        self.name = str(self.device)
        self._cuda: Any = torch.cuda  # (Stream and Event are untyped in torch's stubs)
        self.stream: Any = self._cuda.Stream(self.device)
        self._host: list[torch.Tensor] = []
        self._events: list[Any] = []

    def alloc_ring(self, slots: int, slot_bytes: int) -> list[memoryview]:
        import torch

        # One pinned allocation, cut into slots (pinning is paid once per load).
        ring = torch.empty(slots * slot_bytes, dtype=torch.uint8, pin_memory=True)
        self._host = [ring[i * slot_bytes : (i + 1) * slot_bytes] for i in range(slots)]
        self._events = [self._cuda.Event() for _ in range(slots)]
        return [h.numpy().data for h in self._host]

    def alloc_device(self, nbytes: int) -> torch.Tensor:
        import torch

        buffer = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        # The allocator hands out memory in the current stream's order; the copy stream
        # must not write it before work queued there on its previous owner has finished.
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        return buffer

    def copy_async(
        self, dst: torch.Tensor, dst_offset: int, slot: int, slot_offset: int, nbytes: int
    ) -> None:
        import torch

        src = self._host[slot][slot_offset : slot_offset + nbytes]
        with torch.cuda.stream(self.stream):
            dst[dst_offset : dst_offset + nbytes].copy_(src, non_blocking=True)

    def record(self, slot: int) -> None:
        self._events[slot].record(self.stream)

    def wait(self, slot: int) -> None:
        self._events[slot].synchronize()

    def synchronize(self) -> None:
        self.stream.synchronize()
