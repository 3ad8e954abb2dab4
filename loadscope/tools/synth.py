"""Synthetic checkpoints shaped like a decoder LLM, deterministic and fast to write.

Tests, benchmarks and the no-model demo use these instead of downloads. The
layout mimics a Llama-style model: a large embedding and LM head, per layer
attention (grouped-query K/V) and MLP matrices in bf16, small fp16 biases and
fp32 norms, so the tensor-size histogram and dtype mix look like the real
thing. Values are pseudo-random (SFC64, seeded per tensor name) with the top
exponent bit cleared, so every float is finite and ``|x| < 2`` while the bytes
stay incompressible, as real weights are; the same seed gives the same bytes in
every format and shard layout.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.base.units import format_bytes
from loadscope.loaders.dtypes import DTYPE_BITS

SynthFormat = Literal["safetensors", "torch", "both"]

#: Smallest checkpoint we can shape like a model (one tiny layer and a small vocab).
MIN_SYNTH_BYTES = 64 << 10
_CHUNK_BYTES = 16 << 20
# Clearing the top exponent bit keeps bf16/fp16/fp32 values finite (|x| < 2). The fp16
# biases and fp32 norms also keep only the mantissa bits bf16 has, so a model built in
# bf16 from the config (what ``from_pretrained`` does with ``torch_dtype: bfloat16``)
# holds exactly the checkpoint's values, and a trial of it can be checked byte for byte.
_FINITE_MASK = {
    "BF16": 0xBFFF_BFFF_BFFF_BFFF,
    "F16": 0xBFF8_BFF8_BFF8_BFF8,
    "F32": 0xBFFF_0000_BFFF_0000,
}


class SynthError(LoadscopeError):
    """The synthetic checkpoint cannot be written as asked."""

    exit_code = ExitCode.USAGE


class SynthNoSpace(SynthError):
    """Not enough free disk space for the checkpoint asked for (checked before writing)."""

    exit_code = ExitCode.RESOURCES


#: Written under this suffix and renamed when complete: a final name never holds a
#: truncated file (a full disk, a signal), as ``loadscope copy`` does.
PARTIAL_SUFFIX = ".loadscope-partial"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BITS[self.dtype] // 8


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The decoder dimensions chosen to reach a requested size."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int


@dataclass(frozen=True, slots=True)
class SyntheticCheckpoint:
    """What :func:`synthesize` wrote."""

    root: Path
    files: tuple[Path, ...]
    tensor_bytes: int
    tensor_count: int
    shape: ModelShape
    seed: int


def choose_shape(size_bytes: int) -> ModelShape:
    """Pick decoder dimensions whose tensors add up to about ``size_bytes``.

    Roughly the proportions of real models: ~85% in the layers, ~15% in the
    embedding and LM head, depth growing with width (gpt2-large: 1280 x 36,
    Llama-7B: 4096 x 32, 70B: 8192 x 80).
    """
    if size_bytes < MIN_SYNTH_BYTES:
        raise SynthError(f"synthetic size must be at least {format_bytes(MIN_SYNTH_BYTES)}")
    hidden = max(32, round((size_bytes * 4.05) ** (1 / 3) / 32) * 32)
    while True:
        layers = max(1, min(80, round(hidden / 100)))
        shape = _shape(hidden, layers, vocab=1)
        body = _total(layout(shape)) - 4 * shape.hidden  # all but the embedding and LM head
        if body <= size_bytes * 0.9 or hidden == 32:
            break
        hidden -= 32
    vocab = max(1, (size_bytes - body) // (4 * shape.hidden))
    return _shape(hidden, layers, vocab)


def _shape(hidden: int, layers: int, vocab: int) -> ModelShape:
    head_dim = 64 if hidden >= 512 else 32
    heads = max(1, hidden // head_dim)
    kv_heads = max(1, heads // 4)
    intermediate = max(32, round(hidden * 8 / 3 / 32) * 32)
    return ModelShape(heads * head_dim, intermediate, layers, heads, kv_heads, vocab)


def layout(shape: ModelShape) -> list[TensorSpec]:
    """Every tensor of the model in the order it is written."""
    h, inter = shape.hidden, shape.intermediate
    kv = shape.kv_heads * (h // shape.heads)
    specs = [TensorSpec("model.embed_tokens.weight", "BF16", (shape.vocab, h))]
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        specs += [
            TensorSpec(p + "input_layernorm.weight", "F32", (h,)),
            TensorSpec(p + "self_attn.q_proj.weight", "BF16", (h, h)),
            TensorSpec(p + "self_attn.q_proj.bias", "F16", (h,)),
            TensorSpec(p + "self_attn.k_proj.weight", "BF16", (kv, h)),
            TensorSpec(p + "self_attn.k_proj.bias", "F16", (kv,)),
            TensorSpec(p + "self_attn.v_proj.weight", "BF16", (kv, h)),
            TensorSpec(p + "self_attn.v_proj.bias", "F16", (kv,)),
            TensorSpec(p + "self_attn.o_proj.weight", "BF16", (h, h)),
            TensorSpec(p + "post_attention_layernorm.weight", "F32", (h,)),
            TensorSpec(p + "mlp.gate_proj.weight", "BF16", (inter, h)),
            TensorSpec(p + "mlp.up_proj.weight", "BF16", (inter, h)),
            TensorSpec(p + "mlp.down_proj.weight", "BF16", (h, inter)),
        ]
    specs += [
        TensorSpec("model.norm.weight", "F32", (h,)),
        TensorSpec("lm_head.weight", "BF16", (shape.vocab, h)),
    ]
    return specs


def _total(specs: list[TensorSpec]) -> int:
    return sum(s.nbytes for s in specs)


def split_shards(specs: list[TensorSpec], shards: int) -> list[list[TensorSpec]]:
    """Split ``specs`` in order into ``shards`` groups of roughly equal bytes."""
    if shards < 1:
        raise SynthError("--shards must be at least 1")
    if shards > len(specs):
        raise SynthError(f"cannot split {len(specs)} tensors into {shards} shards; ask for fewer")
    total = _total(specs)
    groups: list[list[TensorSpec]] = [[] for _ in range(shards)]
    done = 0
    for i, spec in enumerate(specs):
        # Target shard by where this tensor's middle falls, but keep every shard non-empty.
        k = min(shards - 1, int((done + spec.nbytes / 2) * shards / max(total, 1)))
        remaining_specs = len(specs) - i
        first_empty = next((j for j, g in enumerate(groups) if not g), shards)
        k = max(k, first_empty - 1 if first_empty > 0 else 0)
        if shards - first_empty >= remaining_specs:
            k = first_empty
        groups[k].append(spec)
        done += spec.nbytes
    return groups


def tensor_bytes(spec: TensorSpec, seed: int) -> Iterator[bytes]:
    """The deterministic contents of one tensor, in chunks of at most 16 MiB."""
    import numpy as np

    bitgen = np.random.SFC64(np.random.SeedSequence([seed, zlib.crc32(spec.name.encode())]))
    mask = _FINITE_MASK.get(spec.dtype)
    remaining = spec.nbytes
    while remaining > 0:
        n = min(remaining, _CHUNK_BYTES)
        words = bitgen.random_raw((n + 7) // 8)
        if mask is not None:
            words &= np.uint64(mask)
        yield words.tobytes()[:n]
        remaining -= n


def safetensors_header(specs: list[TensorSpec], metadata: dict[str, str]) -> bytes:
    """The 8-byte length plus the JSON header, padded with spaces to 8 bytes as safetensors does."""
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for spec in specs:
        header[spec.name] = {
            "dtype": spec.dtype,
            "shape": list(spec.shape),
            "data_offsets": [offset, offset + spec.nbytes],
        }
        offset += spec.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw


Progress = Callable[[int], None]


def _write_safetensors(
    path: Path, specs: list[TensorSpec], seed: int, metadata: dict[str, str], progress: Progress
) -> None:
    with open(path, "wb") as out:
        out.write(safetensors_header(specs, metadata))
        for spec in specs:
            for chunk in tensor_bytes(spec, seed):
                out.write(chunk)
                progress(len(chunk))


def _write_torch(path: Path, specs: list[TensorSpec], seed: int, progress: Progress) -> None:
    import torch

    dtypes = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    state: dict[str, torch.Tensor] = {}
    for spec in specs:
        buf = bytearray()
        for chunk in tensor_bytes(spec, seed):
            buf += chunk
        state[spec.name] = torch.frombuffer(buf, dtype=dtypes[spec.dtype]).reshape(spec.shape)
        progress(spec.nbytes)
    torch.save(state, path)


_WeightFormat = Literal["safetensors", "torch"]
_STEMS: dict[_WeightFormat, tuple[str, str]] = {
    "safetensors": ("model", "safetensors"),
    "torch": ("pytorch_model", "bin"),
}


def _formats(fmt: SynthFormat) -> list[_WeightFormat]:
    return ["safetensors", "torch"] if fmt == "both" else [fmt]


def _names(fmt: _WeightFormat, shards: int) -> list[str]:
    stem, ext = _STEMS[fmt]
    if shards == 1:
        return [f"{stem}.{ext}"]
    return [f"{stem}-{i:05d}-of-{shards:05d}.{ext}" for i in range(1, shards + 1)]


def _index_name(fmt: _WeightFormat) -> str:
    stem, ext = _STEMS[fmt]
    return f"{stem}.{ext}.index.json"


def planned_files(fmt: SynthFormat, shards: int) -> list[str]:
    """File names :func:`synthesize` writes (weights, indexes and config.json)."""
    names = ["config.json"]
    for f in _formats(fmt):
        names += _names(f, shards) + ([_index_name(f)] if shards > 1 else [])
    return names


def synthesize(
    out: str | os.PathLike[str],
    size_bytes: int,
    *,
    shards: int = 1,
    fmt: SynthFormat = "safetensors",
    seed: int = 0,
    force: bool = False,
    progress: Progress | None = None,
) -> SyntheticCheckpoint:
    """Write a synthetic checkpoint of about ``size_bytes`` into directory ``out``."""
    root = Path(out)
    shape = choose_shape(size_bytes)
    specs = layout(shape)
    groups = split_shards(specs, shards)
    if root.exists() and not root.is_dir():
        raise SynthError(f"{root} exists and is not a directory")
    clashes = [n for n in planned_files(fmt, shards) if (root / n).exists()]
    if clashes and not force:
        raise SynthError(f"{root / clashes[0]} already exists; pass --force to overwrite")
    total = _total(specs)
    _check_space(root, total * len(_formats(fmt)))
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SynthError(f"cannot create {root}: {exc.strerror}") from None
    tick = progress or (lambda _n: None)
    metadata = {"format": "pt", "generator": "loadscope synth", "seed": str(seed)}
    written: list[Path] = []
    partial: Path | None = None
    try:
        for f in _formats(fmt):
            names = _names(f, shards)
            for name, group in zip(names, groups, strict=True):
                path = root / name
                partial = root / (name + PARTIAL_SUFFIX)
                if f == "safetensors":
                    _write_safetensors(partial, group, seed, metadata, tick)
                else:
                    _write_torch(partial, group, seed, tick)
                os.replace(partial, path)
                partial = None
                written.append(path)
            if shards > 1:
                weight_map = {s.name: n for n, g in zip(names, groups, strict=True) for s in g}
                index = {"metadata": {"total_size": total}, "weight_map": weight_map}
                (root / _index_name(f)).write_text(json.dumps(index, indent=2) + "\n")
        (root / "config.json").write_text(
            json.dumps(_config(shape, seed, size_bytes), indent=2) + "\n"
        )
    except BaseException as exc:
        # A full disk, Ctrl-C, SIGTERM: no half-written file stays, under either name.
        for leftover in [*([partial] if partial else []), *written]:
            with contextlib.suppress(OSError):
                leftover.unlink()
        if isinstance(exc, OSError):
            raise SynthError(f"writing the synthetic checkpoint failed: {exc}") from None
        raise
    return SyntheticCheckpoint(
        root=root,
        files=tuple(written),
        tensor_bytes=total,
        tensor_count=len(specs),
        shape=shape,
        seed=seed,
    )


def _check_space(root: Path, tensor_bytes: int) -> None:
    """Refuse, with the numbers, a checkpoint the disk under ``root`` has no room for."""
    import shutil

    need = int(tensor_bytes * 1.01) + (1 << 20)  # headers, index, config
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        free = shutil.disk_usage(existing).free
    except OSError:
        return  # no answer (a path we may not stat): the writes will say what fails
    root = existing
    if need > free:
        raise SynthNoSpace(
            f"a {format_bytes(tensor_bytes)} checkpoint needs {format_bytes(need)} free in"
            f" {root}, which has {format_bytes(free)}"
        )


def _config(shape: ModelShape, seed: int, size_bytes: int) -> dict[str, object]:
    # Qwen2 is the Llama decoder with biases on q/k/v (and none on o_proj): exactly the
    # tensors laid out above, so transformers builds the model from this config.
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "vocab_size": shape.vocab,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "loadscope_synthetic": {"seed": seed, "requested_bytes": size_bytes},
    }
