"""The dtypes the safetensors format defines, with their sizes in bits.

Kept apart from torch: inspection must not import torch, and sub-byte types
(``F4``, ``F6_*``) have no itemsize in bytes.
"""

from __future__ import annotations

from typing import Final

#: safetensors dtype name -> bits per element (as accepted by safetensors 0.8).
DTYPE_BITS: Final[dict[str, int]] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}


def alignment_of(dtype: str) -> int:
    """Byte alignment a zero-copy view of this dtype wants (1 for sub-byte types)."""
    return max(1, DTYPE_BITS[dtype] // 8)
