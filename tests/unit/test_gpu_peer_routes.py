"""The servers' peer loaders in their GPU modes (issue 38): the trial behind each GPU
flag route runs the setting the server's own code uses, and its bytes are the file's.

vLLM's ``fastsafetensors_weights_iterator`` builds ``SafeTensorsFileLoader(pg, device)``
with ``nogds`` False on one GPU (GDS where fastsafetensors finds cuFile, its bounce
buffers where not) and True with more than one; its Run:ai iterator streams each file
with ``device="cuda:N"``. The GPU is faked by pointing the trial's device at the CPU:
the library itself runs, and a spy records what it was asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from loadscope.advice.snippets import ROUTES
from loadscope.loaders.strategies import GPU_STRATEGIES, STRATEGIES, get, peers
from loadscope.loaders.strategy import FileRequest, LoadContext
from loadscope.tools.synth import SyntheticCheckpoint, synthesize


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> SyntheticCheckpoint:
    return synthesize(tmp_path_factory.mktemp("gpu-peers"), 2 << 20, seed=38)


def _load(name: str, path: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    ctx = LoadContext(hints={"threads": 3, "block_bytes": 8 << 20}, device="cuda:0")
    request = FileRequest(str(path), path.stat().st_size, "safetensors")
    return dict(get(name).load([request], ctx)), ctx.notes


def _same_bytes(got: dict[str, torch.Tensor], path: Path) -> None:
    want = load_file(str(path))
    assert set(got) == set(want)
    for name, t in want.items():
        assert torch.equal(got[name].view(torch.uint8), t.view(torch.uint8)), name


def test_every_gpu_flag_route_is_timed_by_a_gpu_trial_against_the_gpu_default() -> None:
    gpu_routes = [r for r in ROUTES if r.baseline == "mmap-cuda"]
    assert {r.strategy for r in gpu_routes} >= {"api-cuda", "fastsafetensors-gds", "runai-cuda"}
    for route in gpu_routes:
        assert route.strategy in GPU_STRATEGIES and STRATEGIES[route.strategy].requires.gpu
    # The CPU mode of a peer stands aside where the GPU default was timed (a GPU box):
    # the server runs the peer to the GPU there, never the CPU mode.
    for route in ROUTES:
        if route.strategy in ("fastsafetensors", "runai"):
            assert route.unless == "mmap-cuda"
            twin = [r for r in gpu_routes if r.stack == route.stack and r.what == route.what]
            assert len(twin) == 1 and twin[0].template == route.template


@pytest.mark.parametrize(
    ("name", "nogds"), [("fastsafetensors-gds", False), ("fastsafetensors-cuda", True)]
)
def test_fastsafetensors_gpu_trials_ask_for_what_vllm_asks(
    ckpt: SyntheticCheckpoint, monkeypatch: pytest.MonkeyPatch, name: str, nogds: bool
) -> None:
    pytest.importorskip("fastsafetensors")
    import fastsafetensors

    asked: list[tuple[Any, ...]] = []
    real = fastsafetensors.SafeTensorsFileLoader

    def spy(pg: Any, device: str, **kw: Any) -> Any:
        asked.append((device, kw.get("nogds")))
        return real(pg, device, **kw)

    monkeypatch.setattr(fastsafetensors, "SafeTensorsFileLoader", spy)
    monkeypatch.setattr(peers, "_gpu", lambda ctx: "cpu")  # the faked device
    path = Path(ckpt.files[0])
    got, notes = _load(name, path)
    _same_bytes(got, path)
    # No probe hint reaches a peer: it runs the library's own settings, as the server does.
    assert asked == [("cpu", nogds)]
    assert notes["copier"]
    if not nogds and not notes["copier"].startswith("Gds"):
        assert "no GPUDirect Storage here" in notes["gds"]


def test_runai_gpu_trial_streams_to_the_device(
    ckpt: SyntheticCheckpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("runai_model_streamer")
    import runai_model_streamer

    devices: list[str] = []
    real = runai_model_streamer.SafetensorsStreamer.stream_file

    def spy(self: Any, path: str, *a: Any, device: str = "cpu", **kw: Any) -> Any:
        devices.append(device)
        return real(self, path, *a, device=device, **kw)

    monkeypatch.setattr(runai_model_streamer.SafetensorsStreamer, "stream_file", spy)
    monkeypatch.setattr(peers, "_gpu", lambda ctx: "cpu")
    path = Path(ckpt.files[0])
    got, _ = _load("runai-cuda", path)
    _same_bytes(got, path)
    assert devices == ["cpu"]
    devices.clear()
    _load("runai", path)  # the CPU mode streams to the CPU, as before
    assert devices == ["cpu"]


def test_without_a_gpu_the_peer_gpu_modes_say_why() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is usable here")
    for name in ("fastsafetensors-cuda", "fastsafetensors-gds", "runai-cuda"):
        assert "no CUDA device" in str(get(name).unavailable())
