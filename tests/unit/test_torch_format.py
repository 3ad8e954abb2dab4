"""Torch checkpoints are described from the zip directory and pickle opcodes, never unpickled."""

from __future__ import annotations

import contextlib
import pickle
import re
import zipfile
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
    path = tmp_path / "x.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "hello")
    with pytest.raises(TorchCheckpointError, match=r"data\.pkl"):
        read_torch_info(path)


def _with_data_pkl(tmp_path: Path, name: str, pkl: bytes) -> Path:
    """A real torch checkpoint whose data.pkl is replaced by ``pkl``."""
    good = tmp_path / "good.bin"
    torch.save({"w": torch.zeros(4)}, good)
    path = tmp_path / name
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(path, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            zout.writestr(item, pkl if item.filename.endswith("data.pkl") else data)
    return path


def _s(text: str) -> bytes:
    return b"X" + len(text).to_bytes(4, "little") + text.encode()


def test_a_short_storage_tuple_in_a_hostile_pickle_is_no_crash(tmp_path: Path) -> None:
    """A TUPLE whose first item is ("storage",), a storage record one field short: it
    ended in "internal error: IndexError"."""
    path = _with_data_pkl(tmp_path, "short.bin", b"\x80\x02(" + _s("storage") + b"\x85t.")
    with contextlib.suppress(TorchCheckpointError):
        read_torch_info(path)


def test_every_tuple_the_scan_reads_may_be_short() -> None:
    """The scan's steps index a pickle's tuples only as far as they go."""
    from loadscope.loaders.torch_pickle import (
        PickleScan,
        _Machine,
        _note_untyped_dtype,
        _persistent_id,
    )

    scan = PickleScan()
    scan.storage_dtypes["k"] = "UntypedStorage"
    _note_untyped_dtype(scan, [("storage", "k"), ("global", "torch")])
    assert scan.storage_dtypes["k"] == "UntypedStorage"
    machine = _Machine(scan)
    machine.frames[-1].append(("storage", ("global", "torch"), "key", "cpu", 1))
    assert _persistent_id(machine, "BINPERSID", None) == ("storage", "key")
    assert scan.storage_dtypes["key"] == "None"  # a type it cannot name


# -- issue 22: counts that match torch.load(weights_only=True), for every torch dtype ----------


def _torch_dtypes() -> list[torch.dtype]:
    """Every dtype this torch exposes as ``torch.<name>`` (aliases such as ``torch.float``
    deduplicated), by name."""
    found = {str(v): v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return [found[name] for name in sorted(found)]


#: Dtypes torch 2.13 creates but refuses to save ("dtype torch.int4 is not recognized"):
#: the only ones skipped. Any other refusal fails the test.
_TORCH_REFUSES_TO_SAVE = frozenset(
    [f"torch.int{n}" for n in range(1, 8)] + [f"torch.uint{n}" for n in range(1, 8)]
)
#: Where safetensors' name (the inspect table's) is not the rule of :func:`_inspect_spelling`.
_SAFETENSORS_SPELLINGS = {
    "bool": "BOOL",
    "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e8m0fnu": "F8_E8M0",
    "float4_e2m1fn_x2": "F4",
}


def _inspect_spelling(dtype: torch.dtype | str) -> str:
    """``str(dtype)`` as the inspect table spells dtypes (safetensors' names: ``F32``,
    ``U16``, ``C64``, ``F8_E5M2``), and upper-cased where safetensors has none."""
    name = str(dtype).removeprefix("torch.")
    if name in _SAFETENSORS_SPELLINGS:
        return _SAFETENSORS_SPELLINGS[name]
    m = re.fullmatch(r"(float|uint|int|complex)(\d+)(.*)", name)
    if m is None:
        return name.upper()  # bits8 -> BITS8, qint8 -> QINT8, quint4x2 -> QUINT4X2
    return {"float": "F", "uint": "U", "int": "I", "complex": "C"}[m[1]] + m[2] + m[3].upper()


def test_inspect_spelling_is_the_projects_safetensors_names() -> None:
    from loadscope.loaders.buffers import _TORCH_DTYPES
    from loadscope.loaders.dtypes import DTYPE_BITS

    for st_name, torch_name in _TORCH_DTYPES.items():
        assert _inspect_spelling(torch_name) == st_name
    assert _inspect_spelling(torch.float4_e2m1fn_x2) in DTYPE_BITS
    # The names the review found reported as "UntypedStorage".
    assert [_inspect_spelling(d) for d in ("complex32", "bits8", "bits16", "bits1x8")] == [
        "C32",
        "BITS8",
        "BITS16",
        "BITS1X8",
    ]


def _small_tensor(dtype: torch.dtype) -> torch.Tensor | None:
    """Four elements of ``dtype``: plain zeros, else quantized zeros, else a byte view."""
    makers = (
        lambda: torch.zeros(4, dtype=dtype),
        lambda: torch.quantize_per_tensor(torch.zeros(4), 0.5, 0, dtype),
        lambda: torch.zeros(4, dtype=torch.uint8).view(dtype),
    )
    for make in makers:
        try:
            return make()
        except (RuntimeError, TypeError, ValueError):
            continue
    return None


@pytest.mark.filterwarnings("ignore::UserWarning")  # complex32 is experimental, qint* deprecated
@pytest.mark.parametrize("dtype", _torch_dtypes(), ids=str)
def test_counts_dtypes_and_bytes_match_torch_load(tmp_path: Path, dtype: torch.dtype) -> None:
    """Tied names (one tensor twice) are two entries, a view is an entry of its own, and
    their one storage is counted once in bytes, under the dtype's own name."""
    tensor = _small_tensor(dtype)
    state = {"x": tensor, "x_tied": tensor, "x_view": tensor[1:]} if tensor is not None else {}
    path = tmp_path / "one.pt"
    try:
        if tensor is None:
            raise RuntimeError(f"cannot create a tensor of {dtype}")
        torch.save(state, path)
    except (RuntimeError, KeyError, TypeError) as exc:
        if str(dtype) in _TORCH_REFUSES_TO_SAVE:
            pytest.skip(f"torch {torch.__version__} refuses to save {dtype}: {exc}")
        raise
    assert str(dtype) not in _TORCH_REFUSES_TO_SAVE, "torch saves it now: drop it from the list"
    info = read_torch_info(path)
    loaded = torch.load(path, weights_only=True)
    assert info.tensor_count == len(loaded) == 3
    storages = {t.untyped_storage().data_ptr(): t for t in loaded.values()}
    assert info.storage_count == len(storages) == 1
    want: dict[str, int] = {}
    for t in storages.values():
        label = _inspect_spelling(t.dtype)
        want[label] = want.get(label, 0) + t.untyped_storage().nbytes()
    assert info.dtype_bytes == want


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_every_dtype_in_one_checkpoint_with_parameters(tmp_path: Path) -> None:
    state: dict[str, object] = {}
    for dtype in _torch_dtypes():
        tensor = _small_tensor(dtype)
        if tensor is not None and str(dtype) not in _TORCH_REFUSES_TO_SAVE:
            state[str(dtype)] = tensor
    state["tied"] = state["torch.float8_e5m2"]
    state["param"] = torch.nn.Parameter(torch.ones(3))
    path = tmp_path / "all.pt"
    torch.save(state, path)
    info = read_torch_info(path)
    loaded = torch.load(path, weights_only=True)
    assert info.tensor_count == len(loaded)
    unique = {t.untyped_storage().data_ptr(): t for t in loaded.values()}
    want: dict[str, int] = {}
    for t in unique.values():
        label = _inspect_spelling(t.dtype)
        want[label] = want.get(label, 0) + t.untyped_storage().nbytes()
    assert info.dtype_bytes == want
    assert info.storage_count == len(unique)


def _leaves(value: object) -> int:
    if isinstance(value, torch.Tensor):
        return 1
    if isinstance(value, dict):
        return sum(_leaves(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_leaves(v) for v in value)
    return 0


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_composite_tensors_are_one_entry_each(tmp_path: Path) -> None:
    """A quantized tensor's scales, a sparse one's indices and values and a nested one's
    sizes are tensors inside its rebuild: parts of one entry, as torch.load returns it."""
    per_channel = torch.quantize_per_channel(
        torch.zeros(2, 4), torch.tensor([0.1, 0.2]), torch.tensor([0, 0]), 0, torch.quint8
    )
    state = {
        "per_tensor": torch.quantize_per_tensor(torch.zeros(4), 0.5, 0, torch.qint8),
        "per_channel": per_channel,
        "per_channel_tied": per_channel,
        "coo": torch.eye(3).to_sparse(),
        "csr": torch.eye(3).to_sparse_csr(),
        "nested": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
        "meta": torch.zeros(4, device="meta"),
        "list": [torch.ones(2), {"deep": torch.ones(1)}],
    }
    path = tmp_path / "composite.pt"
    torch.save(state, path)
    info = read_torch_info(path)
    assert info.tensor_count == _leaves(torch.load(path, weights_only=True)) == 9
    assert not info.unsafe_globals
    with zipfile.ZipFile(path) as z:
        data = [i for i in z.infolist() if "/data/" in i.filename]
    assert info.storage_count == len(data)
    assert sum(info.dtype_bytes.values()) == sum(i.file_size for i in data)
    assert {"QINT8", "QUINT8"} <= set(info.dtype_bytes)


def test_storage_names_are_torchs() -> None:
    """The typed storage table is torch's own (``torch.storage._dtype_to_storage_type_map``)."""
    from loadscope.loaders.torch_format import _STORAGE_TORCH_DTYPES, dtype_label

    torch_map = getattr(torch.storage, "_dtype_to_storage_type_map", None)
    if torch_map is None:
        pytest.skip("this torch has no torch.storage._dtype_to_storage_type_map")
    from_torch = {
        storage: str(dtype).removeprefix("torch.") for dtype, storage in torch_map().items()
    }
    assert from_torch == _STORAGE_TORCH_DTYPES
    for dtype in _torch_dtypes():
        assert dtype_label(str(dtype).removeprefix("torch.")) == _inspect_spelling(dtype)
