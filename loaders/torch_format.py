"""Describe a torch checkpoint (``.bin``/``.pt``/``.pth``) without unpickling it.

Pickles execute code when loaded, so inspection never calls ``pickle.load`` or
``torch.load``: it reads the zip directory of the archive format, and walks the
``data.pkl`` opcode stream with :func:`pickletools.genops`, which only decodes
opcodes. A tiny symbolic pass over those opcodes counts tensor rebuilds and
pairs each storage record ``('storage', <type>, key, location, numel)`` with
the size of its ``data/<key>`` entry, so the dtype mix comes out exactly.
"""

from __future__ import annotations

import io
import os
import pickletools
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from loadscope.loaders.errors import EmptyFile, TorchCheckpointError
from loadscope.loaders.sniff import SNIFF_BYTES, reject_impostor
from loadscope.safeio import open_regular, pread_exact

TorchFormat = Literal["zip", "legacy"]

#: data.pkl bigger than this is not scanned (a state dict's pickle is KiB to a few MiB).
MAX_PICKLE_SCAN_BYTES = 64 << 20

_STORAGE_DTYPES = {
    "FloatStorage": "F32",
    "DoubleStorage": "F64",
    "HalfStorage": "F16",
    "BFloat16Storage": "BF16",
    "LongStorage": "I64",
    "IntStorage": "I32",
    "ShortStorage": "I16",
    "CharStorage": "I8",
    "ByteStorage": "U8",
    "BoolStorage": "BOOL",
    "ComplexFloatStorage": "C64",
    "ComplexDoubleStorage": "C128",
    "Float8_e4m3fnStorage": "F8_E4M3",
    "Float8_e5m2Storage": "F8_E5M2",
}
_REBUILD_TENSOR = ("torch._utils", "_rebuild_tensor_v2")


@dataclass(frozen=True, slots=True)
class TorchCheckpointInfo:
    """What can be known about a torch checkpoint without running its pickle."""

    path: str
    file_size: int
    format: TorchFormat
    #: Tensors rebuilt by the pickle (None when the pickle was not scanned).
    tensor_count: int | None = None
    #: Storages (shared by views) and the bytes of each dtype, from the zip entries.
    storage_count: int | None = None
    dtype_bytes: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def read_torch_info(path: str | os.PathLike[str]) -> TorchCheckpointInfo:
    """Identify the format of a torch checkpoint and count what can be counted safely."""
    spath = os.fspath(path)
    fd = open_regular(spath)
    with os.fdopen(fd, "rb") as fh:
        file_size = os.fstat(fh.fileno()).st_size
        if file_size == 0:
            raise EmptyFile("is empty (0 bytes): an interrupted download or copy?", path=spath)
        prefix = pread_exact(fh.fileno(), min(file_size, SNIFF_BYTES), 0, path=spath)
        reject_impostor(prefix, spath)
        if prefix.startswith(b"PK\x03\x04"):
            return _zip_info(fh, spath, file_size)
        if prefix[:1] == b"\x80" and len(prefix) > 1 and 2 <= prefix[1] <= 5:
            return TorchCheckpointInfo(
                path=spath,
                file_size=file_size,
                format="legacy",
                notes=("legacy (pre-1.6, non-zip) torch format: contents are not scanned",),
            )
        if len(prefix) >= 262 and prefix[257:262] == b"ustar":
            return TorchCheckpointInfo(
                path=spath,
                file_size=file_size,
                format="legacy",
                notes=("legacy tar torch format (torch < 0.4): contents are not scanned",),
            )
    raise TorchCheckpointError(
        "is neither a torch zip archive nor a pickle (not a torch checkpoint, or corrupt)",
        path=spath,
    )


def _zip_info(fh: io.BufferedReader, path: str, file_size: int) -> TorchCheckpointInfo:
    try:
        archive = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise TorchCheckpointError(f"zip archive is corrupt ({exc})", path=path) from None
    with archive:
        infos = archive.infolist()
        pickles = [i for i in infos if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"]
        if len(pickles) != 1:
            raise TorchCheckpointError(
                f"zip archive holds {len(pickles)} data.pkl entries, expected 1"
                " (a zip, but not a torch checkpoint)",
                path=path,
            )
        prefix = pickles[0].filename[: -len("data.pkl")]
        storage_sizes = {
            i.filename[len(prefix) + len("data/") :]: i.file_size
            for i in infos
            if i.filename.startswith(prefix + "data/") and not i.is_dir()
        }
        notes: list[str] = []
        tensor_count: int | None = None
        dtype_bytes: Counter[str] = Counter()
        if pickles[0].file_size > MAX_PICKLE_SCAN_BYTES:
            notes.append(f"data.pkl is {pickles[0].file_size} bytes; tensors not counted")
        else:
            try:
                data = archive.read(pickles[0])
            except (zipfile.BadZipFile, OSError, ValueError) as exc:
                raise TorchCheckpointError(f"cannot read data.pkl ({exc})", path=path) from None
            scan = _scan_pickle(data, path)
            tensor_count = scan.tensor_count
            for key, dtype in scan.storage_dtypes.items():
                dtype_bytes[dtype] += storage_sizes.get(key, 0)
            missing = sorted(set(scan.storage_dtypes) - set(storage_sizes))
            if missing:
                raise TorchCheckpointError(
                    f"pickle refers to {len(missing)} storage(s) missing from the archive"
                    f" (first: data/{missing[0]}); truncated or corrupt",
                    path=path,
                )
        return TorchCheckpointInfo(
            path=path,
            file_size=file_size,
            format="zip",
            tensor_count=tensor_count,
            storage_count=len(storage_sizes),
            dtype_bytes=dict(dtype_bytes),
            notes=tuple(notes),
        )


class _NoValue:
    """Marks opcodes that push nothing we track (PUT, MARK, ...)."""


_NO_VALUE = _NoValue()


@dataclass
class _PickleScan:
    tensor_count: int = 0
    storage_dtypes: dict[str, str] = field(default_factory=dict)


_STRING_OPS = {
    "BINUNICODE",
    "SHORT_BINUNICODE",
    "BINUNICODE8",
    "UNICODE",
    "SHORT_BINSTRING",
    "BINSTRING",
    "STRING",
    "BINBYTES",
    "SHORT_BINBYTES",
}
_INT_OPS = {"BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG"}
_PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}
_GET_OPS = {"GET", "BINGET", "LONG_BINGET"}
_MARK_CONSUMERS = {
    "TUPLE",
    "LIST",
    "DICT",
    "SETITEMS",
    "APPENDS",
    "ADDITEMS",
    "FROZENSET",
    "OBJ",
    "INST",
    "POP_MARK",
}


def _scan_pickle(data: bytes, path: str) -> _PickleScan:
    """Symbolically follow just enough of the opcode stream to see storages and tensors.

    Values we track: strings, ints, globals and tuples of them; everything else is None.
    Nothing is ever constructed or called.
    """
    scan = _PickleScan()
    memo: dict[int, Any] = {}
    frames: list[list[Any]] = [[]]
    last: Any = None
    try:
        for opcode, arg, _pos in pickletools.genops(data):
            name = opcode.name
            value: Any = _NO_VALUE
            if name in _STRING_OPS:
                value = arg.decode("latin-1") if isinstance(arg, bytes) else arg
            elif name in _INT_OPS:
                value = arg
            elif name == "GLOBAL":
                module, _, attr = str(arg).partition(" ")
                value = ("global", module, attr)
            elif name == "STACK_GLOBAL":
                cur = frames[-1]
                stack_attr = cur.pop() if cur else None
                stack_module = cur.pop() if cur else None
                value = ("global", stack_module, stack_attr)
            elif name in _PUT_OPS:
                memo[int(str(arg))] = last
            elif name == "MEMOIZE":
                memo[len(memo)] = last
            elif name in _GET_OPS:
                value = memo.get(int(str(arg)))
            elif name == "MARK":
                frames.append([])
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                cur = frames[-1]
                items = cur[-n:] if len(cur) >= n else [None] * n
                del cur[-n:]
                value = tuple(items)
            elif name == "EMPTY_TUPLE":
                value = ()
            elif name in _MARK_CONSUMERS:
                items = frames.pop() if len(frames) > 1 else []
                value = tuple(items) if name == "TUPLE" else None
            elif name == "BINPERSID":
                pid = frames[-1].pop() if frames[-1] else last
                if isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage":
                    storage_type = pid[1]
                    type_name = storage_type[2] if isinstance(storage_type, tuple) else None
                    dtype = _STORAGE_DTYPES.get(str(type_name), str(type_name))
                    scan.storage_dtypes[str(pid[2])] = dtype
                value = None
            else:
                # Any other op produces or consumes values we do not follow.
                value = None if name not in ("STOP", "FRAME", "PROTO", "PERSID") else _NO_VALUE
            if value is not _NO_VALUE:
                if (
                    isinstance(value, tuple)
                    and value[:1] == ("global",)
                    and value[1:] == _REBUILD_TENSOR
                ):
                    scan.tensor_count += 1
                frames[-1].append(value)
                last = value
    except (ValueError, EOFError) as exc:
        raise TorchCheckpointError(f"data.pkl is not a valid pickle ({exc})", path=path) from None
    return scan
