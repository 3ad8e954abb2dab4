"""Describe a torch checkpoint (``.bin``/``.pt``/``.pth``) without unpickling it.

Pickles execute code when loaded, so inspection never calls ``pickle.load`` or
``torch.load``: it reads the zip directory of the archive format, and walks the
``data.pkl`` opcode stream with :func:`pickletools.genops`, which only decodes
opcodes. A tiny symbolic pass over those opcodes counts tensor rebuilds and
pairs each storage record ``('storage', <type>, key, location, numel)`` with
the size of its ``data/<key>`` entry, so the dtype mix comes out exactly.

The same pass lists every global the pickle imports; any that
``torch.load(weights_only=True)`` would refuse (``os.system``, ``builtins.exec``,
a class) is in :attr:`TorchCheckpointInfo.unsafe_globals`: such a pickle would run
code, not rebuild tensors. Legacy (non-zip) pickles are walked the same way, from
a prefix of the file bounded by its size and :data:`MAX_PICKLE_SCAN_BYTES`.
"""

from __future__ import annotations

import io
import os
import pickletools
import re
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from loadscope.base.safeio import open_regular, pread_exact
from loadscope.loaders.errors import EmptyFile, TorchCheckpointError
from loadscope.loaders.sniff import SNIFF_BYTES, reject_impostor

TorchFormat = Literal["zip", "legacy"]

#: data.pkl bigger than this is not scanned (a state dict's pickle is KiB to a few MiB).
MAX_PICKLE_SCAN_BYTES = 64 << 20

#: Typed storage class (``_rebuild_tensor_v2``, ``_rebuild_qtensor``) -> its ``torch.<dtype>``,
#: as torch's ``torch.storage._dtype_to_storage_type_map()`` (the test holds it to torch's).
#: Every other dtype torch saves through ``_rebuild_tensor_v3``, whose ``torch.<dtype>``
#: argument names it directly: those need no table (see :func:`dtype_label`).
_STORAGE_TORCH_DTYPES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "BFloat16Storage": "bfloat16",
    "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64",
    "QInt8Storage": "qint8",
    "QInt32Storage": "qint32",
    "QUInt8Storage": "quint8",
    "QUInt4x2Storage": "quint4x2",
    "QUInt2x4Storage": "quint2x4",
}
#: Where safetensors' name for a torch dtype drops part of torch's (``fn``, ``fnu``, ``_x2``).
_DTYPE_LABEL_EXCEPTIONS = {
    "bool": "BOOL",
    "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e8m0fnu": "F8_E8M0",
    "float4_e2m1fn_x2": "F4",
}
_DTYPE_KINDS = {"float": "F", "int": "I", "uint": "U", "complex": "C"}
_DTYPE_NAME = re.compile(r"(float|int|uint|complex)([0-9]+)(_[a-z0-9_]+)?")


def dtype_label(torch_name: str) -> str:
    """The name inspect reports for ``torch.<torch_name>``: safetensors' where it has one
    (``float32`` -> ``F32``, ``float8_e4m3fn`` -> ``F8_E4M3``), else by the same rule
    (``complex32`` -> ``C32``) or upper-cased (``bits8`` -> ``BITS8``, ``qint8`` -> ``QINT8``)."""
    known = _DTYPE_LABEL_EXCEPTIONS.get(torch_name)
    if known is not None:
        return known
    m = _DTYPE_NAME.fullmatch(torch_name)
    if m is not None:
        return _DTYPE_KINDS[m[1]] + m[2] + (m[3] or "").upper()
    return torch_name.upper()


#: The rebuild functions torch writes for one tensor: v2 with a typed storage, v3 with an
#: untyped one and the dtype as an argument (float8, uint16/32/64, float4, complex32,
#: bits*), a quantized, sparse or nested tensor (whose scales, indices or sizes are
#: tensors built inside its arguments: parts of the one entry), a meta tensor, ...
_REBUILD_TENSOR = {
    ("torch._utils", name)
    for name in (
        "_rebuild_tensor",
        "_rebuild_tensor_v2",
        "_rebuild_tensor_v3",
        "_rebuild_qtensor",
        "_rebuild_sparse_tensor",
        "_rebuild_nested_tensor",
        "_rebuild_meta_tensor_no_storage",
        "_rebuild_wrapper_subclass",
        "_rebuild_device_tensor_from_cpu_tensor",
        "_rebuild_device_tensor_from_numpy",
        "_rebuild_xla_tensor",
    )
}
#: Rebuilds that wrap a tensor built just before (a Parameter): one entry, not two.
_REBUILD_WRAPPERS = {
    ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_parameter_with_state"),
    ("torch._tensor", "_rebuild_from_type_v2"),
}
#: Values walked, at most, for the tensors nested in one rebuild's arguments.
_MAX_ARG_WALK = 4096

#: What ``torch.load(weights_only=True)`` lets a pickle import by default (torch's
#: ``_weights_only_unpickler._get_allowed_globals``), as (module, name) plus the rules
#: in :func:`safe_global` for the storage, tensor, dtype and rebuild families.
_SAFE_GLOBALS = frozenset(
    {
        ("collections", "OrderedDict"),
        ("collections", "Counter"),
        ("torch.nn.parameter", "Parameter"),
        ("torch.serialization", "_get_layout"),
        ("torch", "Size"),
        ("torch", "Tensor"),
        ("torch", "device"),
        ("_codecs", "encode"),
        ("builtins", "bytearray"),
        ("builtins", "set"),
        ("builtins", "complex"),
        ("torch._tensor", "_rebuild_from_type_v2"),
        ("torch.storage", "TypedStorage"),
        ("torch.storage", "UntypedStorage"),
    }
)
#: Dtypes and quantization schemes, as ``torch.<name>``.
_TORCH_VALUE_NAMES = (
    "bfloat16 bool complex32 complex64 complex128 float16 float32 float64 float4_e2m1fn_x2"
    " float8_e4m3fn float8_e4m3fnuz float8_e5m2 float8_e5m2fnuz float8_e8m0fnu"
    " int8 int16 int32 int64 uint8 uint16 uint32 uint64 qint8 qint32 quint8 quint2x4 quint4x2"
    " bits8 bits16 bits1x8 bits2x4 bits4x2"
    " int1 int2 int3 int4 int5 int6 int7 uint1 uint2 uint3 uint4 uint5 uint6 uint7"
    " per_tensor_affine per_tensor_symmetric per_channel_affine per_channel_symmetric"
    " per_channel_affine_float_qparams"
)
_TORCH_VALUES = frozenset(_TORCH_VALUE_NAMES.split())
_TENSOR_CLASS_MODULES = ("torch", "torch.cuda", "torch.sparse", "torch.cuda.sparse")
#: Python 2 names that protocol-2 pickles use (as pickle's own compat mapping).
_PY2_MODULES = {"__builtin__": "builtins", "copy_reg": "copyreg"}
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


def safe_global(module: str, name: str) -> bool:
    """Whether a weights-only load lets a pickle import ``module.name`` (no user additions)."""
    module = _PY2_MODULES.get(module, module)
    if (module, name) in _SAFE_GLOBALS:
        return True
    if module == "torch._utils" and name.startswith("_rebuild_"):
        return True
    if module in _TENSOR_CLASS_MODULES and name.isidentifier() and name[:1].isupper():
        return name.endswith(("Storage", "Tensor"))
    return module == "torch" and name in _TORCH_VALUES


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
        unsafe: tuple[str, ...] = ()
        pkl = pickles[0]
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
        if pickles[0].file_size > MAX_PICKLE_SCAN_BYTES:
            notes.append(f"data.pkl is {pickles[0].file_size} bytes; tensors not counted")
        else:
            try:
                # Read at most the cap, whatever the entry claims (a deflate bomb stops here).
                with archive.open(pickles[0]) as entry:
                    data = entry.read(MAX_PICKLE_SCAN_BYTES + 1)
            except _ZIP_ERRORS as exc:
                raise TorchCheckpointError(f"cannot read data.pkl ({exc})", path=path) from None
            if len(data) > MAX_PICKLE_SCAN_BYTES:
                raise TorchCheckpointError(
                    f"data.pkl inflates past its declared {pickles[0].file_size} bytes"
                    " (a corrupt or hostile archive)",
                    path=path,
                )
            scan = _PickleScan()
            _scan_pickle(io.BytesIO(data), path, scan)
            unsafe = tuple(scan.unsafe_globals)
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
            unsafe_globals=unsafe,
        )


def _legacy_info(fd: int, path: str, file_size: int) -> TorchCheckpointInfo:
    """A legacy (non-zip) pickle: walk its leading pickles for what they import.

    The pickles come first and the raw storages after them, so a prefix is read,
    1 MiB and then larger, never more than the file or :data:`MAX_PICKLE_SCAN_BYTES`.
    """
    want = min(file_size, _FIRST_SCAN_BYTES)
    cap = min(file_size, MAX_PICKLE_SCAN_BYTES)
    while True:
        data = pread_exact(fd, want, 0, path=path)
        scan = _PickleScan()
        stream = io.BytesIO(data)
        partial = want < file_size
        try:
            first = _scan_pickle(stream, path, scan, partial_ok=partial, what="")
            if first == _LEGACY_MAGIC:
                for _ in range(_LEGACY_PICKLES - 1):
                    _scan_pickle(stream, path, scan, partial_ok=partial, what="")
            note = "legacy (pre-1.6, non-zip) torch format: tensors not counted (imports checked)"
            break
        except _ScanWindowEnded:
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


class _NoValue:
    """Marks opcodes that push nothing we track (PUT, MARK, ...)."""


_NO_VALUE = _NoValue()


class _Tensor:
    """A tensor the pickle rebuilds (no pickle value can pose as one)."""


@dataclass
class _PickleScan:
    tensor_count: int = 0
    storage_dtypes: dict[str, str] = field(default_factory=dict)
    #: "module.name" of each import a weights-only load refuses, first seen first.
    unsafe_globals: list[str] = field(default_factory=list)

    def imported(self, module: object, name: object) -> None:
        if isinstance(module, str) and isinstance(name, str):
            if safe_global(module, name):
                return
            what = f"{module}.{name}"
            if not what.isprintable():  # a hostile name must not break the one-line message
                what = repr(what)
        else:
            what = "a global named by computed values"
        if what not in self.unsafe_globals:
            self.unsafe_globals.append(what)


class _ScanWindowEnded(Exception):
    """The bytes read so far end inside a pickle: read more of the file."""


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


def _note_untyped_dtype(scan: _PickleScan, items: list[Any]) -> None:
    """``_rebuild_tensor_v3``'s arguments: (storage, offset, size, stride, requires_grad,
    hooks, dtype, ...). Its storage is untyped; the dtype argument names its bytes."""
    first = items[0] if items else None
    if not (isinstance(first, tuple) and first[:1] == ("storage",)):
        return
    key = first[1]
    if scan.storage_dtypes.get(key) != "UntypedStorage":
        return
    for item in items[1:]:
        if isinstance(item, tuple) and item[:2] == ("global", "torch"):
            name = item[2]
            # A dtype's name (not a qscheme's, nor something hostile to print).
            if (
                isinstance(name, str)
                and len(name) <= 32
                and name.isascii()
                and name.isidentifier()
                and name.islower()
                and not name.startswith("per_")
            ):
                scan.storage_dtypes[key] = dtype_label(name)
                return


def _nested_tensors(args: object) -> int:
    """How many tensors were built inside a rebuild's arguments (a quantized tensor's
    scales, a sparse one's indices and values): parts of one entry, counted already."""
    count = 0
    seen: set[int] = set()
    todo = [args]
    for _ in range(_MAX_ARG_WALK):
        if not todo:
            break
        value = todo.pop()
        if isinstance(value, _Tensor):
            count += 1
        elif (
            isinstance(value, tuple) and id(value) not in seen
        ):  # memo GETs can share a tuple many times: walk it once
            seen.add(id(value))
            todo.extend(value)
    return count


def _scan_pickle(
    stream: io.BytesIO,
    path: str,
    scan: _PickleScan,
    *,
    partial_ok: bool = False,
    what: str = "data.pkl ",
) -> Any:
    """Symbolically follow one pickle of ``stream`` (up to its STOP) into ``scan``: the
    storages, the tensors and every import; returns the value it would produce when
    that is an int or a string we tracked (else None).

    Values we track: strings, ints, globals, storages, tensors and tuples of them;
    everything else is None.
    Nothing is ever constructed or called. With ``partial_ok``, running out of bytes
    raises :class:`_ScanWindowEnded` (the caller reads more) instead of an error.
    """
    memo: dict[int, Any] = {}
    frames: list[list[Any]] = [[]]
    last: Any = None
    try:
        for opcode, arg, _pos in pickletools.genops(stream):
            name = opcode.name
            value: Any = _NO_VALUE
            if name in _STRING_OPS:
                value = arg.decode("latin-1") if isinstance(arg, bytes) else arg
            elif name in _INT_OPS:
                value = arg
            elif name == "GLOBAL":
                module, _, attr = str(arg).partition(" ")
                scan.imported(module, attr)
                value = ("global", module, attr)
            elif name == "STACK_GLOBAL":
                cur = frames[-1]
                stack_attr = cur.pop() if cur else None
                stack_module = cur.pop() if cur else None
                scan.imported(stack_module, stack_attr)
                value = ("global", stack_module, stack_attr)
            elif name == "INST":
                module, _, attr = str(arg).partition(" ")
                scan.imported(module, attr)
                if len(frames) > 1:
                    frames.pop()
                value = None
            elif name in ("EXT1", "EXT2", "EXT4"):
                scan.imported(None, None)
                value = None
            elif name in _PUT_OPS:
                memo[int(str(arg))] = last
            elif name == "MEMOIZE":
                memo[len(memo)] = last
            elif name in _GET_OPS:
                value = memo.get(int(str(arg)))
                if isinstance(value, _Tensor):
                    scan.tensor_count += 1  # the same tensor again: torch.load's entry too
            elif name == "REDUCE":
                cur = frames[-1]
                args = cur.pop() if cur else None
                func = cur.pop() if cur else None
                value = None
                if isinstance(func, tuple) and func[:1] == ("global",):
                    if func[1:] in _REBUILD_TENSOR:
                        # (never below 0: a hostile pickle may GET a part many times)
                        scan.tensor_count = max(0, scan.tensor_count + 1 - _nested_tensors(args))
                        value = _Tensor()
                    elif func[1:] in _REBUILD_WRAPPERS and isinstance(args, tuple) and args:
                        inner = args[0]
                        if isinstance(inner, _Tensor):
                            value = inner  # a Parameter is its tensor's one entry
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
                if name == "TUPLE":
                    _note_untyped_dtype(scan, items)
            elif name == "BINPERSID":
                pid = frames[-1].pop() if frames[-1] else last
                if isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage":
                    storage_type = pid[1]
                    type_name = storage_type[2] if isinstance(storage_type, tuple) else None
                    torch_name = _STORAGE_TORCH_DTYPES.get(str(type_name))
                    # UntypedStorage (v3) is named by the rebuild's dtype argument later.
                    dtype = str(type_name) if torch_name is None else dtype_label(torch_name)
                    scan.storage_dtypes[str(pid[2])] = dtype
                    value = ("storage", str(pid[2]))
                else:
                    value = None
            else:
                # Any other op produces or consumes values we do not follow.
                value = None if name not in ("STOP", "FRAME", "PROTO", "PERSID") else _NO_VALUE
            if value is not _NO_VALUE:
                frames[-1].append(value)
                last = value
    except (ValueError, EOFError, DeprecationWarning) as exc:
        # pickletools warns of a bad escape in a STRING opcode; under -W error (or
        # PYTHONWARNINGS=error) that warning is raised here, and it is a corrupt pickle too.
        if partial_ok and not isinstance(exc, DeprecationWarning):
            raise _ScanWindowEnded from None
        raise TorchCheckpointError(f"{what}is not a valid pickle ({exc})", path=path) from None
    return last if isinstance(last, int | str) else None
