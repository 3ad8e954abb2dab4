"""GPU strategies, the H2D ceiling and the GPU probe: what a CPU machine can check, and the rest.

On a machine without CUDA (this project's development machine) the GPU
strategies must be listed as unavailable with the reason, skipped by
``bench --device cuda`` with that reason, and never faked; the probe must say
unavailable and invent no numbers. Its sysfs and nvidia-smi parsing runs on fake
trees and fake programs. The tests marked ``needs_cuda`` run the real thing and
are skipped, with the reason, where torch sees no CUDA device.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from loadscope.engine.bench import (
    BenchError,
    BenchOptions,
    Trial,
    _applicable,
    describe_strategies,
    reference_digests,
    run_bench,
    run_trial,
)
from loadscope.loaders import h2d
from loadscope.loaders.cuda import cuda_unavailable
from loadscope.loaders.strategy import FileRequest
from loadscope.loaders.worker import _prepare_device
from loadscope.model.targets import Target, resolve
from loadscope.probes.gpu import (
    link,
    parse_link_speed,
    parse_nvidia_smi,
    pci_gpus,
    probe_gpus,
    query_nvidia_smi,
)
from loadscope.probes.pagecache import ColdCache
from loadscope.probes.result import Status, to_jsonable
from loadscope.tools.synth import SyntheticCheckpoint, synthesize

pytestmark = pytest.mark.integration

GPU_STRATEGIES = (
    *("mmap-cuda", "api-cuda", "read-to-cuda", "staged", "gds"),
    # the peers' GPU modes (the servers' --load-format on a GPU box)
    *("fastsafetensors-cuda", "fastsafetensors-gds", "runai-cuda"),
)
NO_CUDA = cuda_unavailable()
needs_cuda = pytest.mark.skipif(NO_CUDA is not None, reason=f"needs a CUDA GPU: {NO_CUDA}")
no_cuda_here = pytest.mark.skipif(
    NO_CUDA is None, reason="checks the no-GPU answers; this machine has a CUDA device"
)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> SyntheticCheckpoint:
    return synthesize(tmp_path_factory.mktemp("gpu"), 2 << 20, shards=2, seed=11)


@pytest.fixture(scope="module")
def target(ckpt: SyntheticCheckpoint) -> Target:
    return resolve(str(ckpt.root))


@pytest.fixture(scope="module")
def described() -> dict[str, dict[str, Any]]:
    return describe_strategies()


# -- the strategies on a machine without CUDA ---------------------------------------------------


@no_cuda_here
def test_gpu_strategies_are_listed_unavailable_with_the_reason(
    described: dict[str, dict[str, Any]],
) -> None:
    for name in GPU_STRATEGIES:
        info = described[name]
        assert info["gpu"] is True
        assert "no CUDA device: torch.cuda.is_available() is False" in info["unavailable"]
        assert torch.__version__ in info["unavailable"]
    assert described["staged"]["knobs"].keys() == {"slots", "slot_bytes", "threads", "block_bytes"}
    assert described["staged"]["ram_multiple"] == 0.0
    assert not any(described[n]["gpu"] for n in ("mmap", "parallel", "auto"))


@no_cuda_here
def test_gds_names_kvikio_when_it_is_missing(described: dict[str, dict[str, Any]]) -> None:
    try:
        import kvikio  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        assert (
            "kvikio is not installed (pip install 'loadscope[gds]')"
            in (described["gds"]["unavailable"])
        )
    else:
        pytest.skip("kvikio is installed here")


@no_cuda_here
def test_bench_on_cuda_skips_every_gpu_strategy_with_its_reason(target: Target) -> None:
    with pytest.raises(BenchError) as info:
        run_bench(target, BenchOptions(device="cuda", repeats=1, warmup=False))
    message = str(info.value)
    assert message.startswith("no strategy can run on this target here")
    for name in GPU_STRATEGIES:
        assert f"{name}: no CUDA device" in message
    # Under --device cuda the CPU strategies are not even considered.
    assert "mmap:" not in message and "parallel:" not in message


def test_strategies_are_chosen_by_device(
    target: Target, described: dict[str, dict[str, Any]]
) -> None:
    available = {n: {**i, "unavailable": None} for n, i in described.items()}
    cpu, skipped = _applicable(target, available, None, "cpu")
    assert "mmap" in cpu and not set(GPU_STRATEGIES) & set(cpu)
    assert not set(GPU_STRATEGIES) & set(skipped)
    gpu, skipped = _applicable(target, available, None, "cuda:1")
    assert set(gpu) == set(GPU_STRATEGIES)
    # torch.load onto the GPU is a GPU strategy too, for torch checkpoints only.
    assert skipped == {"pickle-cuda": "reads torch checkpoints; this target is safetensors"}
    chosen, skipped = _applicable(target, available, ("mmap", "staged"), "cuda")
    assert chosen == ["staged"]
    assert skipped == {"mmap": "a CPU strategy: it does not load to cuda (run it without --device)"}
    chosen, skipped = _applicable(target, available, ("mmap", "staged"), "cpu")
    assert chosen == ["mmap"] and skipped == {"staged": "needs a GPU (--device cuda)"}
    for bad in ("gpu", "cuda:x", "cuda:", "CUDA"):
        with pytest.raises(BenchError, match="unknown device"):
            _applicable(target, available, None, bad)


def test_a_gpu_strategy_asked_for_on_cpu_is_skipped_and_the_rest_runs(target: Target) -> None:
    report = run_bench(target, BenchOptions(strategies=("mmap", "staged"), repeats=1, warmup=False))
    assert [t.strategy for t in report.trials] == ["mmap"]
    assert report.trials[0].status == "ok" and report.trials[0].verified is True
    assert report.skipped == {"staged": "needs a GPU (--device cuda)"}
    assert "device" not in report.options


@no_cuda_here
def test_a_gpu_trial_forced_onto_a_cpu_machine_fails_with_the_reason(target: Target) -> None:
    files = list(target.files)
    trial, digests = run_trial(
        Trial(1, "staged", "warm", 1, False),
        files,
        None,
        options=BenchOptions(device="cuda"),
        reference=reference_digests(files, {}),
        block_stat=None,
        cold=ColdCache(),
        listener=lambda _e: None,
        total_bytes=target.total_bytes,
    )
    assert trial.status == "failed" and digests == {}
    assert "no CUDA device: torch.cuda.is_available() is False" in (trial.reason or "")


def test_the_worker_refuses_a_strategy_of_the_wrong_kind() -> None:
    with pytest.raises(ValueError, match="GPU strategy: it needs --device cuda"):
        _prepare_device("staged", True, "cpu")
    with pytest.raises(ValueError, match="CPU strategy: it loads to the CPU"):
        _prepare_device("mmap", False, "cuda")
    _prepare_device("mmap", False, "cpu")


@no_cuda_here
def test_h2d_ceiling_says_unavailable_and_measures_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert h2d.main([]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "unavailable"
    assert out["reason"].startswith("no CUDA device")
    assert not [k for k in out if "bytes_per_s" in k]


# -- the GPU probe ------------------------------------------------------------------------------


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _pci(root: Path, address: str, **files: str) -> None:
    for name, value in files.items():
        _write(root, f"sys/bus/pci/devices/{address}/{name}", value)


@pytest.fixture
def fake_sysfs(tmp_path: Path) -> Path:
    gpu = {"vendor": "0x10de", "device": "0x2330", "class": "0x030200"}
    _pci(
        tmp_path,
        "0000:17:00.0",
        **gpu,
        current_link_speed="32.0 GT/s PCIe",
        current_link_width="16",
        max_link_speed="32.0 GT/s PCIe",
        max_link_width="16",
        numa_node="0",
    )
    # Trained at Gen3 x8 although it can do Gen5 x16; no NUMA on this box.
    _pci(
        tmp_path,
        "0000:b3:00.0",
        **gpu,
        current_link_speed="8.0 GT/s PCIe",
        current_link_width="8",
        max_link_speed="32.0 GT/s PCIe",
        max_link_width="16",
        numa_node="-1",
    )
    # Not GPUs: the GPU's HDMI audio function, an NVSwitch bridge, an Intel VGA.
    _pci(tmp_path, "0000:17:00.1", vendor="0x10de", device="0x22ba", **{"class": "0x040300"})
    _pci(tmp_path, "0000:05:00.0", vendor="0x10de", device="0x22a3", **{"class": "0x068000"})
    _pci(tmp_path, "0000:00:02.0", vendor="0x8086", device="0x46a6", **{"class": "0x030000"})
    # A consumer card with a link that reports nothing useful.
    _pci(tmp_path, "0000:65:00.0", vendor="0x10de", device="0x2684", **{"class": "0x030000"})
    _write(tmp_path, "sys/bus/pci/devices/0000:65:00.0/current_link_speed", "Unknown")
    return tmp_path


def test_sysfs_gpus_with_links_and_numa(fake_sysfs: Path) -> None:
    gpus = {g.address: g for g in pci_gpus(fake_sysfs)}
    assert set(gpus) == {"0000:17:00.0", "0000:b3:00.0", "0000:65:00.0"}
    fast, slow, unknown = gpus["0000:17:00.0"], gpus["0000:b3:00.0"], gpus["0000:65:00.0"]
    assert fast.pci_class == "0x030200" and fast.device_id == "0x2330"
    assert fast.numa_node == 0 and slow.numa_node is None
    assert fast.current_link.speed_gts == 32.0 and fast.current_link.width == 16
    assert fast.current_link.generation == 5
    assert fast.current_link.data_rate_bytes_per_s == pytest.approx(32e9 * 128 / 130 * 16 / 8)
    assert fast.link_degraded is False
    assert slow.current_link.generation == 3 and slow.current_link.width == 8
    assert slow.max_link.generation == 5 and slow.link_degraded is True
    assert unknown.current_link.speed == "Unknown" and unknown.current_link.speed_gts is None
    assert unknown.current_link.data_rate_bytes_per_s is None and unknown.link_degraded is None


def test_probe_on_a_fake_tree_without_nvidia_smi(fake_sysfs: Path) -> None:
    result = probe_gpus(fake_sysfs, nvidia_smi=None)
    assert result.status is Status.OK and result.data is not None
    assert len(result.data.pci) == 3 and result.data.smi == ()
    assert result.data.smi_note == "nvidia-smi not asked for"
    json.dumps(result.to_dict())


def test_link_speed_parsing() -> None:
    assert parse_link_speed("2.5 GT/s") == 2.5
    assert parse_link_speed("16.0 GT/s PCIe") == 16.0
    assert parse_link_speed("Unknown") is None and parse_link_speed(None) is None
    assert link("5.0 GT/s", 4).data_rate_bytes_per_s == pytest.approx(5e9 * 0.8 * 4 / 8)
    assert link("64.0 GT/s PCIe", 16).generation == 6
    assert link("16.0 GT/s", None).data_rate_bytes_per_s is None


def test_nvidia_smi_rows() -> None:
    rows = parse_nvidia_smi(
        "0, 00000000:17:00.0, NVIDIA H200, 143771, 5, 16\n"
        "1, 00000000:B3:00.0, NVIDIA H200, 143771, [N/A], [Not Supported]\n\n"
    )
    assert rows[0].name == "NVIDIA H200" and rows[0].memory_total_bytes == 143771 << 20
    assert rows[0].pcie_generation == 5 and rows[0].pcie_width == 16 and rows[0].index == 0
    assert rows[1].pcie_generation is None and rows[1].pcie_width is None
    with pytest.raises(ValueError, match="want 6 fields"):
        parse_nvidia_smi("NVIDIA H200, 143771\n")


def _program(tmp_path: Path, body: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_nvidia_smi_is_run_with_the_query_and_a_timeout(tmp_path: Path) -> None:
    good = _program(
        tmp_path,
        'case "$1" in --query-gpu=index,pci.bus_id,name,memory.total,*) ;; *) exit 3;; esac\n'
        'echo "0, 00000000:17:00.0, NVIDIA H200, 143771, 5, 16"',
    )
    rows, note = query_nvidia_smi(good)
    assert note == "ok" and rows[0].name == "NVIDIA H200"
    rows, note = query_nvidia_smi(_program(tmp_path, "echo 'NVML: driver not loaded' >&2; exit 9"))
    assert rows == () and note == "nvidia-smi failed (exit 9): NVML: driver not loaded"
    hung = _program(tmp_path, "exec sleep 30")
    empty = tmp_path / "empty-root"
    empty.mkdir()
    result = probe_gpus(empty, nvidia_smi=hung, timeout_s=0.3)
    assert result.status is Status.UNAVAILABLE and result.data is None
    assert "nvidia-smi timed out after 0.3 s" in (result.reason or "")


def test_probe_here_says_unavailable_and_invents_nothing(tmp_path: Path) -> None:
    result = probe_gpus(tmp_path, nvidia_smi=str(tmp_path / "no-such-nvidia-smi"))
    assert result.status is Status.UNAVAILABLE and result.data is None
    assert result.reason == (
        "no NVIDIA GPU found (no PCI device with vendor 0x10de, nvidia-smi not installed)"
    )
    assert set(result.to_dict()) == {"status", "reason", "elapsed_s"}


def test_probe_of_this_machine_agrees_with_its_sysfs() -> None:
    result = probe_gpus()
    nvidia = [
        d
        for d in Path("/sys/bus/pci/devices").glob("*")
        if (d / "vendor").exists() and (d / "vendor").read_text().strip() == "0x10de"
    ]
    if not nvidia and not any(
        os.access(os.path.join(p, "nvidia-smi"), os.X_OK)
        for p in os.environ.get("PATH", "").split(os.pathsep)
    ):
        assert result.status is Status.UNAVAILABLE and result.data is None
        assert (result.reason or "").startswith("no NVIDIA GPU found")
    else:
        assert result.status is Status.OK, result.reason
        assert to_jsonable(result.data)


# -- the real thing, where there is a GPU -------------------------------------------------------


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


@needs_cuda
@pytest.mark.parametrize("sampled", [False, True])
def test_staged_on_cuda_is_byte_exact(ckpt: SyntheticCheckpoint, sampled: bool) -> None:
    from loadscope.loaders.staged import CudaDevice, staged_load

    requests = []
    for path in ckpt.files:
        names = list(load_file(path))
        pick = tuple(names[::2]) if sampled else None
        requests.append(FileRequest(str(path), path.stat().st_size, "safetensors", pick))
    notes: dict[str, Any] = {}
    got = dict(
        staged_load(
            requests,
            CudaDevice("cuda"),
            slots=3,
            slot_bytes=64 << 10,
            threads=4,
            block_bytes=16 << 10,
            notes=notes,
        )
    )
    for r in requests:
        for name, t in load_file(r.path).items():
            if r.tensors is None or name in r.tensors:
                assert got[name].is_cuda and got[name].dtype == t.dtype
                assert torch.equal(_raw(got[name]), _raw(t)), name
    assert notes["peak_staging_host_bytes"] <= 3 * (64 << 10)


@needs_cuda
def test_bench_runs_every_gpu_strategy_and_verifies_it(target: Target) -> None:
    report = run_bench(target, BenchOptions(device="cuda", cache=("cold", "warm"), repeats=1))
    assert report.options["device"] == "cuda"
    ran = {t.strategy for t in report.trials}
    assert {"mmap-cuda", "read-to-cuda", "staged"} <= ran
    for t in report.trials:
        assert t.status == "ok", (t.strategy, t.cache, t.reason)
        assert t.verified is True
    staged = next(t for t in report.trials if t.strategy == "staged" and not t.warmup)
    assert staged.detail["peak_staging_host_bytes"] > 0 and "slot_wait_s" in staged.detail


@needs_cuda
def test_h2d_ceiling_measures_pinned_and_pageable() -> None:
    out = h2d.measure("cuda", nbytes=32 << 20, repeats=3)
    assert out["status"] == "ok"
    for kind in ("pinned", "pageable"):
        assert out[f"{kind}_bytes_per_s"] > 0
        assert len(out[f"{kind}_samples_bytes_per_s"]) == 3


@needs_cuda
def test_both_formats_side_by_side_on_the_gpu(tmp_path: Path) -> None:
    """Issue 20 (seed 000 on the GPU): load_file(device="cuda") beside torch.load with
    map_location="cuda" on the same tensors, digests checked, the ratio said."""
    from loadscope.report.bench_text import to_text

    root = synthesize(tmp_path / "both", 8 << 20, shards=2, fmt="both", seed=12).root
    report = run_bench(
        resolve(str(root)),
        BenchOptions(
            device="cuda",
            strategies=("mmap-cuda", "pickle-cuda"),
            cache=("cold", "warm"),
            repeats=1,
            warmup=False,
        ),
    )
    assert not report.skipped, report.skipped
    for t in report.trials:
        assert t.status == "ok" and t.verified, t
    text = to_text(report)
    for cache in ("cold", "warm"):
        line = next(x for x in text.splitlines() if x.startswith(f"formats, {cache}:"))
        assert "on the GPU here" in line and "digests checked" in line, line


def test_torch_load_to_the_gpu_is_refused_on_the_cpu_with_the_reason(tmp_path: Path) -> None:
    root = synthesize(tmp_path / "pt", 1 << 20, fmt="torch", seed=3).root
    report = run_bench(
        resolve(str(root)),
        BenchOptions(strategies=("pickle", "pickle-cuda"), repeats=1, warmup=False),
    )
    assert report.skipped == {"pickle-cuda": "needs a GPU (--device cuda)"}
    assert {t.strategy for t in report.trials} == {"pickle"}
