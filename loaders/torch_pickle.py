"""The symbolic walk of a torch pickle's opcodes: what it would rebuild and import.

Owns the one pass inspection makes over a pickle (``data.pkl`` of a torch archive, or
the leading pickles of a legacy file) without ever unpickling it: :func:`scan_pickle`
decodes opcodes with :func:`pickletools.genops` and follows them on a small symbolic
stack of strings, ints, globals, storages, tensors and tuples of them. Nothing is ever
constructed, imported or called; there is no ``pickle.load`` and no ``torch.load`` here.
The walk counts tensor rebuilds, names each storage's dtype (:func:`dtype_label`) and
lists every global that ``torch.load(weights_only=True)`` would refuse
(:func:`safe_global`). Reading the file and its zip directory belongs to
:mod:`loadscope.loaders.torch_format`.

May import: ``loadscope.loaders.errors``.
"""

from __future__ import annotations

import io
import pickletools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from loadscope.loaders.errors import TorchCheckpointError

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


class _NoValue:
    """Marks opcodes that push nothing we track (PUT, MARK, ...)."""


_NO_VALUE = _NoValue()


class _Tensor:
    """A tensor the pickle rebuilds (no pickle value can pose as one)."""


@dataclass
class PickleScan:
    """What the walk of one or more pickles found: tensors, storages' dtypes, imports."""

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


class ScanWindowEnded(Exception):
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


def _note_untyped_dtype(scan: PickleScan, items: list[Any]) -> None:
    """``_rebuild_tensor_v3``'s arguments: (storage, offset, size, stride, requires_grad,
    hooks, dtype, ...). Its storage is untyped; the dtype argument names its bytes."""
    first = items[0] if items else None
    # (a hostile pickle's tuples may be of any length: every index is checked)
    if not (isinstance(first, tuple) and len(first) >= 2 and first[0] == "storage"):
        return
    key = first[1]
    if scan.storage_dtypes.get(key) != "UntypedStorage":
        return
    for item in items[1:]:
        if isinstance(item, tuple) and len(item) >= 3 and item[:2] == ("global", "torch"):
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


@dataclass
class _Machine:
    """The symbolic stack while one pickle is followed; nothing on it is ever built or called."""

    scan: PickleScan
    memo: dict[int, Any] = field(default_factory=dict)
    #: The stack, cut at each MARK: the last list is the frame opcodes work on.
    frames: list[list[Any]] = field(default_factory=lambda: [[]])
    #: The value pushed last (what PUT and MEMOIZE store, and what a pickle returns).
    last: Any = None

    def pop(self) -> Any:
        """The top of the current frame, or None when that frame is empty."""
        cur = self.frames[-1]
        return cur.pop() if cur else None


#: What one opcode does to the machine, given its name and argument: returns the value
#: it pushes, or :data:`_NO_VALUE` when it pushes nothing we track.
_Op: TypeAlias = Callable[[_Machine, str, Any], Any]


def _string(_m: _Machine, _name: str, arg: Any) -> Any:
    return arg.decode("latin-1") if isinstance(arg, bytes) else arg


def _int(_m: _Machine, _name: str, arg: Any) -> Any:
    return arg


def _global(m: _Machine, _name: str, arg: Any) -> Any:
    module, _, attr = str(arg).partition(" ")
    m.scan.imported(module, attr)
    return ("global", module, attr)


def _stack_global(m: _Machine, _name: str, _arg: Any) -> Any:
    attr = m.pop()
    module = m.pop()
    m.scan.imported(module, attr)
    return ("global", module, attr)


def _inst(m: _Machine, _name: str, arg: Any) -> Any:
    module, _, attr = str(arg).partition(" ")
    m.scan.imported(module, attr)
    if len(m.frames) > 1:
        m.frames.pop()
    return None


def _extension(m: _Machine, _name: str, _arg: Any) -> Any:
    """EXT1/2/4 import through the copyreg extension registry: a global we cannot name."""
    m.scan.imported(None, None)
    return None


def _put(m: _Machine, _name: str, arg: Any) -> Any:
    m.memo[int(str(arg))] = m.last
    return _NO_VALUE


def _memoize(m: _Machine, _name: str, _arg: Any) -> Any:
    m.memo[len(m.memo)] = m.last
    return _NO_VALUE


def _get(m: _Machine, _name: str, arg: Any) -> Any:
    value = m.memo.get(int(str(arg)))
    if isinstance(value, _Tensor):
        m.scan.tensor_count += 1  # the same tensor again: torch.load's entry too
    return value


def _reduce(m: _Machine, _name: str, _arg: Any) -> Any:
    """A call: a tensor when it is a rebuild (or a Parameter wrapping one), else None."""
    args = m.pop()
    func = m.pop()
    if not (isinstance(func, tuple) and func[:1] == ("global",)):
        return None
    if func[1:] in _REBUILD_TENSOR:
        # (never below 0: a hostile pickle may GET a part many times)
        m.scan.tensor_count = max(0, m.scan.tensor_count + 1 - _nested_tensors(args))
        return _Tensor()
    if func[1:] in _REBUILD_WRAPPERS and isinstance(args, tuple) and args:
        inner = args[0]
        if isinstance(inner, _Tensor):
            return inner  # a Parameter is its tensor's one entry
    return None


def _mark(m: _Machine, _name: str, _arg: Any) -> Any:
    m.frames.append([])
    return _NO_VALUE


def _small_tuple(m: _Machine, name: str, _arg: Any) -> Any:
    """TUPLE1, TUPLE2, TUPLE3: the top one, two or three values as a tuple."""
    n = int(name[-1])
    cur = m.frames[-1]
    items = cur[-n:] if len(cur) >= n else [None] * n
    del cur[-n:]
    return tuple(items)


def _empty_tuple(_m: _Machine, _name: str, _arg: Any) -> Any:
    return ()


def _consume_mark(m: _Machine, name: str, _arg: Any) -> Any:
    """An opcode that takes everything since the last MARK; only TUPLE's result is tracked."""
    items = m.frames.pop() if len(m.frames) > 1 else []
    if name != "TUPLE":
        return None
    value = tuple(items)
    _note_untyped_dtype(m.scan, items)
    return value


def _persistent_id(m: _Machine, _name: str, _arg: Any) -> Any:
    """BINPERSID of a ``('storage', <type>, key, location, numel)`` record: a storage."""
    cur = m.frames[-1]
    pid = cur.pop() if cur else m.last
    if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"):
        return None
    storage_type = pid[1]
    short = not isinstance(storage_type, tuple) or len(storage_type) < 3
    type_name = None if short else storage_type[2]
    torch_name = _STORAGE_TORCH_DTYPES.get(str(type_name))
    # UntypedStorage (v3) is named by the rebuild's dtype argument later.
    dtype = str(type_name) if torch_name is None else dtype_label(torch_name)
    m.scan.storage_dtypes[str(pid[2])] = dtype
    return ("storage", str(pid[2]))


def _untracked(_m: _Machine, name: str, _arg: Any) -> Any:
    """Any other op produces or consumes values we do not follow."""
    return None if name not in ("STOP", "FRAME", "PROTO", "PERSID") else _NO_VALUE


#: The opcodes followed, by name; every other one is :func:`_untracked`.
_OPS: dict[str, _Op] = {
    **dict.fromkeys(_STRING_OPS, _string),
    **dict.fromkeys(_INT_OPS, _int),
    "GLOBAL": _global,
    "STACK_GLOBAL": _stack_global,
    **dict.fromkeys(("EXT1", "EXT2", "EXT4"), _extension),
    **dict.fromkeys(_PUT_OPS, _put),
    "MEMOIZE": _memoize,
    **dict.fromkeys(_GET_OPS, _get),
    "REDUCE": _reduce,
    "MARK": _mark,
    **dict.fromkeys(("TUPLE1", "TUPLE2", "TUPLE3"), _small_tuple),
    "EMPTY_TUPLE": _empty_tuple,
    # INST takes its mark too, but it also imports: its own step.
    **dict.fromkeys(_MARK_CONSUMERS - {"INST"}, _consume_mark),
    "INST": _inst,
    "BINPERSID": _persistent_id,
}


def scan_pickle(
    stream: io.BytesIO,
    path: str,
    scan: PickleScan,
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
    raises :class:`ScanWindowEnded` (the caller reads more) instead of an error.
    """
    machine = _Machine(scan)
    try:
        for opcode, arg, _pos in pickletools.genops(stream):
            value = _OPS.get(opcode.name, _untracked)(machine, opcode.name, arg)
            if value is not _NO_VALUE:
                machine.frames[-1].append(value)
                machine.last = value
    except (ValueError, EOFError, DeprecationWarning) as exc:
        # pickletools warns of a bad escape in a STRING opcode; under -W error (or
        # PYTHONWARNINGS=error) that warning is raised here, and it is a corrupt pickle too.
        if partial_ok and not isinstance(exc, DeprecationWarning):
            raise ScanWindowEnded from None
        raise TorchCheckpointError(f"{what}is not a valid pickle ({exc})", path=path) from None
    last = machine.last
    return last if isinstance(last, int | str) else None
