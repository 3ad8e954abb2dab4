"""A GPU machine's doctor times the routes users apply (issue 38): the CPU-side routes
beside the GPU ones, each on its own device, in one run."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadscope.advice.snippets import ROUTES
from loadscope.diagnosis.trial_plan import CPU_ROUTES_ON_GPU, plan_doctor
from loadscope.engine.bench import GPU_STRATEGIES, BenchError, BenchOptions, run_bench
from loadscope.engine.probing import run_probes
from loadscope.model.targets import resolve
from loadscope.tools.synth import synthesize

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(tmp_path_factory.mktemp("gpu-plan"), 4 << 20, seed=38).root


def test_the_plan_on_a_gpu_machine_holds_every_cpu_route_and_every_gpu_route(
    model: Path,
) -> None:
    target = resolve(str(model))
    probe = run_probes(target, budget_s=2, local_disks=False)
    failures: list[str] = []
    plan = plan_doctor(target, probe, 60.0, "cuda", None, failures)
    assert plan.device == "cuda"
    assert set(GPU_STRATEGIES) <= set(plan.strategies)
    assert set(CPU_ROUTES_ON_GPU) <= set(plan.strategies)
    # Every route a snippet can print on either side has its trial in the plan (the peers
    # and transformers aside: they join when installed and the model builds).
    printed = {r.strategy for r in ROUTES if r.stack in ("safetensors", "vllm", "shell")}
    assert printed - {"fastsafetensors", "runai"} <= set(plan.strategies)


def test_a_torch_model_on_a_gpu_machine_times_torch_load_to_the_gpu(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """torch.load(map_location="cuda:N") is the load a torch checkpoint's users run on a
    GPU box: timed beside the CPU loads, not dropped for a CPU-only plan."""
    root = synthesize(tmp_path_factory.mktemp("gpu-torch"), 4 << 20, fmt="torch", seed=38).root
    target = resolve(str(root))
    probe = run_probes(target, budget_s=2, local_disks=False)
    plan = plan_doctor(target, probe, 60.0, "cuda", None, [])
    assert plan.device == "cuda"
    assert {"pickle", "pickle-mmap", "pickle-cuda"} <= set(plan.strategies)
    assert not set(GPU_STRATEGIES) & set(plan.strategies)  # they read safetensors


def test_a_gpu_run_times_the_cpu_routes_on_the_cpu(model: Path) -> None:
    report = run_bench(
        resolve(str(model)),
        BenchOptions(
            strategies=("mmap", "api", "mmap-cuda", "api-cuda"),
            device="cuda",
            cpu_too=True,
            repeats=1,
            warmup=False,
        ),
    )
    ran = {t.strategy for t in report.trials if t.status == "ok"}
    assert {"mmap", "api"} <= ran
    import torch

    if not torch.cuda.is_available():
        assert "mmap-cuda" in report.skipped and "api-cuda" in report.skipped
    # Without cpu_too, a CPU strategy on a GPU run is skipped with the reason (bench's own
    # behaviour is unchanged).
    with pytest.raises(BenchError, match="a CPU strategy: it does not load to cuda"):
        run_bench(
            resolve(str(model)),
            BenchOptions(strategies=("mmap",), device="cuda", repeats=1, warmup=False),
        )
