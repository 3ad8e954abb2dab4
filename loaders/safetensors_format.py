"""A strict reader of safetensors headers that needs neither torch nor the tensor data.

It reads the 8-byte length and the JSON header only, and checks every rule the
format sets (see the safetensors README and its Rust ``validate``): a header of
at most 100,000,000 bytes that fits in the file, a UTF-8 JSON object, known
dtypes, non-negative ordered ``data_offsets`` that tile the data section with no
gap or overlap, byte sizes equal to element count times dtype size (with 64-bit
overflow checks), and data that ends exactly at the end of the file. No
allocation is ever sized by a number read from the file: the header read is
capped by the format limit *and* the file's real size.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from loadscope.base.safeio import open_regular, pread_exact
from loadscope.loaders.dtypes import DTYPE_BITS, alignment_of
from loadscope.loaders.errors import (
    DataSizeMismatch,
    DuplicateTensor,
    EmptyFile,
    HeaderNotJson,
    HeaderNotObject,
    HeaderNotUtf8,
    HeaderTooLarge,
    InvalidMetadata,
    InvalidOffsets,
    InvalidTensorEntry,
    NotACheckpoint,
    SizeOverflow,
    TensorSizeMismatch,
    TruncatedHeader,
    UnknownDtype,
)
from loadscope.loaders.sniff import SNIFF_BYTES, reject_impostor

#: The format's own limit on the JSON header (safetensors ``MAX_HEADER_SIZE``).
MAX_HEADER_BYTES = 100_000_000
_U64_MAX = 2**64 - 1
_METADATA_KEY = "__metadata__"


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor as the header describes it; offsets are relative to the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    """A validated header: where the data starts and every tensor in file order."""

    path: str
    file_size: int
    header_bytes: int
    tensors: tuple[TensorEntry, ...]
    metadata: dict[str, str] | None = field(default=None)

    @property
    def data_offset(self) -> int:
        """Absolute file offset of the first data byte."""
        return 8 + self.header_bytes

    @property
    def data_bytes(self) -> int:
        return self.file_size - self.data_offset

    def unaligned(self) -> Iterator[TensorEntry]:
        """Tensors whose absolute offset is not a multiple of their element size:
        a zero-copy view of them is impossible, so loaders must copy."""
        for t in self.tensors:
            if (self.data_offset + t.begin) % alignment_of(t.dtype):
                yield t


#: The first bytes of a torch checkpoint since torch 1.6 (a zip archive's local header).
TORCH_MAGIC = b"PK\x03\x04"


def read_header(path: str | os.PathLike[str]) -> SafetensorsHeader:
    """Read and validate the header of the safetensors file at ``path``."""
    spath = os.fspath(path)
    fd = open_regular(spath)
    try:
        file_size = os.fstat(fd).st_size
        if file_size == 0:
            raise EmptyFile("is empty (0 bytes): an interrupted download or copy?", path=spath)
        prefix = pread_exact(fd, min(file_size, SNIFF_BYTES), 0, path=spath)
        reject_impostor(prefix, spath)
        if prefix.startswith(TORCH_MAGIC):
            # Its first 8 bytes read as a header length of ~5.8e17: say what it is instead.
            how = (
                "torch.load(weights_only=True) or loadscope.load_model reads it"
                if spath.lower().endswith((".bin", ".pt", ".pth"))
                else "named as one by mistake? rename it to .bin (loadscope reads it then),"
                " or read it with torch.load(weights_only=True)"
            )
            raise NotACheckpoint(
                f"is a torch checkpoint (a zip archive), not safetensors: {how}", path=spath
            )
        if file_size < 8:
            raise TruncatedHeader(
                f"is {file_size} bytes, shorter than the 8-byte header length", path=spath
            )
        (header_bytes,) = struct.unpack("<Q", prefix[:8])
        if header_bytes > MAX_HEADER_BYTES:
            raise HeaderTooLarge(
                f"declares a {header_bytes}-byte header, over the format's limit of"
                f" {MAX_HEADER_BYTES} bytes (not a safetensors file, or corrupt)",
                path=spath,
            )
        if 8 + header_bytes > file_size:
            raise TruncatedHeader(
                f"declares a {header_bytes}-byte header but the file is only {file_size} bytes"
                " (truncated?)",
                path=spath,
            )
        raw = pread_exact(fd, header_bytes, 8, path=spath)
    finally:
        os.close(fd)
    return parse_header(raw, file_size=file_size, path=spath)


def parse_header(raw: bytes, *, file_size: int, path: str) -> SafetensorsHeader:
    """Validate header bytes ``raw`` (without the 8-byte length) for a file of ``file_size``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderNotUtf8(
            f"header is not UTF-8 (byte {exc.start} of the header)", path=path
        ) from None
    if not text.startswith("{"):
        raise HeaderNotObject("header does not start with '{' (not a safetensors file?)", path=path)
    if _deeper_than(raw, MAX_DEPTH):
        raise HeaderNotJson(f"header is not valid JSON ({_short(RecursionError())})", path=path)
    try:
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=_reject_constant)
    except _DuplicateKey as dup:
        raise DuplicateTensor(
            f"tensor {dup.key!r} is listed twice in the header", path=path
        ) from None
    except (ValueError, RecursionError) as exc:
        raise HeaderNotJson(f"header is not valid JSON ({_short(exc)})", path=path) from None
    if not isinstance(doc, dict):
        raise HeaderNotObject(f"header is a JSON {type(doc).__name__}, not an object", path=path)

    metadata = _metadata(doc.pop(_METADATA_KEY, None), path)
    tensors = [_entry(name, info, path) for name, info in doc.items()]
    tensors.sort(key=lambda t: (t.begin, t.end))
    data_bytes = file_size - 8 - len(raw)
    expected = 0
    for t in tensors:
        if t.begin != expected:
            what = "a gap" if t.begin > expected else "an overlap"
            raise InvalidOffsets(
                f"tensor {t.name!r} starts at data offset {t.begin}, expected {expected}"
                f" ({what} between tensors)",
                path=path,
            )
        _check_size(t, path)
        expected = t.end
    if expected != data_bytes:
        if expected > data_bytes:
            problem = f"the file is {expected - data_bytes} bytes short (truncated download?)"
        else:
            problem = f"{data_bytes - expected} unexplained bytes follow the last tensor"
        raise DataSizeMismatch(
            f"tensors cover {expected} data bytes but the file holds {data_bytes}: {problem}",
            path=path,
        )
    return SafetensorsHeader(
        path=path,
        file_size=file_size,
        header_bytes=len(raw),
        tensors=tuple(tensors),
        metadata=metadata,
    )


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


#: The deepest nesting a header may have (a real one has 3: the header, a tensor, its
#: shape). Deeper is refused before the JSON parser, which would recurse to the
#: interpreter's limit: a finalizer that runs there (a collection during the parse) has
#: no stack left, and its error was printed beside the one line.
MAX_DEPTH = 64
#: A JSON string (its escapes included), and a pair of brackets with none inside.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_INNERMOST = re.compile(rb"\[[^\[\]{}]*\]|\{[^\[\]{}]*\}")


def _deeper_than(raw: bytes, limit: int) -> bool:
    """Whether ``raw``'s brackets outside its strings nest deeper than ``limit``: each pass
    removes the innermost pairs, one level (a real header takes three passes)."""
    rest = _STRING.sub(b"", raw)
    for _ in range(limit):
        rest, removed = _INNERMOST.subn(b"", rest)
        if not removed:  # none left, or unbalanced (the parser says so) unless as deep
            return rest.count(b"[") + rest.count(b"{") > limit
    return any(c in rest for c in b"[]{}")


def _short(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).split("\n")[0][:120]


def _metadata(value: Any, path: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidMetadata("__metadata__ must map strings to strings", path=path)
    return value


def _is_uint(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(name: str, info: Any, path: str) -> TensorEntry:
    if not isinstance(info, dict):
        raise InvalidTensorEntry(f"tensor {name!r}: entry is not an object", path=path)
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in info]
    if missing:
        raise InvalidTensorEntry(f"tensor {name!r}: missing {', '.join(missing)}", path=path)
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str):
        raise InvalidTensorEntry(f"tensor {name!r}: dtype is not a string", path=path)
    if dtype not in DTYPE_BITS:
        raise UnknownDtype(f"tensor {name!r}: unknown dtype {dtype!r}", path=path)
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise InvalidTensorEntry(
            f"tensor {name!r}: shape must be a list of non-negative integers", path=path
        )
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise InvalidTensorEntry(
            f"tensor {name!r}: data_offsets must be two integers [begin, end]", path=path
        )
    begin, end = offsets
    if begin < 0 or end < 0:
        raise InvalidOffsets(f"tensor {name!r}: negative data_offsets {offsets}", path=path)
    if end < begin:
        raise InvalidOffsets(f"tensor {name!r}: data_offsets end before begin {offsets}", path=path)
    if end > _U64_MAX:
        raise SizeOverflow(f"tensor {name!r}: data_offsets beyond 64 bits", path=path)
    return TensorEntry(name=name, dtype=dtype, shape=tuple(shape), begin=begin, end=end)


def _check_size(t: TensorEntry, path: str) -> None:
    numel = 1
    for dim in t.shape:
        numel *= dim
        if numel > _U64_MAX:
            raise SizeOverflow(
                f"tensor {t.name!r}: shape {list(t.shape)} overflows 64 bits", path=path
            )
    bits = numel * DTYPE_BITS[t.dtype]
    if bits > _U64_MAX:
        raise SizeOverflow(
            f"tensor {t.name!r}: byte size of shape {list(t.shape)} overflows 64 bits", path=path
        )
    if bits % 8:
        raise TensorSizeMismatch(
            f"tensor {t.name!r}: {numel} x {t.dtype} is not a whole number of bytes", path=path
        )
    if bits // 8 != t.nbytes:
        raise TensorSizeMismatch(
            f"tensor {t.name!r}: shape {list(t.shape)} x {t.dtype} needs {bits // 8} bytes,"
            f" data_offsets give {t.nbytes}",
            path=path,
        )
