"""Rules on the model against this machine: memory it does not fit, pickles to convert.

A model bigger than the memory this process may use is the first fix of all
(without the memory no other fix matters); torch pickles are converted to
safetensors, with the gain measured on a converted sample when the doctor ran one.
May import: :mod:`loadscope.advice.facts`, :mod:`loadscope.advice.results`,
:mod:`loadscope.advice.snippets`, ``loadscope.engine``, ``loadscope.base``.
"""

from __future__ import annotations

from loadscope.advice.facts import Facts
from loadscope.advice.results import WORTH_IT, Evidence, Recommendation
from loadscope.advice.snippets import command, commands
from loadscope.base.units import format_bytes
from loadscope.engine.bench import GPU_STRATEGIES


def rule_memory_fit(f: Facts) -> list[Recommendation]:
    """The model is bigger than the memory this process may use: a CPU load will not fit."""
    if f.headroom_bytes is None or f.model_bytes <= f.headroom_bytes:
        return []
    if set(f.cold) & set(GPU_STRATEGIES):
        return []  # measured on a GPU: the weights need not all sit in host RAM
    limit = (
        f" under the {format_bytes(f.cgroup_limit_bytes)} cgroup limit"
        if f.cgroup_limit_bytes
        else ""
    )
    return [
        Recommendation(
            id="memory-limit",
            title="Give the load more memory than the model",
            action=f"the model is {format_bytes(f.model_bytes)} but only"
            f" {format_bytes(f.headroom_bytes)} is free for this process{limit}: a load that"
            " materialises the weights in RAM will be OOM-killed, and the page cache cannot"
            " keep the files warm; raise the limit, or load straight to the GPU",
            evidence=[
                Evidence("model size", f.model_bytes, "B"),
                Evidence("memory headroom", f.headroom_bytes, "B"),
                *(
                    [Evidence("cgroup limit", f.cgroup_limit_bytes, "B")]
                    if f.cgroup_limit_bytes
                    else []
                ),
            ],
            ram_bytes_needed=f.model_bytes,
            risk="a higher limit takes memory from other tenants of the node",
            confidence="high",
            snippets=commands(
                [
                    (
                        "shell",
                        "# docker: docker run --memory=<model size + 4g> ...\n"
                        "# kubernetes: resources.limits.memory: <model size + 4Gi>",
                    ),
                    (
                        "safetensors",
                        "from safetensors.torch import load_file\n"
                        "sd = load_file(path, device='cuda:0')  # tensor by tensor, not all in RAM",
                    ),
                ]
            ),
            measured=False,
        )
    ]


def rule_pickle(f: Facts) -> list[Recommendation]:
    if "torch" not in f.formats:
        return []
    conv = f.conversion
    gain = conv.speedup if conv is not None else None
    action = (
        "safetensors loads without unpickling (no code execution) and can be"
        " memory-mapped; convert once and load the .safetensors files"
    )
    evidence = [Evidence("format", "torch pickle")]
    if conv is not None and gain is not None:
        name = conv.source.rsplit("/", 1)[-1]
        action += (
            f"; measured here on {name} ({format_bytes(conv.sample_bytes)}) converted"
            f" {conv.where}: load_file {conv.safetensors_cold_s:.3g} s vs torch.load"
            f" {conv.pickle_cold_s:.3g} s cold ({gain:.1f}x{', slower here' if gain < 1 else ''})"
            + (
                f", warm {conv.safetensors_warm_s:.3g} s vs {conv.pickle_warm_s:.3g} s"
                if conv.safetensors_warm_s and conv.pickle_warm_s
                else ""
            )
            + ("; the same tensors, digests checked" if conv.verified else "")
            + ("; the converted sample was removed" if conv.removed else "")
        )
        evidence += [
            Evidence("torch.load cold, converted sample", conv.pickle_cold_s, "s"),
            Evidence("load_file cold, converted sample", conv.safetensors_cold_s, "s"),
        ]
    elif conv is not None and conv.reason:
        evidence.append(Evidence("conversion not measured", conv.reason))
    return [
        Recommendation(
            id="convert-to-safetensors",
            title="Convert torch pickles to safetensors",
            action=action,
            evidence=evidence,
            risk="writes a copy; needs the disk space of the model",
            confidence="high",
            expected_speedup=gain,
            measured=gain is not None,
            snippets=[
                command(
                    "safetensors",
                    "import torch; from safetensors.torch import save_file\n"
                    "sd = torch.load('pytorch_model.bin', weights_only=True)\n"
                    "save_file({k: v.contiguous() for k, v in sd.items()}, 'model.safetensors')",
                )
            ],
            # A measured gain worth having is a fix, not an option.
            optional=gain is None or gain < WORTH_IT,
        )
    ]
