"""``loadscope.load_file(p, device="cuda")`` goes through the staged path (issue 38).

It used to load on the CPU and call ``.to()``: a pageable copy after the whole read, the
model held twice. With the device faked (the pipeline's own test double), the public
call must stage: the ring is allocated, copies are queued while reads go on, and the
bytes equal safetensors' own CPU load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file as st_load_file

from loadscope.loaders import api
from loadscope.tools.synth import SyntheticCheckpoint, synthesize
from tests.unit.test_staged import FakeDevice


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> SyntheticCheckpoint:
    return synthesize(tmp_path_factory.mktemp("staged-api"), 6 << 20, shards=2, seed=38)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDevice:
    dev = FakeDevice()
    monkeypatch.setattr(
        api, "check_device", lambda d: "cuda:0" if str(d).startswith("cuda") else "cpu"
    )
    monkeypatch.setattr(api, "staging_device", lambda _d: dev)
    return dev


def test_a_cuda_load_is_staged_with_the_same_bytes(
    ckpt: SyntheticCheckpoint, fake: FakeDevice
) -> None:
    for path in sorted(Path(ckpt.root).glob("*.safetensors")):
        record = api.LoadRecord()
        got = api.load_file(path, device="cuda", record=record)
        want = st_load_file(str(path))
        assert set(got) == set(want)
        for name, t in want.items():
            assert got[name].dtype == t.dtype and got[name].shape == t.shape
            assert torch.equal(got[name].view(torch.uint8), t.view(torch.uint8)), name
        (choice,) = record.files
        assert choice.strategy == "staged" and "pinned" in choice.reason
    assert fake.ring_allocs == 2 and fake.copied > 0 and not fake.violations


def test_the_knobs_reach_the_readers(ckpt: SyntheticCheckpoint, fake: FakeDevice) -> None:
    path = sorted(Path(ckpt.root).glob("*.safetensors"))[0]
    record = api.LoadRecord()
    api.load_file(path, device="cuda:0", threads=3, block_bytes=1 << 20, record=record)
    assert (record.files[0].threads, record.files[0].block_bytes) == (3, 1 << 20)


def test_a_staging_failure_is_one_line_naming_the_device(
    ckpt: SyntheticCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = FakeDevice(fail_start_at=1)
    monkeypatch.setattr(api, "check_device", lambda _d: "cuda:0")
    monkeypatch.setattr(api, "staging_device", lambda _d: dev)
    path = sorted(Path(ckpt.root).glob("*.safetensors"))[0]
    with pytest.raises(OSError, match="cuda:0") as info:
        api.load_file(path, device="cuda")
    assert "\n" not in str(info.value)


def test_without_a_gpu_the_device_is_refused_before_any_read(ckpt: SyntheticCheckpoint) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is usable here")
    path: Any = sorted(Path(ckpt.root).glob("*.safetensors"))[0]
    with pytest.raises(ValueError, match="'cuda'"):
        api.load_file(path, device="cuda")
