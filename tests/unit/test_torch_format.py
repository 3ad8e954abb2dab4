"""Torch checkpoints are described from the zip directory and pickle opcodes, never unpickled."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from loadscope.loaders.errors import TorchCheckpointError
from loadscope.loaders.torch_format import read_torch_info


def test_zip_checkpoint_counts_tensors_and_dtype_bytes(tmp_path: Path) -> None:
    base = torch.ones(3, 4)
    state = {
        "a": torch.zeros(10, dtype=torch.bfloat16),
        "b": base,
        "view": base[0],  # shares b's storage
        "c": torch.arange(5),
        "h": torch.zeros(7, dtype=torch.float16),
    }
    path = tmp_path / "pytorch_model.bin"
    torch.save(state, path)
    info = read_torch_info(path)
    assert info.format == "zip"
    assert info.tensor_count == 5
    assert info.storage_count == 4
    assert info.dtype_bytes == {"BF16": 20, "F32": 48, "I64": 40, "F16": 14}


def test_nested_state_and_parameters(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 3)
    path = tmp_path / "ckpt.pt"
    torch.save(
        {"model": model.state_dict(), "step": 7, "param": torch.nn.Parameter(torch.ones(2))}, path
    )
    info = read_torch_info(path)
    assert info.tensor_count == 3
    assert info.dtype_bytes == {"F32": 4 * 12 + 4 * 3 + 4 * 2}


def test_legacy_format_is_recognised_not_scanned(tmp_path: Path) -> None:
    path = tmp_path / "old.pt"
    torch.save({"a": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    info = read_torch_info(path)
    assert info.format == "legacy"
    assert info.tensor_count is None
    assert info.notes


class _Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("touch PWNED",))


def test_hostile_pickle_is_never_executed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.bin"
    torch.save({"a": torch.ones(2), "boom": _Boom()}, path)
    info = read_torch_info(path)
    assert info.tensor_count == 1
    assert not (tmp_path / "PWNED").exists()


def test_raw_pickle_with_bin_name_is_legacy(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(pickle.dumps({"a": 1}, protocol=2))
    assert read_torch_info(path).format == "legacy"


def test_zip_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "x.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "hello")
    with pytest.raises(TorchCheckpointError, match=r"data\.pkl"):
        read_torch_info(path)


def test_counts_and_dtypes_match_torch_load_for_every_dtype_tied_and_untied(
    tmp_path: Path,
) -> None:
    """Issue 22: tensors rebuilt by _rebuild_tensor_v3 (float8, uint16/32/64) were not
    counted and their bytes went under "UntypedStorage"; tied entries counted once."""
    torch = pytest.importorskip("torch")
    from loadscope.loaders.torch_format import _TORCH_DTYPE_NAMES, read_torch_info

    state = {}
    for name in _TORCH_DTYPE_NAMES:
        if name.startswith("float4") or not hasattr(torch, name):
            continue  # float4 packs two values a byte: no plain zeros() of it
        state[f"t_{name}"] = torch.zeros(8, dtype=getattr(torch, name))
    state["tied_a"] = torch.ones(4)
    state["tied_b"] = state["tied_a"]
    state["param"] = torch.nn.Parameter(torch.ones(3))
    path = tmp_path / "all.pt"
    torch.save(state, path)
    info = read_torch_info(path)
    loaded = torch.load(path, weights_only=True)
    assert info.tensor_count == len(loaded)
    assert "UntypedStorage" not in info.dtype_bytes
    for name, tensor in loaded.items():
        if name.startswith("t_"):
            want = _TORCH_DTYPE_NAMES[name[2:]]
            assert info.dtype_bytes.get(want, 0) >= tensor.numel() * tensor.element_size(), name
    # Shared storage is counted once in bytes.
    assert info.storage_count == len(loaded) - 1
