"""Synthetic checkpoints: sizes, shapes, determinism, shards and formats agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from loadscope.model.inspection import SIZE_BUCKET_LABELS, inspect_target
from loadscope.model.targets import resolve
from loadscope.tools.synth import (
    MIN_SYNTH_BYTES,
    SynthError,
    SyntheticCheckpoint,
    choose_shape,
    layout,
    synthesize,
)


@pytest.mark.parametrize("size", [MIN_SYNTH_BYTES, 1 << 20, 7 << 20, 100 << 20, 1 << 30, 70 << 30])
def test_sizes_land_within_half_a_percent(size: int) -> None:
    total = sum(s.nbytes for s in layout(choose_shape(size)))
    assert abs(total - size) / size < 0.005


def test_too_small_is_refused() -> None:
    with pytest.raises(SynthError, match="at least"):
        choose_shape(1024)


def test_looks_like_a_decoder() -> None:
    specs = layout(choose_shape(1 << 30))
    dtypes = {s.dtype for s in specs}
    assert dtypes == {"BF16", "F16", "F32"}
    biggest = max(specs, key=lambda s: s.nbytes)
    assert biggest.name in ("model.embed_tokens.weight", "lm_head.weight")
    small = sum(1 for s in specs if s.nbytes < 64 << 10)
    assert small > len(specs) / 4  # many norms and biases


def test_is_deterministic(tmp_path: Path) -> None:
    a = synthesize(tmp_path / "a", 512 << 10, seed=5)
    b = synthesize(tmp_path / "b", 512 << 10, seed=5)
    c = synthesize(tmp_path / "c", 512 << 10, seed=6)
    assert a.files[0].read_bytes() == b.files[0].read_bytes()
    assert a.files[0].read_bytes() != c.files[0].read_bytes()


def test_values_are_finite(synth_single: SyntheticCheckpoint) -> None:
    with safe_open(str(synth_single.files[0]), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118
            t = f.get_tensor(key).float()
            assert torch.isfinite(t).all(), key
            assert t.abs().max() < 2


def test_shards_hold_the_same_tensors_as_one_file(tmp_path: Path) -> None:
    one = synthesize(tmp_path / "one", 1 << 20, seed=9)
    three = synthesize(tmp_path / "three", 1 << 20, shards=3, seed=9)
    index = json.loads((three.root / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == one.tensor_bytes
    with safe_open(str(one.files[0]), framework="pt") as ref:
        for shard in three.files:
            with safe_open(str(shard), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118
                    assert index["weight_map"][key] == shard.name
                    assert torch.equal(f.get_tensor(key), ref.get_tensor(key))
    sizes = [f.stat().st_size for f in three.files]
    assert max(sizes) < 2.5 * min(sizes)


def test_torch_format_matches_safetensors(synth_both: SyntheticCheckpoint) -> None:
    names = {f.name for f in synth_both.files}
    assert names == {
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "pytorch_model-00001-of-00002.bin",
        "pytorch_model-00002-of-00002.bin",
    }
    for i in (1, 2):
        state = torch.load(
            synth_both.root / f"pytorch_model-0000{i}-of-00002.bin", weights_only=True
        )
        with safe_open(
            str(synth_both.root / f"model-0000{i}-of-00002.safetensors"), framework="pt"
        ) as f:
            assert set(state) == set(f.keys())
            for key in f.keys():  # noqa: SIM118
                assert torch.equal(state[key], f.get_tensor(key))


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    synthesize(tmp_path, 256 << 10)
    with pytest.raises(SynthError, match="--force"):
        synthesize(tmp_path, 256 << 10)
    synthesize(tmp_path, 256 << 10, force=True, seed=1)


def test_too_many_shards(tmp_path: Path) -> None:
    with pytest.raises(SynthError, match="shards"):
        synthesize(tmp_path, MIN_SYNTH_BYTES, shards=100)


def test_inspection_matches_layout(synth_sharded: SyntheticCheckpoint) -> None:
    report = inspect_target(resolve(str(synth_sharded.root)))
    specs = layout(synth_sharded.shape)
    assert report.tensor_count == len(specs)
    hist = report.size_histogram()
    assert hist is not None and len(hist) == len(SIZE_BUCKET_LABELS) and sum(hist) == len(specs)
    assert report.dtype_bytes()["BF16"] == sum(s.nbytes for s in specs if s.dtype == "BF16")


def test_no_room_is_refused_before_writing(tmp_path: Path) -> None:
    """Issue 21: synth --size 10TiB wrote until the disk was full, then left the file."""
    from loadscope.tools.synth import SynthNoSpace

    out = tmp_path / "huge"
    with pytest.raises(SynthNoSpace, match=r"needs .* free in"):
        synthesize(out, 10 << 40)
    assert not out.exists()


def test_a_failed_write_leaves_no_file_under_either_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import loadscope.tools.synth as synth_module

    calls = {"n": 0}
    real = synth_module._write_safetensors

    def full_disk_on_the_second(path: Path, *args: object) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            path.write_bytes(b"half a shard")  # what a full disk leaves behind
            raise OSError(28, "No space left on device")
        real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(synth_module, "_write_safetensors", full_disk_on_the_second)
    with pytest.raises(synth_module.SynthError, match="No space left"):
        synthesize(tmp_path / "m", 1 << 20, shards=3)
    assert list((tmp_path / "m").iterdir()) == []
