"""Seed 000's ratio line, on the CPU and on the GPU, from a bench report's JSON."""

from __future__ import annotations

from typing import Any

from loadscope.report.bench_text import format_lines


def _bench(device: str, medians: dict[str, float], verified: bool = True) -> dict[str, Any]:
    return {
        "options": {"device": device},
        "summary": [
            {"strategy": name, "cache": "cold", "median_seconds": secs}
            for name, secs in medians.items()
        ],
        "trials": [
            {"strategy": name, "cache": "cold", "status": "ok", "verified": verified}
            for name in medians
        ],
    }


def test_on_the_gpu_load_file_to_cuda_is_set_beside_torch_load_to_cuda() -> None:
    gpu = _bench("cuda:0", {"mmap-cuda": 0.5, "pickle-cuda": 2.0, "mmap": 9.0, "pickle": 1.0})
    assert format_lines(gpu) == [
        "formats, cold: safetensors is 4.0x faster than torch.load on the GPU here"
        " (load_file 0.5 s, torch.load(weights_only=True) 2 s; the same tensors, digests"
        " checked)"
    ]


def test_on_the_cpu_the_cpu_pair_and_an_unverified_pair_says_so() -> None:
    cpu = _bench("cpu", {"mmap": 2.0, "pickle": 0.5, "pickle-mmap": 0.25}, verified=False)
    assert format_lines(cpu) == [
        "formats, cold: torch.load is 4.0x faster than safetensors on CPU here"
        " (load_file 2 s, torch.load(weights_only=True) 0.5 s; torch.load(mmap=True) 0.25 s;"
        " NOT verified to be the same tensors)"
    ]
    assert format_lines(_bench("cuda", {"mmap": 1.0, "pickle": 2.0})) == []


def test_a_torch_model_checks_the_safetensors_beside_it_against_its_own_tensors() -> None:
    """Named by its torch index, the pickles are the reference (their first trial has no
    verdict) and the safetensors beside them are what was checked: "NOT verified" was
    printed above a note saying both formats held the same tensors."""
    doc = _bench("cpu", {"pickle": 2.0, "mmap": 1.0})
    doc["target"] = {"formats": ["torch"]}
    doc["trials"][0]["verified"] = None  # the reference
    assert format_lines(doc)[0].endswith("; the same tensors, digests checked)")
    doc["trials"][1]["verified"] = False
    assert format_lines(doc)[0].endswith("; NOT verified to be the same tensors)")
