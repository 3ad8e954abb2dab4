"""Describe a torch checkpoint (``.bin``/``.pt``/``.pth``) without unpickling it.

Pickles execute code when loaded, so inspection never calls ``pickle.load`` or
``torch.load``: it reads the zip directory of the archive format, and walks the
``data.pkl`` opcode stream with :func:`pickletools.genops`, which only decodes
opcodes. A tiny symbolic pass over those opcodes (:mod:`loadscope.loaders.torch_pickle`)
counts tensor rebuilds and pairs each storage record ``('storage', <type>, key,
location, numel)`` with the size of its ``data/<key>`` entry, so the dtype mix comes
out exactly. This module owns reading the file: its format, the zip directory and the
claims of its entries, and the bounded prefix of a legacy pickle.

The same pass lists every global the pickle imports; any that
``torch.load(weights_only=True)`` would refuse (``os.system``, ``builtins.exec``,
a class) is in :attr:`TorchCheckpointInfo.unsafe_globals`: such a pickle would run
code, not rebuild tensors. Legacy (non-zip) pickles are walked the same way, from
a prefix of the file bounded by its size and :data:`MAX_PICKLE_SCAN_BYTES`.

May import: ``loadscope.base`` and ``loadscope.loaders`` (errors, sniff, torch_pickle).
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from loadscope.base.safeio import open_regular, pread_exact
from loadscope.loaders.errors import EmptyFile, TorchCheckpointError
from loadscope.loaders.sniff import SNIFF_BYTES, reject_impostor
from loadscope.loaders.torch_pickle import (
    _STORAGE_TORCH_DTYPES,
    PickleScan,
    ScanWindowEnded,
    dtype_label,
    safe_global,
    scan_pickle,
)

# The dtype names stay importable from here (the tests hold the table to torch's own).
__all__ = [
    "MAX_PICKLE_SCAN_BYTES",
    "_STORAGE_TORCH_DTYPES",
    "TorchCheckpointInfo",
    "TorchFormat",
    "dtype_label",
    "read_torch_info",
    "safe_global",
]

TorchFormat = Literal["zip", "legacy"]

#: data.pkl bigger than this is not scanned (a state dict's pickle is KiB to a few MiB).
MAX_PICKLE_SCAN_BYTES = 64 << 20
#: The first pickle of a legacy torch.save file is this number.
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
#: Pickles in a legacy file before its raw storage bytes: magic, protocol, sys info,
#: the object, the storage keys.
_LEGACY_PICKLES = 5
_FIRST_SCAN_BYTES = 1 << 20
try:
    from lzma import LZMAError
except ImportError:  # a Python built without lzma: zipfile cannot inflate LZMA entries then
    _LZMA_ERRORS: tuple[type[Exception], ...] = ()
else:
    _LZMA_ERRORS = (LZMAError,)
#: What zipfile raises for archives that are corrupt, encrypted or use an unknown method
#: (bz2 raises OSError for corrupt data; lzma its own LZMAError).
_ZIP_ERRORS: tuple[type[Exception], ...] = (
    zipfile.BadZipFile,
    OSError,
    ValueError,
    EOFError,
    RuntimeError,
    NotImplementedError,
    zlib.error,
    *_LZMA_ERRORS,
)


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
    #: Globals the pickle imports that a weights-only load refuses ("posix.system"):
    #: loading it would run them. Empty for a plain state dict.
    unsafe_globals: tuple[str, ...] = ()


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
            return _legacy_info(fh.fileno(), spath, file_size)
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
    except _ZIP_ERRORS as exc:
        raise TorchCheckpointError(f"zip archive is corrupt ({exc})", path=path) from None
    with archive:
        infos = archive.infolist()
        pkl = _pickle_entry(infos, path)
        prefix = pkl.filename[: -len("data.pkl")]
        storage_sizes = {
            i.filename[len(prefix) + len("data/") :]: i.file_size
            for i in infos
            if i.filename.startswith(prefix + "data/") and not i.is_dir()
        }
        _check_pickle_claims(pkl, path, file_size)
        notes: list[str] = []
        tensor_count: int | None = None
        dtype_bytes: Counter[str] = Counter()
        unsafe: tuple[str, ...] = ()
        if pkl.file_size > MAX_PICKLE_SCAN_BYTES:
            notes.append(f"data.pkl is {pkl.file_size} bytes; tensors not counted")
        else:
            scan = PickleScan()
            scan_pickle(io.BytesIO(_read_pickle(archive, pkl, path)), path, scan)
            unsafe = tuple(scan.unsafe_globals)
            tensor_count = scan.tensor_count
            dtype_bytes = _dtype_bytes(scan, storage_sizes, path)
        return TorchCheckpointInfo(
            path=path,
            file_size=file_size,
            format="zip",
            tensor_count=tensor_count,
            storage_count=len(storage_sizes),
            dtype_bytes=dict(dtype_bytes),
            notes=tuple(notes),
            unsafe_globals=unsafe,
        )


def _pickle_entry(infos: list[zipfile.ZipInfo], path: str) -> zipfile.ZipInfo:
    """The archive's one ``data.pkl`` (at the top or in the archive's folder)."""
    pickles = [i for i in infos if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"]
    if len(pickles) != 1:
        raise TorchCheckpointError(
            f"zip archive holds {len(pickles)} data.pkl entries, expected 1"
            " (a zip, but not a torch checkpoint)",
            path=path,
        )
    return pickles[0]


def _check_pickle_claims(pkl: zipfile.ZipInfo, path: str, file_size: int) -> None:
    """Refuse a ``data.pkl`` that torch could not read or whose sizes cannot be true."""
    if pkl.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        # torch reads only these; an LZMA stream would also make lzma allocate the
        # dictionary its header claims (up to 4 GiB) before a byte is inflated.
        raise TorchCheckpointError(
            f"data.pkl is compressed with zip method {pkl.compress_type}; torch reads only"
            " stored or deflated entries (not a torch checkpoint, or corrupt)",
            path=path,
        )
    # Sizes are claims: a stored entry is as long as it says, and deflate shrinks at
    # most ~1032x. A lie (to skip the scan below, say) is corruption, not a big pickle.
    most = pkl.compress_size * (1 if pkl.compress_type == zipfile.ZIP_STORED else 1032) + 64
    if pkl.compress_size > file_size or pkl.file_size > most:
        raise TorchCheckpointError(
            f"data.pkl claims {pkl.file_size} bytes stored in {pkl.compress_size}, in a"
            f" {file_size}-byte file: impossible (a corrupt or hostile archive)",
            path=path,
        )


def _read_pickle(archive: zipfile.ZipFile, pkl: zipfile.ZipInfo, path: str) -> bytes:
    """The bytes of ``data.pkl``, never more than :data:`MAX_PICKLE_SCAN_BYTES`."""
    try:
        # Read at most the cap, whatever the entry claims (a deflate bomb stops here).
        with archive.open(pkl) as entry:
            data = entry.read(MAX_PICKLE_SCAN_BYTES + 1)
    except _ZIP_ERRORS as exc:
        raise TorchCheckpointError(f"cannot read data.pkl ({exc})", path=path) from None
    if len(data) > MAX_PICKLE_SCAN_BYTES:
        raise TorchCheckpointError(
            f"data.pkl inflates past its declared {pkl.file_size} bytes"
            " (a corrupt or hostile archive)",
            path=path,
        )
    return data


def _dtype_bytes(scan: PickleScan, storage_sizes: dict[str, int], path: str) -> Counter[str]:
    """The bytes of each dtype: every storage the pickle names, sized by its zip entry."""
    dtype_bytes: Counter[str] = Counter()
    for key, dtype in scan.storage_dtypes.items():
        dtype_bytes[dtype] += storage_sizes.get(key, 0)
    missing = sorted(set(scan.storage_dtypes) - set(storage_sizes))
    if missing:
        raise TorchCheckpointError(
            f"pickle refers to {len(missing)} storage(s) missing from the archive"
            f" (first: data/{missing[0]}); truncated or corrupt",
            path=path,
        )
    return dtype_bytes


def _legacy_info(fd: int, path: str, file_size: int) -> TorchCheckpointInfo:
    """A legacy (non-zip) pickle: walk its leading pickles for what they import.

    The pickles come first and the raw storages after them, so a prefix is read,
    1 MiB and then larger, never more than the file or :data:`MAX_PICKLE_SCAN_BYTES`.
    """
    want = min(file_size, _FIRST_SCAN_BYTES)
    cap = min(file_size, MAX_PICKLE_SCAN_BYTES)
    while True:
        data = pread_exact(fd, want, 0, path=path)
        scan = PickleScan()
        stream = io.BytesIO(data)
        partial = want < file_size
        try:
            first = scan_pickle(stream, path, scan, partial_ok=partial, what="")
            if first == _LEGACY_MAGIC:
                for _ in range(_LEGACY_PICKLES - 1):
                    scan_pickle(stream, path, scan, partial_ok=partial, what="")
            note = "legacy (pre-1.6, non-zip) torch format: tensors not counted (imports checked)"
            break
        except ScanWindowEnded:
            if want >= cap:
                note = (
                    f"legacy (pre-1.6, non-zip) torch format: its pickle is larger than"
                    f" {MAX_PICKLE_SCAN_BYTES} bytes; contents are not scanned"
                )
                break
            want = min(cap, want * 8)
    return TorchCheckpointInfo(
        path=path,
        file_size=file_size,
        format="legacy",
        notes=(note,),
        unsafe_globals=tuple(scan.unsafe_globals),
    )
