"""The staged host-to-device pipeline, driven through a fake device that copies later.

The fake is a copy engine on its own thread: ``copy_async`` only queues, the copy
happens after a delay, and ``record``/``wait`` behave like CUDA events. It checks
the ring protocol from the device's side: a slot whose bytes change between the
copy being queued and the copy running was overwritten too early; a copy queued
into a slot whose previous copy was never waited for breaks the event rule; and
it counts slots in flight. Results are compared byte for byte with safetensors.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import re
import shutil
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from loadscope.loaders.staged import (
    StagedCopyError,
    StagedReadError,
    plan_file,
    plan_fills,
    staged_load,
)
from loadscope.loaders.strategy import FileRequest
from loadscope.tools.synth import SyntheticCheckpoint


class FakeDevice:
    """A :class:`StagingDevice` whose copies run later, on another thread, and are checked."""

    name = "fake:0"

    def __init__(
        self,
        *,
        delay_s: float = 0.002,
        fail_copy_at: int | None = None,
        fail_start_at: int | None = None,
        on_ring: Callable[[], None] | None = None,
    ) -> None:
        self.delay_s = delay_s
        self.fail_copy_at = fail_copy_at
        self.fail_start_at = fail_start_at
        self.on_ring = on_ring
        self.ring: list[bytearray] = []
        self.events: list[threading.Event] = []
        self.in_flight: list[bool] = []
        self.max_in_flight = 0
        self.violations: list[str] = []
        self.queued = 0
        self.copied = 0
        self.ring_allocs = 0
        self.error: Exception | None = None
        self.lock = threading.Lock()
        self.work: queue.Queue[tuple[Any, ...] | None] = queue.Queue()
        self.thread = threading.Thread(target=self._engine, daemon=True)
        self.thread.start()

    # -- the StagingDevice protocol -------------------------------------------------------

    def alloc_ring(self, slots: int, slot_bytes: int) -> list[memoryview]:
        self.ring_allocs += 1
        self.ring = [bytearray(slot_bytes) for _ in range(slots)]
        self.events = [threading.Event() for _ in range(slots)]
        for e in self.events:
            e.set()
        self.in_flight = [False] * slots
        if self.on_ring:
            self.on_ring()
        return [memoryview(b) for b in self.ring]

    def alloc_device(self, nbytes: int) -> torch.Tensor:
        # Filled with a marker, so that a byte never copied shows up in the comparison.
        return torch.full((nbytes,), 0xAB, dtype=torch.uint8)

    def copy_async(
        self, dst: torch.Tensor, dst_offset: int, slot: int, slot_offset: int, nbytes: int
    ) -> None:
        self.queued += 1
        if self.fail_start_at is not None and self.queued == self.fail_start_at:
            raise RuntimeError("fake: the copy engine refused the copy")
        with self.lock:
            if self.in_flight[slot]:
                self.violations.append(f"copy queued on slot {slot} before it was waited for")
        snapshot = zlib.crc32(self.ring[slot][slot_offset : slot_offset + nbytes])
        self.work.put(("copy", dst, dst_offset, slot, slot_offset, nbytes, snapshot, self.queued))

    def record(self, slot: int) -> None:
        with self.lock:
            self.in_flight[slot] = True
            self.max_in_flight = max(self.max_in_flight, sum(self.in_flight))
        event = threading.Event()
        self.events[slot] = event
        self.work.put(("mark", event))

    def wait(self, slot: int) -> None:
        if not self.events[slot].wait(timeout=10):
            raise TimeoutError("fake: the copy never completed")
        with self.lock:
            self.in_flight[slot] = False
        if self.error is not None:
            raise self.error

    def synchronize(self) -> None:
        event = threading.Event()
        self.work.put(("mark", event))
        if not event.wait(timeout=10):
            raise TimeoutError("fake: synchronize never returned")
        if self.error is not None:
            raise self.error

    # -- the engine -----------------------------------------------------------------------

    def _engine(self) -> None:
        while (item := self.work.get()) is not None:
            if item[0] == "mark":
                item[1].set()
                continue
            _, dst, dst_offset, slot, slot_offset, nbytes, snapshot, number = item
            time.sleep(self.delay_s)
            if self.error is not None:
                continue  # like CUDA: after a fault, nothing more runs
            if number == self.fail_copy_at:
                self.error = RuntimeError("fake: copy engine fault (like an Xid error)")
                continue
            data = bytes(self.ring[slot][slot_offset : slot_offset + nbytes])
            if zlib.crc32(data) != snapshot:
                self.violations.append(f"slot {slot} was overwritten before its copy ran")
            dst[dst_offset : dst_offset + nbytes] = torch.frombuffer(
                bytearray(data), dtype=torch.uint8
            )
            self.copied += 1

    def close(self) -> None:
        self.work.put(None)
        self.thread.join(timeout=5)


@pytest.fixture
def device() -> Iterator[FakeDevice]:
    dev = FakeDevice()
    yield dev
    dev.close()


@pytest.fixture
def model(synth_single: SyntheticCheckpoint) -> SyntheticCheckpoint:
    return synth_single  # one 2 MiB file (the session's, see conftest)


@pytest.fixture
def shards(synth_sharded: SyntheticCheckpoint) -> SyntheticCheckpoint:
    return synth_sharded  # three files, 3 MiB in all


def _requests(ckpt: SyntheticCheckpoint, pick: Callable[[list[str]], list[str]] | None = None):
    out = []
    for path in ckpt.files:
        names = list(load_file(path))
        out.append(
            FileRequest(
                str(path),
                path.stat().st_size,
                "safetensors",
                None if pick is None else tuple(pick(names)),
            )
        )
    return out


def _reference(requests: list[FileRequest]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for r in requests:
        tensors = load_file(r.path)
        for name, t in tensors.items():
            if r.tensors is None or name in r.tensors:
                out[name] = t
    return out


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _assert_exact(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want) or set(got) == set(want)
    for name, t in want.items():
        g = got[name]
        assert g.dtype == t.dtype and g.shape == t.shape, name
        assert torch.equal(_raw(g), _raw(t)), f"{name}: bytes differ"


def _staged_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("staged-read") and t.is_alive()]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _bounded(fn: Callable[[], Any], timeout_s: float = 15) -> Any:
    """Run ``fn`` on a thread; fail (instead of hanging the suite) if it does not return."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001  (re-raised in the test's thread)
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"the pipeline hung for more than {timeout_s} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _whole_model_exact(
    ckpt: SyntheticCheckpoint, device: FakeDevice, **knobs: int
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Every file of ``ckpt`` through ``staged_load`` with ``knobs``, checked byte-exact
    against safetensors: the tensors and the notes the load wrote."""
    requests = _requests(ckpt)
    notes: dict[str, Any] = {}
    got = dict(staged_load(requests, device, notes=notes, **knobs))
    _assert_exact(got, _reference(requests))
    return got, notes


KNOBS = [
    # (slots, slot_bytes, threads, block_bytes)
    (4, 64 << 10, 4, 16 << 10),  # many fills, several reads per slot
    (2, 40_000, 3, 4097),  # odd sizes: pieces split across slots and blocks
    (1, 128 << 10, 2, 1 << 20),  # one slot: strictly serial, still correct
    (8, 4 << 20, 8, 64 << 10),  # one fill holds everything
]


@pytest.mark.parametrize(("slots", "slot_bytes", "threads", "block_bytes"), KNOBS)
def test_whole_files_are_byte_exact(
    model: SyntheticCheckpoint,
    device: FakeDevice,
    slots: int,
    slot_bytes: int,
    threads: int,
    block_bytes: int,
) -> None:
    _, notes = _whole_model_exact(
        model, device, slots=slots, slot_bytes=slot_bytes, threads=threads, block_bytes=block_bytes
    )
    assert device.violations == []
    assert device.max_in_flight <= slots
    assert device.ring_allocs == 1
    assert notes["peak_staging_host_bytes"] == notes["ring_slots"] * notes["slot_bytes"]
    assert notes["peak_staging_host_bytes"] <= slots * slot_bytes
    assert notes["copies"] == device.copied and notes["fills"] >= 1
    assert notes["slot_wait_s"] >= 0 and notes["read_wait_s"] >= 0


def test_ring_fills_up_and_is_reused_only_after_its_copy(
    model: SyntheticCheckpoint, device: FakeDevice
) -> None:
    got, notes = _whole_model_exact(
        model, device, slots=3, slot_bytes=32 << 10, threads=4, block_bytes=8 << 10
    )
    model_bytes = sum(t.nbytes for t in got.values())
    # Reads outpace the slow fake copies: the ring is full (3 in flight), never more, and
    # the pipeline waited for slots instead of overwriting them.
    assert device.max_in_flight == 3
    assert device.violations == []
    assert notes["fills"] > 3 * 4
    assert notes["slot_wait_s"] > 0
    # Host staging memory is the ring, a fraction of the model: never a CPU copy of it.
    assert notes["peak_staging_host_bytes"] == 3 * (32 << 10) < model_bytes / 8


def test_the_fake_catches_a_slot_overwritten_too_early(device: FakeDevice) -> None:
    ring = device.alloc_ring(1, 16)
    dst = device.alloc_device(16)
    ring[0][:] = b"a" * 16
    device.copy_async(dst, 0, 0, 0, 16)
    device.record(0)
    ring[0][:] = b"b" * 16  # a buggy pipeline refilling the slot before waiting
    device.copy_async(dst, 0, 0, 0, 16)
    device.wait(0)
    device.synchronize()
    assert any("overwritten" in v for v in device.violations)
    assert any("before it was waited for" in v for v in device.violations)


def test_sampled_subsets_across_shards_are_byte_exact(
    shards: SyntheticCheckpoint, device: FakeDevice
) -> None:
    # Every third tensor (non-contiguous spans), and nothing at all from one shard.
    requests = _requests(shards, lambda names: names[::3])
    requests[1] = FileRequest(requests[1].path, requests[1].size_bytes, "safetensors", ())
    got = dict(
        staged_load(requests, device, slots=2, slot_bytes=48 << 10, threads=3, block_bytes=8 << 10)
    )
    want = _reference(requests)
    assert want and set(got) == set(want)
    _assert_exact(got, want)
    assert device.violations == []


def test_tensors_come_file_by_file_as_their_copies_complete(
    shards: SyntheticCheckpoint, device: FakeDevice
) -> None:
    requests = _requests(shards)
    order = [
        name
        for name, _ in staged_load(
            requests, device, slots=2, slot_bytes=32 << 10, threads=2, block_bytes=8 << 10
        )
    ]
    expected = [name for r in requests for name in load_file(r.path)]
    assert sorted(order) == sorted(expected)
    # File order is kept: every tensor of shard 1 comes before any of shard 2.
    by_file = [next(i for i, r in enumerate(requests) if n in load_file(r.path)) for n in order]
    assert by_file == sorted(by_file)


def test_a_tensor_comes_as_soon_as_its_own_bytes_are_on_the_device(
    model: SyntheticCheckpoint, device: FakeDevice
) -> None:
    requests = _requests(model)
    notes: dict[str, Any] = {}
    gen = staged_load(
        requests, device, slots=2, slot_bytes=16 << 10, threads=2, block_bytes=4 << 10, notes=notes
    )
    name, first = next(gen)
    copied_at_first = device.copied
    want = _reference(requests)
    assert torch.equal(_raw(first), _raw(want[name]))  # its bytes are complete already
    rest = dict(gen)
    assert copied_at_first < notes["copies"] / 2  # ... long before the file's last copy
    _assert_exact({name: first, **rest}, want)


def _handmade(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    """A file with an unaligned F32 and I64 (after a 3-byte U8) and an empty tensor."""
    tensors = {
        "a_u8": ("U8", [3], bytes([1, 2, 3])),
        "b_f32": ("F32", [2, 2], struct.pack("<4f", 1.5, -2.0, 3.25, 1e-3)),
        "c_empty": ("F16", [0], b""),
        "d_i64": ("I64", [5], struct.pack("<5q", 1, -1, 2**40, 7, -(2**62))),
        "e_bf16": ("BF16", [3], bytes(range(6))),
    }
    header: dict[str, Any] = {}
    at = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(d for *_, d in tensors.values()))
    return tensors


def test_unaligned_and_empty_tensors(tmp_path: Path, device: FakeDevice) -> None:
    path = tmp_path / "odd.safetensors"
    _handmade(path)
    request = FileRequest(str(path), path.stat().st_size, "safetensors")
    got = dict(staged_load([request], device, slots=2, slot_bytes=8, threads=2, block_bytes=5))
    _assert_exact(got, load_file(path))
    # A subset made only of the empty tensor needs no ring at all.
    only_empty = FileRequest(str(path), path.stat().st_size, "safetensors", ("c_empty",))
    notes: dict[str, Any] = {}
    got = dict(
        staged_load(
            [only_empty], device, slots=2, slot_bytes=8, threads=2, block_bytes=5, notes=notes
        )
    )
    assert list(got) == ["c_empty"] and got["c_empty"].shape == (0,)
    assert notes["peak_staging_host_bytes"] == 0


def test_plan_keeps_alignment_and_covers_every_byte(model: SyntheticCheckpoint) -> None:
    request = _requests(model, lambda names: names[1::2])[0]
    plan = plan_file(request)
    fills = plan_fills([plan], slot_bytes=10_000, slots=3)
    carried = sorted((p.file_offset, p.nbytes) for f in fills for p in f.pieces)
    segments = sorted((s.file_offset, s.nbytes) for s in plan.segments)
    assert sum(n for _, n in carried) == sum(n for _, n in segments)
    for seg in plan.segments:
        assert seg.device_offset % 256 == seg.file_offset % 256
    assert all(f.nbytes <= 10_000 for f in fills)
    assert [f.slot for f in fills] == [i % 3 for i in range(len(fills))]


# -- errors: clear, naming file and offset, and never a hang -----------------------------------


def _copy_of(model: SyntheticCheckpoint, tmp_path: Path) -> Path:
    dst = tmp_path / "model.safetensors"
    shutil.copyfile(model.files[0], dst)
    return dst


def _load(path: Path, device: FakeDevice, **kw: Any) -> dict[str, torch.Tensor]:
    request = FileRequest(str(path), path.stat().st_size, "safetensors")
    knobs = {"slots": 3, "slot_bytes": 32 << 10, "threads": 3, "block_bytes": 8 << 10} | kw
    return dict(staged_load([request], device, **knobs))


def _assert_clean() -> None:
    deadline = time.monotonic() + 5
    while _staged_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _staged_threads() == []


def test_eio_names_file_and_offset(model: SyntheticCheckpoint, tmp_path: Path) -> None:
    path = _copy_of(model, tmp_path)
    bad_from = path.stat().st_size // 2

    def pread(fd: int, buf: memoryview, offset: int) -> int:
        if offset + len(buf) > bad_from:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return os.preadv(fd, [buf], offset)

    device = FakeDevice()
    fds = _open_fds()
    try:
        with pytest.raises(StagedReadError) as info:
            _bounded(lambda: _load(path, device, pread=pread))
    finally:
        device.close()
    message = str(info.value)
    assert str(path) in message and "Input/output error" in message
    offset = int(re.search(r"at offset (\d+)", message).group(1))  # type: ignore[union-attr]
    assert offset + (8 << 10) > bad_from
    _assert_clean()
    assert _open_fds() == fds


def test_file_shrinking_mid_read_is_a_short_read(
    model: SyntheticCheckpoint, tmp_path: Path
) -> None:
    path = _copy_of(model, tmp_path)
    half = path.stat().st_size // 2
    shrunk = threading.Event()

    def pread(fd: int, buf: memoryview, offset: int) -> int:
        if not shrunk.is_set():
            shrunk.set()
            os.truncate(path, half)
        return os.preadv(fd, [buf], offset)

    device = FakeDevice()
    try:
        with pytest.raises(StagedReadError, match="short read at offset") as info:
            _bounded(lambda: _load(path, device, pread=pread))
    finally:
        device.close()
    message = str(info.value)
    assert str(path) in message and f"is {half} bytes now" in message
    assert int(re.search(r"at offset (\d+)", message).group(1)) >= half  # type: ignore[union-attr]
    _assert_clean()


def test_file_shrunk_after_its_header_was_read(model: SyntheticCheckpoint, tmp_path: Path) -> None:
    path = _copy_of(model, tmp_path)
    size = path.stat().st_size
    device = FakeDevice(on_ring=lambda: os.truncate(path, size - 100))
    try:
        with pytest.raises(StagedReadError, match="shrank after its header was read") as info:
            _bounded(lambda: _load(path, device))
    finally:
        device.close()
    assert str(path) in str(info.value) and f"offset {size - 100}" in str(info.value)


@pytest.mark.parametrize("mode", ["fault", "refused"])
def test_a_failing_copy_is_a_clear_error(
    model: SyntheticCheckpoint, tmp_path: Path, mode: str
) -> None:
    path = _copy_of(model, tmp_path)
    device = FakeDevice(**({"fail_copy_at": 5} if mode == "fault" else {"fail_start_at": 5}))
    fds = _open_fds()
    try:
        with pytest.raises(StagedCopyError) as info:
            _bounded(lambda: _load(path, device))
    finally:
        device.close()
    message = str(info.value)
    assert str(path) in message and "file offset" in message and "fake:0" in message
    if mode == "fault":
        assert "the copy to fake:0 failed" in message and "copy engine fault" in message
    else:
        assert "starting the copy to fake:0 failed" in message and "refused" in message
    _assert_clean()
    assert _open_fds() == fds


def test_stopping_early_releases_threads_and_files(
    model: SyntheticCheckpoint, device: FakeDevice
) -> None:
    fds = _open_fds()
    gen = staged_load(
        _requests(model), device, slots=2, slot_bytes=16 << 10, threads=2, block_bytes=4 << 10
    )
    next(gen)
    gen.close()
    _assert_clean()
    assert _open_fds() == fds


def test_bad_knobs_are_refused(model: SyntheticCheckpoint, device: FakeDevice) -> None:
    with pytest.raises(ValueError, match="slots must be at least 1"):
        list(staged_load(_requests(model), device, slots=0, slot_bytes=1, threads=1, block_bytes=1))
