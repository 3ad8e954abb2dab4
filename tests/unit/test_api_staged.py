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


def test_the_gpu_routes_trial_runs_the_printed_code_with_its_settings(
    ckpt: SyntheticCheckpoint, fake: FakeDevice
) -> None:
    """Issue 38: the api-cuda trial must read as the printed line reads: the same reader
    count and request size, seen from the record of each (the device faked)."""
    from loadscope.advice.snippets import ROUTES
    from loadscope.loaders.strategies import get
    from loadscope.loaders.strategy import FileRequest, LoadContext

    (route,) = [r for r in ROUTES if r.strategy == "api-cuda"]
    assert "device='cuda'" in route.template and "load_model(" in route.template
    path = sorted(Path(ckpt.root).glob("*.safetensors"))[0]
    printed = api.LoadRecord()
    api.load_file(path, device="cuda", record=printed)  # what load_model does per file
    trial = api.LoadRecord()
    real_load_file = api.load_file

    def recorded(p: Any, device: str = "cpu", **kw: Any) -> Any:
        return real_load_file(p, device, record=trial, **kw)

    from loadscope.loaders.strategies import api_cuda

    api_cuda.load_file = recorded  # type: ignore[assignment]
    try:
        request = FileRequest(str(path), path.stat().st_size, "safetensors")
        ctx = LoadContext(hints={"threads": 3, "block_bytes": 8 << 20}, device="cuda:0")
        dict(get("api-cuda").load([request], ctx))
    finally:
        api_cuda.load_file = real_load_file  # type: ignore[assignment]
    got = [(f.strategy, f.threads, f.block_bytes) for f in trial.files]
    want = [(f.strategy, f.threads, f.block_bytes) for f in printed.files]
    assert got == want and want[0][0] == "staged"
