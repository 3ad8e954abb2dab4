"""Every dtype torch has loads through every CPU safetensors strategy, byte for byte.

Issue 22: an ``F8_E8M0`` tensor failed in fullread, parallel, direct and auto ("no torch
equivalent") though torch 2.13 has ``float8_e8m0fnu`` and mmap loaded it.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from loadscope.loaders.buffers import _TORCH_DTYPES, torch_dtype
from loadscope.loaders.dtypes import DTYPE_BITS
from loadscope.loaders.strategies import STRATEGIES
from loadscope.loaders.strategy import FileRequest, LoadContext

torch = pytest.importorskip("torch")

#: safetensors dtypes whose torch form packs several values per byte (shapes differ).
PACKED = {"F4", "F6_E2M3", "F6_E3M2"}
CPU_SAFETENSORS = [
    name
    for name, s in STRATEGIES.items()
    if not s.requires.gpu
    and "safetensors" in s.requires.formats
    and s.requires.package is None
    and s.sample_files
]


def test_the_table_matches_safetensors_own() -> None:
    st = pytest.importorskip("safetensors.torch")
    theirs = getattr(st, "_TYPES", {})
    for name, dtype in theirs.items():
        assert torch_dtype(name) == dtype, name
    for name in _TORCH_DTYPES:
        assert name in DTYPE_BITS, name
    # Every byte-sized safetensors dtype this torch has is mapped.
    missing = [n for n in DTYPE_BITS if n not in PACKED and n not in _TORCH_DTYPES]
    assert missing == []


def _file(path: Path) -> dict[str, bytes]:
    """A safetensors file with one 4x4 tensor of every mapped dtype this torch has."""
    entries, blobs, offset = {}, {}, 0
    for i, name in enumerate(sorted(_TORCH_DTYPES)):
        if not hasattr(torch, _TORCH_DTYPES[name]):
            continue
        nbytes = 16 * DTYPE_BITS[name] // 8
        data = bytes((i * 7 + j) % 251 for j in range(nbytes))
        if name == "BOOL":
            data = bytes(j % 2 for j in range(nbytes))
        key = f"t_{name.lower()}"
        entries[key] = {"dtype": name, "shape": [4, 4], "data_offsets": [offset, offset + nbytes]}
        blobs[key] = data
        offset += nbytes
    header = json.dumps(entries).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"".join(blobs.values()))
    return blobs


@pytest.mark.parametrize("strategy", CPU_SAFETENSORS)
def test_every_dtype_loads_byte_for_byte(strategy: str, tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    blobs = _file(path)
    request = FileRequest(str(path), path.stat().st_size, "safetensors")
    got = dict(STRATEGIES[strategy].load([request], LoadContext()))
    assert sorted(got) == sorted(blobs)
    for key, want in blobs.items():
        tensor = got[key]
        assert tuple(tensor.shape) == (4, 4), key
        raw = tensor.contiguous().view(torch.uint8).numpy().tobytes()
        assert raw == want, (strategy, key)
