"""The header parser agrees with safetensors itself on everything safetensors writes."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import SafetensorError, safe_open
from safetensors.torch import save, save_file

from loadscope.loaders.errors import CheckpointError
from loadscope.loaders.safetensors_format import MAX_HEADER_BYTES, parse_header, read_header

TORCH_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F64": torch.float64,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}

names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=24
).filter(lambda n: n != "__metadata__")
tensor_dicts = st.dictionaries(
    names,
    st.tuples(
        st.sampled_from(sorted(TORCH_DTYPES)),
        st.lists(st.integers(min_value=0, max_value=6), min_size=0, max_size=3),
    ),
    min_size=0,
    max_size=12,
)
metadata = st.none() | st.dictionaries(st.text(max_size=8), st.text(max_size=16), max_size=4)


def _safe_open_view(path: Path) -> tuple[dict[str, tuple[str, list[int]]], dict[str, str] | None]:
    out = {}
    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118  (safe_open is not a mapping)
            sl = f.get_slice(key)
            out[key] = (sl.get_dtype(), list(sl.get_shape()))
        return out, f.metadata()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=tensor_dicts, meta=metadata)
def test_round_trips_headers_written_by_safetensors(
    spec: dict[str, tuple[str, list[int]]], meta: dict[str, str] | None, tmp_path: Path
) -> None:
    tensors = {
        name: torch.zeros(shape, dtype=TORCH_DTYPES[dt]) for name, (dt, shape) in spec.items()
    }
    path = tmp_path / "x.safetensors"
    path.write_bytes(save(tensors, metadata=meta))
    try:
        theirs, their_meta = _safe_open_view(path)
    except SafetensorError:
        # safetensors 0.8 writes '{},"__metadata__":{}}' for no tensors and empty metadata,
        # and cannot read it back: we must refuse it too, not accept what it cannot load.
        with pytest.raises(CheckpointError):
            read_header(path)
        return
    header = read_header(path)
    ours = {t.name: (t.dtype, list(t.shape)) for t in header.tensors}
    assert ours == theirs
    assert header.metadata == their_meta
    assert header.file_size == path.stat().st_size
    assert sum(t.nbytes for t in header.tensors) == header.data_bytes
    for t in header.tensors:
        assert t.nbytes == tensors[t.name].numel() * tensors[t.name].element_size()
        assert t.numel == math.prod(t.shape)


def test_reads_real_file_in_file_order(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_file({"b": torch.ones(3, 4), "a": torch.zeros(10, dtype=torch.bfloat16)}, str(path))
    header = read_header(path)
    assert [t.begin for t in header.tensors] == sorted(t.begin for t in header.tensors)
    assert header.data_offset == 8 + header.header_bytes
    assert header.header_bytes % 8 == 0  # safetensors pads its header
    assert list(header.unaligned()) == []


def test_reports_unaligned_offsets() -> None:
    # A 1-byte tensor first pushes the F32 tensor off a 4-byte boundary.
    hdr = {
        "a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        "b": {"dtype": "F32", "shape": [1], "data_offsets": [1, 5]},
    }
    raw = json.dumps(hdr).encode()
    raw += b" " * (-len(raw) % 8)
    header = parse_header(raw, file_size=8 + len(raw) + 5, path="x")
    assert [t.name for t in header.unaligned()] == ["b"]


def test_header_read_is_bounded_by_file_size(tmp_path: Path) -> None:
    # A header length just under the limit but past the end of a tiny file: refused
    # before any allocation of that size.
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", MAX_HEADER_BYTES) + b"{}")
    with pytest.raises(Exception, match="truncated"):
        read_header(path)


def test_scalars_and_empty_tensors(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    save_file({"s": torch.tensor(3.0), "e": torch.zeros(0, 5)}, str(path))
    by_name = {t.name: t for t in read_header(path).tensors}
    assert by_name["s"].shape == () and by_name["s"].nbytes == 4
    assert by_name["e"].nbytes == 0
