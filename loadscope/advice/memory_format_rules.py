"""Rules on the model against this machine: memory it does not fit, pickles to convert.

A model bigger than the memory this process may use is the first fix of all
(without the memory no other fix matters); torch pickles are converted to
safetensors, with the gain measured on a converted sample when the doctor ran one, or,
where the folder holds the same model as safetensors already, those are named instead.
May import: :mod:`loadscope.advice.facts`, :mod:`loadscope.advice.results`,
:mod:`loadscope.advice.snippets`, ``loadscope.engine``, ``loadscope.actions`` (the
conversion's refusal), ``loadscope.model`` (the names HF gives safetensors twins),
``loadscope.loaders.strategies``, ``loadscope.base``.
"""

from __future__ import annotations

import os

from loadscope.actions.convert import NOT_A_STATE_DICT
from loadscope.advice.facts import Facts
from loadscope.advice.results import WORTH_IT, Evidence, Recommendation
from loadscope.advice.snippets import Snippet, command, commands
from loadscope.base import fix_ids
from loadscope.base.units import format_bytes, format_speedup
from loadscope.loaders.strategies import DEFAULT, GPU_STRATEGIES, HF_DEFAULT, TORCH_DEFAULT
from loadscope.model.targets import safetensors_twin


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
            id=fix_ids.MEMORY_LIMIT,
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
    if f.safetensors_beside:
        return [_load_safetensors_beside(f)]
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
            f" {conv.pickle_cold_s:.3g} s cold ({format_speedup(gain)})"
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
    nested = conv is not None and NOT_A_STATE_DICT in (conv.reason or "")
    if nested:
        # The code below converts a flat state dict: this file holds something else.
        action += (
            f"; {conv.source.rsplit('/', 1)[-1] if conv else 'the file'} is not a flat state"
            " dict (a training checkpoint holding one, or a whole model): save the model's"
            " state dict on its own first (torch.save(ckpt['model'], path), by its key), then"
            " convert that"
        )
    if f.alternates_problem:
        # Safetensors in the folder that could not be loaded (a broken download, likely),
        # or that hold another model: the conversion below never overwrites them.
        action += f"; {f.alternates_problem}" + (
            " (the code below stops rather than overwrite them: move them away first)"
            if f.alternates_differ
            else " (an incomplete download? fix them, or convert)"
        )
        evidence.append(Evidence("safetensors beside", f.alternates_problem))
    return [
        Recommendation(
            id=fix_ids.CONVERT_TO_SAFETENSORS,
            title="Convert torch pickles to safetensors",
            action=action,
            evidence=evidence,
            risk="writes a copy; needs the disk space of the model",
            confidence="high",
            expected_speedup=gain,
            measured=gain is not None,
            snippets=[] if nested else [command("safetensors", _conversion_code(f))],
            # A measured gain worth having is a fix, not an option.
            optional=gain is None or gain < WORTH_IT,
        )
    ]


def _beside_code(f: Facts, names: list[str]) -> str:
    """Code that loads exactly the safetensors files beside the pickles: the one file, or
    the shards by their index where one names them, else listed."""
    if len(names) == 1:
        return (
            "from safetensors.torch import load_file\n"
            f"sd = load_file({os.path.join(f.model_root, names[0])!r})"
        )
    if f.safetensors_index:
        listed = (
            f"with open(os.path.join(folder, {f.safetensors_index!r})) as index:\n"
            "    shards = sorted(set(json.load(index)['weight_map'].values()))\n"
        )
    else:
        listed = f"shards = {names!r}\n"
    return (
        ("import json, os\n" if f.safetensors_index else "import os\n")
        + "from safetensors.torch import load_file\n"
        f"folder = {f.model_root!r}\n"
        f"{listed}"
        "sd = {}\n"
        "for shard in shards:\n"
        "    sd.update(load_file(os.path.join(folder, shard)))"
    )


def _load_safetensors_beside(f: Facts) -> Recommendation:
    """The model is in the folder as safetensors too: load those, nothing to convert;
    measured as ``load_file`` (the ``mmap`` trials, on those files) against ``torch.load``."""
    names = f.safetensors_beside
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    gain = f.speedup(DEFAULT, base_name=TORCH_DEFAULT)
    action = (
        f"this folder already holds the model as safetensors ({shown}): load those instead"
        " of the pickles (no unpickling, so no code execution; memory-mapped), nothing to"
        " convert"
    )
    evidence = [Evidence("format", "torch pickle, with safetensors beside it")]
    mmap_s, pickle_s = f.seconds(DEFAULT), f.seconds(TORCH_DEFAULT)
    if gain is not None and mmap_s and pickle_s:
        action += (
            f"; measured here cold: load_file {mmap_s:.3g} s vs torch.load {pickle_s:.3g} s"
            f" ({format_speedup(gain)})"
        )
        evidence += [
            Evidence("torch.load cold", pickle_s, "s"),
            Evidence("load_file cold, the safetensors beside", mmap_s, "s"),
        ]
    why = (
        f.why_not_measured(DEFAULT) or f.why_not_measured(TORCH_DEFAULT) or "no cold trial of both"
    )
    code = _beside_code(f, names)
    loads = Snippet(
        stack="safetensors",
        code=code,
        strategy=DEFAULT,  # load_file per file: the code above
        route="code change",
        what="the safetensors already there",
        speedup=gain,
        baseline=TORCH_DEFAULT,
        trial_ids=f.cold_trial_ids(DEFAULT),
        note="" if gain is not None else f"not measured here ({why})",
    )
    hf = Snippet(
        stack="transformers",
        code="from transformers import AutoModelForCausalLM  # or the Auto class you load with\n"
        f"model = AutoModelForCausalLM.from_pretrained({f.model_root!r}, use_safetensors=True)",
        strategy=HF_DEFAULT,
        route="code change",
        what="from_pretrained on the folder",
        note="not measured here (from_pretrained was not timed on these files)",
    )
    return Recommendation(
        id=fix_ids.USE_SAFETENSORS_BESIDE,
        title="Load the safetensors files already beside the pickles",
        action=action,
        strategy=DEFAULT,
        evidence=evidence,
        risk="none: reads files that are already there",
        confidence="high",
        expected_speedup=gain,
        measured=gain is not None,
        # from_pretrained finds model*.safetensors only (transformers' names).
        snippets=[loads, hf] if all(n.startswith("model") for n in names) else [loads],
        optional=gain is None or gain < WORTH_IT,
    )


#: One torch file to safetensors as the measured conversion does it: mapped, not held
#: twice; a tied entry (storage shared, which save_file refuses) gets its own copy.
_CONVERT_ONE = (
    "def convert(src, dest):\n"
    "    sd = torch.load(src, map_location='cpu', weights_only=True, mmap=True)\n"
    "    seen, out = set(), {}\n"
    "    for k, v in sd.items():\n"
    "        key = (v.untyped_storage().data_ptr(), v.untyped_storage().nbytes())\n"
    "        out[k] = v.clone() if key in seen and v.numel() else v.contiguous()\n"
    "        seen.add(key)\n"
    "    save_file(out, dest)\n"
)


def _conversion_code(f: Facts) -> str:
    """The user's own torch files converted beside them under the names HF's libraries
    look for (:func:`~loadscope.model.targets.safetensors_twin`: ``pytorch_model.bin`` ->
    ``model.safetensors``), and the index rewritten for them when there is one; it stops
    before writing anything when one of those names is taken (never overwrites a file)."""
    names = f.torch_files or ["pytorch_model.bin"]
    head = (
        "import json, os, torch\n" if f.torch_index else "import os, torch\n"
    ) + "from safetensors.torch import save_file\n"
    body = f"folder = {f.model_root!r}\n" + _CONVERT_ONE + _TWIN
    if f.torch_index:
        body += (
            f"with open(os.path.join(folder, {f.torch_index!r})) as fh:\n"
            "    index = json.load(fh)\n"
            "shards = sorted(set(index['weight_map'].values()))\n"
            f"index_out = os.path.join(folder, {safetensors_twin(f.torch_index)!r})\n"
        )
    else:
        body += f"shards, index_out = {names!r}, None\n"
    body += (
        "pairs = [(os.path.join(folder, s), os.path.join(folder, twin(s))) for s in shards]\n"
        "outs = [dest for _, dest in pairs] + ([index_out] if index_out else [])\n"
        "taken = [dest for dest in outs if os.path.lexists(dest)]\n"
        "if taken:\n"
        "    raise SystemExit(f'{taken[0]} exists: not overwritten (move it away first)')\n"
        "for src, dest in pairs:\n"
        "    convert(src, dest)"
    )
    if f.torch_index:
        body += (
            "\nindex['weight_map'] = {k: twin(v) for k, v in index['weight_map'].items()}\n"
            "with open(index_out, 'x') as fh:\n"
            "    json.dump(index, fh, indent=2)"
        )
    return head + body


#: HF's safetensors name for a torch file (what transformers and diffusers look for).
_TWIN = (
    "def twin(name):  # pytorch_model*.bin -> model*.safetensors, x.bin -> x.safetensors\n"
    "    stem = os.path.splitext(name)[0]\n"
    "    if os.path.basename(stem).startswith('pytorch_model'):\n"
    "        head, base = os.path.split(stem)\n"
    "        stem = os.path.join(head, 'model' + base[len('pytorch_model'):])\n"
    "    return stem + '.safetensors'\n"
)
