"""Fuzzing the readers of untrusted input (issue 10).

The safetensors header parser, the torch checkpoint sniffer (zip directory and pickle
opcodes), the index resolver and the target-spec parser all read bytes or directory
layouts that users download from strangers. Whatever they get, the contract is the same:
return a self-consistent result, or raise a :class:`~loadscope.base.errors.LoadscopeError`
with a one-line message. Never another exception type, never a hang, never an
allocation sized by a number the file claims, and never a pickle executed.

The normal suite runs a fixed, derandomized number of examples per test (seconds in
all). For a longer hunt, set ``LOADSCOPE_FUZZ_EXAMPLES`` (examples per test; it also
switches to fresh random seeds and keeps failures in the hypothesis database)::

    LOADSCOPE_FUZZ_EXAMPLES=5000 .venv/bin/pytest tests/unit/test_fuzz.py -q

The coverage-guided atheris harnesses are in ``fuzz/`` (see ``fuzz/README.md``). Every
crash either of them found is pinned below as a regression case.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import signal
import stat
import struct
import tracemalloc
import warnings
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loadscope.base.errors import LoadscopeError, PathNotFound, ReadFailed
from loadscope.loaders.dtypes import DTYPE_BITS
from loadscope.loaders.errors import DuplicateTensor, TorchCheckpointError
from loadscope.loaders.safetensors_format import (
    MAX_HEADER_BYTES,
    SafetensorsHeader,
    parse_header,
    read_header,
)
from loadscope.loaders.torch_format import read_torch_info
from loadscope.model.inspection import inspect_target
from loadscope.model.targets import (
    INDEX_NAMES,
    BadTargetSpec,
    InvalidIndex,
    parse_index,
    parse_synthetic,
    resolve,
)

pytestmark = pytest.mark.hardening("fuzz")

Examples = Callable[[int], None]
T = TypeVar("T")

_LONG_RUN = os.environ.get("LOADSCOPE_FUZZ_EXAMPLES", "").strip()


def fuzz_settings(examples: int) -> settings:
    """``examples`` per test in the normal suite (derandomized: CI is reproducible), or
    ``LOADSCOPE_FUZZ_EXAMPLES`` of them with random seeds for a long local hunt."""
    return settings(
        max_examples=int(_LONG_RUN) if _LONG_RUN else examples,
        deadline=None,
        derandomize=not _LONG_RUN,
        database=settings.default.database if _LONG_RUN else None,
        # The fixtures used under @given are a counter and a directory every example
        # overwrites: sharing them across examples is intended.
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


# -- the contract ------------------------------------------------------------------------------


class Hang(BaseException):
    """Raised by the alarm: a BaseException so that no ``except Exception`` can swallow it."""


@contextlib.contextmanager
def no_hang(seconds: float = 10.0) -> Iterator[None]:
    """Fail (instead of hanging the suite) if the body blocks, e.g. on a FIFO."""

    def fire(signum: int, frame: FrameType | None) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def assert_clean_error(exc: LoadscopeError) -> None:
    """The message a user sees: one line, no control characters (names are quoted)."""
    assert exc.message, f"{type(exc).__name__} with an empty message"
    bad = [c for c in exc.message if ord(c) < 32 or ord(c) == 127]
    assert not bad, f"{type(exc).__name__} message has control characters: {exc.message!r}"


def outcome(fn: Callable[[], T]) -> T | LoadscopeError:
    """Run ``fn``: its result, or the LoadscopeError it raised (checked); anything else
    propagates and fails the test with the input hypothesis found. Warnings are errors,
    as under ``python -W error``: a warning is an exception some users get."""
    try:
        with no_hang(), warnings.catch_warnings():
            warnings.simplefilter("error")
            return fn()
    except LoadscopeError as exc:
        assert_clean_error(exc)
        return exc


@contextlib.contextmanager
def bounded_memory(file_size: int) -> Iterator[None]:
    """Fail if the body allocates more than a small multiple of the file's real size: a
    reader that trusted a size claimed inside the file (a header length, a zip entry's
    size) would allocate that instead. Python allocations only, via tracemalloc."""
    if tracemalloc.is_tracing():  # someone else is measuring: do not disturb them
        yield
        return
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 64 * file_size + (2 << 20), f"{peak} bytes allocated for a {file_size}-byte file"


def check_header(header: SafetensorsHeader, file_size: int, raw_len: int) -> None:
    """A parse that succeeded describes the file consistently."""
    assert header.file_size == file_size
    assert header.header_bytes == raw_len
    assert header.data_offset + header.data_bytes == file_size
    expected = 0
    names = set()
    for t in header.tensors:
        assert t.dtype in DTYPE_BITS
        assert all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in t.shape)
        assert t.begin == expected, "tensors must tile the data section in order"
        assert t.end >= t.begin
        assert t.nbytes * 8 == math.prod(t.shape) * DTYPE_BITS[t.dtype]
        assert t.name not in names and t.name != "__metadata__"
        names.add(t.name)
        expected = t.end
    assert expected == header.data_bytes
    if header.metadata is not None:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in header.metadata.items())
    list(header.unaligned())  # must not raise


# -- strategies: JSON-ish values ---------------------------------------------------------------

ODD_INTS = (
    st.sampled_from(
        [
            0,
            1,
            -1,
            2,
            7,
            2**31,
            2**32,
            2**53 + 1,
            2**63 - 1,
            2**63,
            2**64 - 1,
            2**64,
            10**30,
            -(2**63),
        ]
    )
    | st.integers()
)
SCALARS = (
    st.none()
    | st.booleans()
    | ODD_INTS
    | st.floats()  # NaN and infinities serialize as NaN/Infinity: not JSON, must be refused
    | st.text(max_size=8)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)
# Lone surrogates, NUL, controls, astral characters: whatever a JSON string can hold.
ODD_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=12)

DTYPES = sorted(DTYPE_BITS)
ODD_DTYPES = (
    st.sampled_from(DTYPES)
    | st.sampled_from(
        [
            "f32",
            "F32 ",
            " F32",
            "",
            "F8",
            "INT8",
            "float32",
            "F32\x00",
            "\uff26\uff13\uff12",
            "F4\n",
        ]
    )
    | JSON_VALUES
)
ODD_SHAPES = (
    st.lists(ODD_INTS, max_size=6)
    | st.lists(st.sampled_from([2**32, 2**33, 2**40, 2**62]), min_size=2, max_size=4)  # overflow
    | st.lists(
        st.booleans() | st.floats() | st.text(max_size=2) | st.lists(ODD_INTS, max_size=2),
        min_size=1,
        max_size=3,
    )
    | JSON_VALUES
)
ODD_OFFSETS = (
    st.lists(ODD_INTS, min_size=0, max_size=3)
    | st.tuples(st.integers(0, 64), st.integers(0, 64)).map(list)
    | st.lists(st.booleans() | st.floats() | st.text(max_size=2), min_size=2, max_size=2)
    | JSON_VALUES
)
TENSOR_NAMES = st.one_of(
    st.sampled_from(["w", "b", "model.embed.weight", "__metadata__", "", " ", "dtype"]),
    ODD_TEXT,
)


def _data_shape(shape: list[int], bits: int) -> list[int]:
    """``shape`` made to hold a whole number of bytes of a ``bits``-wide dtype."""
    return shape if (math.prod(shape) * bits) % 8 == 0 else [*shape, 8]


@st.composite
def valid_headers(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """A header that obeys every rule, and the data size it needs."""
    names = draw(
        st.lists(TENSOR_NAMES.filter(lambda n: n != "__metadata__"), max_size=5, unique=True)
    )
    entries = []
    offset = 0
    for name in names:
        dtype = draw(st.sampled_from(DTYPES))
        shape = _data_shape(draw(st.lists(st.integers(0, 5), max_size=3)), DTYPE_BITS[dtype])
        nbytes = math.prod(shape) * DTYPE_BITS[dtype] // 8
        entries.append(
            (name, {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]})
        )
        offset += nbytes
    order = draw(st.permutations(range(len(entries))))
    doc: dict[str, Any] = {entries[i][0]: entries[i][1] for i in order}
    meta = draw(st.none() | st.dictionaries(st.text(max_size=6), st.text(max_size=8), max_size=3))
    if meta is not None:
        doc["__metadata__"] = meta
    return doc, offset


@st.composite
def mutated_docs(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """A valid header with zero to three fields broken in the ways files break."""
    doc, size = draw(valid_headers())
    tensors = [k for k in doc if k != "__metadata__"]
    for _ in range(draw(st.integers(0, 3))):
        op = draw(
            st.sampled_from(
                [
                    "dtype",
                    "shape",
                    "offsets",
                    "drop",
                    "extra",
                    "entry",
                    "metadata",
                    "shift",
                    "overlap",
                ]
            )
        )
        if op == "metadata":
            doc["__metadata__"] = draw(
                JSON_VALUES | st.dictionaries(st.text(max_size=4), JSON_VALUES, max_size=3)
            )
            continue
        if not tensors:
            continue
        name = draw(st.sampled_from(tensors))
        if not isinstance(doc.get(name), dict):
            continue
        info = dict(doc[name])
        if op == "dtype":
            info["dtype"] = draw(ODD_DTYPES)
        elif op == "shape":
            info["shape"] = draw(ODD_SHAPES)
        elif op == "offsets":
            info["data_offsets"] = draw(ODD_OFFSETS)
        elif op == "drop":
            info.pop(draw(st.sampled_from(["dtype", "shape", "data_offsets"])), None)
        elif op == "extra":
            info[draw(st.text(max_size=6))] = draw(JSON_VALUES)
        elif op == "entry":
            info = draw(JSON_VALUES)
        elif op == "shift" and isinstance(info.get("data_offsets"), list):
            delta = draw(st.integers(-9, 9) | ODD_INTS)
            info["data_offsets"] = [
                o + delta if isinstance(o, int) else o for o in info["data_offsets"]
            ]
        elif op == "overlap" and isinstance(info.get("data_offsets"), list) and len(tensors) > 1:
            other = doc[draw(st.sampled_from(tensors))]
            if isinstance(other, dict):
                info["data_offsets"] = other.get("data_offsets")
        doc[name] = info
    size += draw(st.sampled_from([0, 0, 0, 1, -1, 8]) | st.integers(-64, 64))
    return doc, max(size, 0)


@st.composite
def header_texts(draw: st.DrawFn) -> tuple[bytes, int]:
    """Header bytes (serialized mutated docs, then byte-level damage) and a data size."""
    doc, size = draw(mutated_docs())
    raw = json.dumps(doc, ensure_ascii=draw(st.booleans()), allow_nan=True).encode(
        "utf-8",
        "surrogatepass",  # a lone surrogate becomes invalid UTF-8, as in real files
    )
    if draw(st.booleans()):
        raw += b" " * (-len(raw) % 8)  # safetensors pads its header with spaces
    for _ in range(draw(st.integers(0, 2))):
        raw = draw(damaged(raw, doc))
    return raw, size


def damaged(raw: bytes, doc: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """One kind of textual damage to ``raw``."""
    n = len(raw)
    pos = st.integers(0, n)
    first = next(iter(doc.items()), None)
    options: list[st.SearchStrategy[bytes]] = [
        pos.map(lambda i: raw[:i]),  # truncated at a random point
        st.tuples(pos, st.binary(min_size=1, max_size=4)).map(
            lambda a: raw[: a[0]] + a[1] + raw[a[0] :]
        ),
        st.tuples(
            pos,
            st.sampled_from(
                [
                    b"\xff",
                    b"\xc0\x80",
                    b"\xed\xa0\x80",
                    b"\xf4\x90\x80\x80",
                    b"\xef\xbb\xbf",
                    b"\x00",
                    b"\\",
                    b'"',
                    b"{",
                    b"[",
                    b"}",
                    b",",
                ]
            ),
        ).map(lambda a: raw[: a[0]] + a[1] + raw[a[0] :]),
        st.tuples(pos, pos).map(lambda a: raw[: min(a)] + raw[max(a) :]),  # a slice removed
        st.sampled_from([b"\xef\xbb\xbf", b" ", b"\n", b"\t"]).map(lambda p: p + raw),
        st.sampled_from(
            [
                b"9" * 5000,
                b"1e999",
                b"-1e999",
                b"-0",
                b"NaN",
                b"Infinity",
                b"1.5",
                b"true",
                b"0x10",
                b"01",
                b"1" * 4300,
            ]
        ).map(lambda num: _replace_first_number(raw, num)),
        st.integers(1, 3000).map(lambda d: b'{"a":' + b"[" * d + b"]" * d + b"}"),  # deep nesting
        st.integers(1, 3000).map(lambda d: b'{"a":' + b'{"b":' * d + b"1" + b"}" * d + b"}"),
    ]
    if n:
        options.append(
            st.tuples(st.integers(0, n - 1), st.integers(1, 255)).map(
                lambda a: raw[: a[0]] + bytes([raw[a[0]] ^ a[1]]) + raw[a[0] + 1 :]
            )
        )
    if first is not None and raw.startswith(b"{"):
        # The same key twice, written as raw text (a dict cannot hold it).
        dup = (
            json.dumps(first[0]).encode("utf-8", "surrogatepass")
            + b":"
            + json.dumps(first[1], allow_nan=True).encode("utf-8", "surrogatepass")
        )
        options.append(st.just(b"{" + dup + b"," + raw[1:]))
        options.append(
            st.just(b'{"' + b"x" * 3 + b'":1,"xxx":2' + (b"," + raw[1:] if raw != b"{}" else b"}"))
        )
    return st.one_of(options)


def _replace_first_number(raw: bytes, num: bytes) -> bytes:
    for i, b in enumerate(raw):
        if 0x30 <= b <= 0x39:
            j = i
            while j < len(raw) and 0x30 <= raw[j] <= 0x39:
                j += 1
            return raw[:i] + num + raw[j:]
    return raw


# -- the safetensors header parser -------------------------------------------------------------


@fuzz_settings(300)
@given(raw=st.binary(max_size=256), data_len=st.integers(0, 64))
@example(raw=b"{}", data_len=0)
@example(raw=b'{"__metadata__":null}', data_len=0)
@example(raw=b"\xef\xbb\xbf{}", data_len=0)
@example(raw=b"{" + b'"a":[' * 50_000, data_len=0)  # deep enough to hit the recursion limit
def test_parse_header_arbitrary_bytes(
    raw: bytes, data_len: int, hardening_examples: Examples
) -> None:
    hardening_examples(1)
    _parse_and_check(raw, data_len)


@fuzz_settings(500)
@given(text=header_texts())
def test_parse_header_mutated_headers(
    text: tuple[bytes, int], hardening_examples: Examples
) -> None:
    hardening_examples(1)
    _parse_and_check(*text)


def _parse_and_check(raw: bytes, data_len: int) -> None:
    """``raw`` as a header before ``data_len`` bytes of data: refused in one clean error, or
    parsed into a header that holds together."""
    size = 8 + len(raw) + data_len
    got = outcome(lambda: parse_header(raw, file_size=size, path="fuzz.safetensors"))
    if isinstance(got, SafetensorsHeader):
        check_header(got, size, len(raw))


@fuzz_settings(200)
@given(doc=valid_headers())
def test_parse_header_accepts_every_valid_header(
    doc: tuple[dict[str, Any], int], hardening_examples: Examples
) -> None:
    """The generator of valid headers is right (so the mutations above start from valid)."""
    hardening_examples(1)
    header_doc, data_len = doc
    raw = json.dumps(header_doc).encode()
    header = parse_header(raw, file_size=8 + len(raw) + data_len, path="fuzz.safetensors")
    check_header(header, 8 + len(raw) + data_len, len(raw))
    assert len(header.tensors) == len([k for k in header_doc if k != "__metadata__"])


IMPOSTORS = st.sampled_from(
    [
        b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 12\n",
        b"<!DOCTYPE html><html><body>401</body></html>",
        b"\xef\xbb\xbf \n<html>",
        b"<?xml version='1.0'?><Error/>",
        b"\t\r\n<HEAD>",
        b"PK\x03\x04" + b"\0" * 26,
        b"\x80\x02}q\x00.",
    ]
)


@st.composite
def safetensors_files(draw: st.DrawFn) -> bytes:
    """A whole file: length prefix (right, or mutated independently of the body), header, data."""
    raw, data_len = draw(header_texts())
    length = draw(
        st.sampled_from(
            [len(raw)] * 6
            + [
                0,
                len(raw) + 1,
                len(raw) - 1,
                len(raw) + 8,
                MAX_HEADER_BYTES,
                MAX_HEADER_BYTES + 1,
                2**63,
                2**64 - 1,
            ]
        )
        | st.integers(0, 2**64 - 1)
    )
    blob = struct.pack("<Q", max(length, 0)) + raw + b"\0" * data_len
    cut = draw(st.none() | st.integers(0, len(blob)))
    if cut is not None and draw(st.integers(0, 3)) == 0:
        blob = blob[:cut]
    if draw(st.integers(0, 12)) == 0:
        blob = draw(IMPOSTORS) + blob[draw(st.integers(0, len(blob))) :]
    return blob


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache, so nothing here can consult the real one."""
    hub = tmp_path / "empty-hub"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    return hub


@fuzz_settings(200)
@given(blob=safetensors_files() | st.binary(max_size=64))
@example(blob=struct.pack("<Q", MAX_HEADER_BYTES) + b"{}")
@example(blob=struct.pack("<Q", 2**64 - 1) + b"{}")
@example(blob=b"\x02\x00\x00\x00\x00\x00\x00")
def test_read_header_from_disk(
    blob: bytes, tmp_path: Path, hub_cache: Path, hardening_examples: Examples
) -> None:
    """Through the file: the length prefix, the size checks, the sniffer; memory stays
    bounded by the file's real size whatever the prefix claims."""
    hardening_examples(1)
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(blob)
    with bounded_memory(len(blob)):
        got = outcome(lambda: read_header(path))
    if isinstance(got, SafetensorsHeader):
        check_header(got, len(blob), got.header_bytes)
    # And the whole inspect path on the same file agrees on accepting it.
    report = outcome(lambda: inspect_target(resolve(str(path))))
    if isinstance(got, LoadscopeError):
        assert isinstance(report, LoadscopeError)


# -- torch checkpoints: the zip directory and the pickle opcodes --------------------------------

_CANARY: list[str] = []


def _canary(*args: object) -> None:
    """What a pickle in the inputs below calls if anything ever unpickles it."""
    _CANARY.append("called")


FUZZ_DIR = Path(__file__).resolve().parents[2] / "fuzz"


def _fuzz_module(name: str) -> Any:
    """``fuzz/<name>.py`` imported as a plain module (the harnesses are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_loadscope_{name}", FUZZ_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# torch.save({"a": torch.zeros(4), "b": torch.ones(2, dtype=torch.float16)}): its data.pkl,
# the one the fuzzers' seed corpus is made from.
TORCH_PKL: bytes = _fuzz_module("make_corpus").TORCH_PKL
CANARY_PKLS = [
    b"\x80\x02ctests.unit.test_fuzz\n_canary\n)R.",
    b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x14tests.unit.test_fuzz\x8c\x07_canary\x93)R.",
    b"(ctests.unit.test_fuzz\n_canary\no.",
    b"(itests.unit.test_fuzz\n_canary\n.",
    b"\x80\x02ctests.unit.test_fuzz\n_canary\n}b.",
    b"\x80\x02ctests.unit.test_fuzz\n_canary\nX\x01\x00\x00\x00x\x85Q.",
]
PICKLE_FRAGMENTS = [
    b"\x80\x02",
    b"\x80\x05",
    b"}",
    b"]",
    b")",
    b"(",
    b"t",
    b"u",
    b"e",
    b"a",
    b"s",
    b"R",
    b"b",
    b"Q",
    b"P0\n",
    b"0",
    b"1",
    b"2",
    b"N",
    b"\x88",
    b"\x89",
    b"\x85",
    b"\x86",
    b"\x87",
    b".",
    b"\x94",
    b"\x93",
    b"q\x00",
    b"r\xff\xff\xff\xff",
    b"h\x00",
    b"j\xff\xff\xff\xff",
    b"p0\n",
    b"g0\n",
    b"g99999999999999999999999999\n",
    b"p-1\n",
    b"Kx",
    b"J\xff\xff\xff\xff",
    b"M\x01\x00",
    b"X\x07\x00\x00\x00storage",
    b"X\x01\x00\x00\x000",
    b"X\x03\x00\x00\x00cpu",
    b"\x8c\x05torch\x8c\x0cFloatStorage",
    b"ctorch._utils\n_rebuild_tensor_v2\n",
    b"ctorch\nFloatStorage\n",
    b"ctorch\n\n",
    b"c\n\n",
    b"cnospace\n",
    b"\x8a\x09" + b"\xff" * 9,
    b"\x8b\xff\xff\xff\x7f",
    b"\x8b\x00\x01\x00\x00" + b"\x01" * 256,
    b"\x8d\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\x8e\xff\xff\xff\xff\xff\xff\xff\x7f",
    b"\x95\xff\xff\xff\xff\xff\xff\xff\xff",
    b"B\xff\xff\xff\x7f",
    b"C\x03ab",
    b"S'\\q'\n",
    b"S'abc\n",
    b'S"x"\n',
    b"Sx\n",
    b"I99999999999999999999\n",
    b"I01\n",
    b"Ixyz\n",
    b"L" + b"9" * 5000 + b"L\n",
    b"L12\n",
    b"F1e999\n",
    b"Fnan\n",
    b"Fx\n",
    b"Vabc\\u12\n",
    b"V\\ud800\n",
    b"T\x05\x00\x00\x00ab",
    b"U\x05ab",
    b"\x96",
    b"\x97",
    b"\x98",
    b"\x91",
    b"\x90",
    b"\x92",
    b"\x8f",
    b"\x82\x01",
    b"\x83\x01\x00",
    b"\x84\x01\x00\x00\x00",
    b"G\x7f\xf8\x00\x00\x00\x00\x00\x00",
    b"\x81",
    b"\xff",
    b"\x00",
]


@st.composite
def pickle_streams(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        return b"".join(draw(st.lists(st.sampled_from(PICKLE_FRAGMENTS), max_size=24)))
    base = draw(st.sampled_from([TORCH_PKL, *CANARY_PKLS]))
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(data)))
        op = draw(st.integers(0, 3))
        if op == 0:
            del data[i:]
        elif op == 1 and i < len(data):
            data[i] ^= draw(st.integers(1, 255))
        elif op == 2:
            data[i:i] = draw(st.sampled_from(PICKLE_FRAGMENTS))
        else:
            del data[i : i + draw(st.integers(1, 8))]
    return bytes(data)


def _stored_zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate name": wanted here
        with zipfile.ZipFile(buf, "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
    return buf.getvalue()


@fuzz_settings(300)
@given(data=pickle_streams())
@example(data=TORCH_PKL)
def test_pickle_scan_arbitrary_opcodes(
    data: bytes, tmp_path: Path, hardening_examples: Examples
) -> None:
    """The symbolic opcode walk, as a zip's data.pkl and as a legacy (non-zip) file:
    only a LoadscopeError, and nothing is ever called."""
    hardening_examples(1)
    as_zip = tmp_path / "zip.bin"
    as_zip.write_bytes(_stored_zip({"archive/data.pkl": data, "archive/data/0": b"\0" * 16}))
    legacy = tmp_path / "legacy.bin"
    legacy.write_bytes(b"\x80\x02" + data)
    for path in (as_zip, legacy):
        got = outcome(lambda: read_torch_info(path))  # noqa: B023  (called at once)
        assert not _CANARY, "a pickle was executed"
        if not isinstance(got, LoadscopeError):
            assert got.format == ("zip" if path is as_zip else "legacy")
            if got.tensor_count is not None:
                assert got.tensor_count >= 0
            assert all(isinstance(v, int) and v >= 0 for v in got.dtype_bytes.values())


_ZIP_FIELDS: dict[bytes, list[tuple[int, int]]] = {
    # (offset, width) of every numeric field after the signature
    b"PK\x03\x04": [(4, 2), (6, 2), (8, 2), (14, 4), (18, 4), (22, 4), (26, 2), (28, 2)],
    b"PK\x01\x02": [
        (6, 2),
        (8, 2),
        (10, 2),
        (16, 4),
        (20, 4),
        (24, 4),
        (28, 2),
        (30, 2),
        (32, 2),
        (38, 4),
        (42, 4),
    ],
    b"PK\x05\x06": [(4, 2), (6, 2), (8, 2), (10, 2), (12, 4), (16, 4), (20, 2)],
}
_COMPRESSION = [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]


@st.composite
def torch_zips(draw: st.DrawFn) -> bytes:
    """A torch-like zip archive, with its headers' fields and bytes damaged."""
    buf = io.BytesIO()
    compression = draw(st.sampled_from(_COMPRESSION))
    prefix = draw(st.sampled_from(["archive/", "archive/", "", "a/b/", "x/"]))
    pkl = draw(st.sampled_from([TORCH_PKL, TORCH_PKL, *CANARY_PKLS]) | pickle_streams())
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w", compression) as zf:
        warnings.simplefilter("ignore", UserWarning)  # "Duplicate name": wanted here
        for _ in range(draw(st.integers(1, 2))):  # sometimes two data.pkl entries
            with zf.open(prefix + "data.pkl", "w", force_zip64=draw(st.booleans())) as fh:
                fh.write(pkl)
        for key in draw(st.lists(st.sampled_from(["0", "1", "2", "../0", ""]), max_size=3)):
            zf.writestr(prefix + "data/" + key, b"\0" * draw(st.integers(0, 32)))
        if draw(st.booleans()):
            zf.writestr(prefix + "version", b"3\n")
        if draw(st.booleans()):
            zf.writestr(prefix + "data/", b"")  # a directory entry
    data = bytearray(buf.getvalue())
    for _ in range(draw(st.integers(0, 4))):
        sig = draw(st.sampled_from(sorted(_ZIP_FIELDS)))
        where = [i for i in range(len(data)) if data.startswith(sig, i)]
        if where:
            at = where[draw(st.integers(0, len(where) - 1))]
            off, width = draw(st.sampled_from(_ZIP_FIELDS[sig]))
            top = 2 ** (8 * width) - 1
            value = draw(
                st.sampled_from([0, 1, 8, 12, 14, 99, 0x800, 0x41, 0x20, top, top - 1])
                | st.integers(0, top)
            )
            if at + off + width <= len(data):
                struct.pack_into("<H" if width == 2 else "<I", data, at + off, value)
    for _ in range(draw(st.integers(0, 2))):
        if data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= draw(st.integers(1, 255))
    if draw(st.integers(0, 4)) == 0:
        del data[draw(st.integers(4, max(4, len(data)))) :]
    return bytes(data)


TORCH_BYTES = st.one_of(
    torch_zips(),
    st.sampled_from(
        [
            b"PK\x03\x04",
            b"\x80\x02",
            b"\x80\x03",
            b"\x80\x04",
            b"\x80\x05",
            b"\x80\x01",
            b"\x80",
            b"",
        ]
    ).flatmap(lambda p: st.binary(max_size=300).map(lambda rest: p + rest)),
    IMPOSTORS.flatmap(lambda p: st.binary(max_size=32).map(lambda rest: p + rest)),
    st.binary(min_size=262, max_size=600).map(lambda b: b[:257] + b"ustar" + b[262:]),
)


@fuzz_settings(400)
@given(blob=TORCH_BYTES)
def test_torch_reader_arbitrary_files(
    blob: bytes, tmp_path: Path, hub_cache: Path, hardening_examples: Examples
) -> None:
    """Zip-like, pickle-like and tar-like bytes under a .bin name: described or refused with
    a LoadscopeError, memory bounded by the file's size whatever its zip entries claim; no
    pickle is run; the same via ``inspect``."""
    hardening_examples(1)
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(blob)
    with bounded_memory(len(blob)):
        got = outcome(lambda: read_torch_info(path))
    assert not _CANARY, "a pickle was executed"
    if not isinstance(got, LoadscopeError):
        assert got.file_size == len(blob)
        assert got.format in ("zip", "legacy")
        assert all(v >= 0 for v in got.dtype_bytes.values())
    report = outcome(lambda: inspect_target(resolve(str(path))))
    assert not _CANARY, "a pickle was executed"
    if isinstance(got, LoadscopeError):  # inspect checks more (imports), never less
        assert isinstance(report, LoadscopeError)


# -- the index resolver: directory layouts ------------------------------------------------------

SHARD_POOL = [
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "a.safetensors",
    "sub/b.safetensors",
    "sub/deeper/c.safetensors",
    "pytorch_model.bin",
    "x\ny.safetensors",
    "\x1b[31mred.safetensors",
    "\u00e9t\u00e9.safetensors",
    "L" * 240 + ".safetensors",
    "sp ace.safetensors",
    ".hidden.safetensors",
]
TENSOR_POOL = ["w", "b", "emb", "x.y", "w\nz"]
SHARD_KINDS = [
    "valid",
    "valid",
    "valid",
    "garbage",
    "empty",
    "dir",
    "fifo",
    "link_inside",
    "link_outside",
    "link_abs_outside",
    "link_self",
    "link_pair",
    "dangling",
    "dev_null",
    "dev_zero",
    "link_dir",
    "long_target",
    "torch_zip",
    "legacy",
]
WEIGHT_MAP_VALUES = st.one_of(
    st.sampled_from(SHARD_POOL),
    st.sampled_from(
        [
            "missing.safetensors",
            "../outside/o.safetensors",
            "sub/../a.safetensors",
            "./a.safetensors",
            "a.safetensors/",
            "sub//b.safetensors",
            ".",
            "sub",
            "",
            "a\0b.safetensors",
            "a\\b.safetensors",
            "~/x.safetensors",
            "~root/x.safetensors",
            "x" * 5000,
            "/".join(["d"] * 3000),
            "M" * 300 + ".safetensors",
            "\ud800.safetensors",
            "%ABS%",  # replaced by an absolute path outside the model
        ]
    ),
    JSON_VALUES,
)


def _st_file(tensors: list[str]) -> bytes:
    header: dict[str, Any] = {}
    for i, name in enumerate(tensors):
        header[name] = {"dtype": "F32", "shape": [2], "data_offsets": [8 * i, 8 * i + 8]}
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * 8 * len(tensors)


def _torch_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", TORCH_PKL)
        zf.writestr("archive/data/0", b"\0" * 16)
        zf.writestr("archive/data/1", b"\0" * 4)
    return buf.getvalue()


@st.composite
def layouts(draw: st.DrawFn) -> dict[str, Any]:
    shards = draw(
        st.lists(
            st.tuples(
                st.sampled_from(SHARD_POOL),
                st.sampled_from(SHARD_KINDS),
                st.lists(st.sampled_from(TENSOR_POOL), max_size=3, unique=True),
                st.binary(max_size=40),
            ),
            max_size=4,
            unique_by=lambda s: s[0],
        )
    )
    index_name = draw(st.sampled_from([*INDEX_NAMES, INDEX_NAMES[0], None]))
    index_kind = draw(
        st.sampled_from(
            ["json"] * 8 + ["text", "dir", "fifo", "link_outside", "link_self", "dangling"]
        )
    )
    weight_map = draw(
        st.dictionaries(
            st.sampled_from(TENSOR_POOL) | st.text(max_size=4), WEIGHT_MAP_VALUES, max_size=5
        )
    )
    index_doc = draw(
        st.one_of(
            st.just({"metadata": {"total_size": 0}, "weight_map": weight_map}),
            st.just({"weight_map": weight_map}),
            st.builds(lambda v: {"weight_map": v}, JSON_VALUES),
            JSON_VALUES,
        )
    )
    index_text = draw(
        st.one_of(
            st.just(json.dumps(index_doc, allow_nan=True).encode("utf-8", "surrogatepass")),
            st.binary(max_size=64),
            st.sampled_from(
                [
                    b"",
                    b"\xef\xbb\xbf{}",
                    b"[" * 5000,
                    b"{" * 3000,
                    b'{"weight_map":' * 3000,
                    b"\xff\xfe{\x00}\x00",
                    b'{"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}}',
                ]
            ),
        )
    )
    spec = draw(st.sampled_from(["root"] * 5 + ["index", "first_shard"]))
    return {
        "shards": shards,
        "index_name": index_name,
        "index_kind": index_kind,
        "index_text": index_text,
        "spec": spec,
    }


def _make(
    path: Path, kind: str, tensors: list[str], junk: bytes, pool: list[str], base: Path
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    outside = base / "outside"
    if kind == "valid":
        path.write_bytes(_st_file(tensors))
    elif kind == "garbage":
        path.write_bytes(junk)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "dir":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link_inside":
        os.symlink(os.path.relpath(base / "model" / pool[len(junk) % len(pool)], path.parent), path)
    elif kind == "link_outside":
        os.symlink(os.path.relpath(outside / "o.safetensors", path.parent), path)
    elif kind == "link_abs_outside":
        os.symlink(outside / "o.safetensors", path)
    elif kind == "link_self":
        os.symlink(path.name, path)
    elif kind == "link_pair":
        other = path.with_name(path.name + ".other")
        os.symlink(other.name, path)
        os.symlink(path.name, other)
    elif kind == "dangling":
        os.symlink("nowhere.safetensors", path)
    elif kind == "dev_null":
        os.symlink("/dev/null", path)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", path)
    elif kind == "link_dir":
        os.symlink(outside, path)
    elif kind == "long_target":
        os.symlink("T" * 300, path)  # lstat works, stat fails with ENAMETOOLONG
    elif kind == "torch_zip":
        path.write_bytes(_torch_zip())
    elif kind == "legacy":
        path.write_bytes(b"\x80\x02" + junk)
    else:  # pragma: no cover
        raise AssertionError(kind)


def build_layout(base: Path, layout: dict[str, Any]) -> tuple[Path, str]:
    """Materialize ``layout`` under ``base`` (wiped first); returns (the root the target
    must have, spec)."""
    if base.exists():
        shutil.rmtree(base)
    root = base / "model"
    root.mkdir(parents=True)
    outside = base / "outside"
    outside.mkdir()
    (outside / "o.safetensors").write_bytes(_st_file(["w", "outside"]))
    pool = [name for name, *_ in layout["shards"]] or ["a.safetensors"]
    for name, kind, tensors, junk in layout["shards"]:
        with contextlib.suppress(FileExistsError, NotADirectoryError, OSError):
            _make(root / name, kind, tensors, junk, pool, base)
    spec = str(root)
    if layout["index_name"] is not None:
        index = root / layout["index_name"]
        text = layout["index_text"].replace(b"%ABS%", str(outside / "o.safetensors").encode())
        kind = layout["index_kind"]
        if kind in ("json", "text"):
            index.write_bytes(text)
        elif kind == "dir":
            index.mkdir()
        elif kind == "fifo":
            os.mkfifo(index)
        elif kind == "link_outside":
            (outside / "i.json").write_bytes(text)
            os.symlink(outside / "i.json", index)
        elif kind == "link_self":
            os.symlink(index.name, index)
        else:
            os.symlink("nowhere.json", index)
        if layout["spec"] == "index":
            spec = str(index)
    if layout["spec"] == "first_shard" and layout["shards"]:
        first = root / layout["shards"][0][0]
        # A file's target lives in its folder; a directory (or a link to one) is its own.
        return (first if os.path.isdir(first) else first.parent), str(first)
    return root, spec


def _inside(path: Path, root: Path) -> bool:
    return os.path.normpath(path).startswith(os.path.normpath(root) + os.sep)


def _via_symlink(path: Path, root: Path) -> bool:
    """Whether some component of ``path`` below ``root`` is a symbolic link."""
    rel = Path(os.path.normpath(path)).relative_to(os.path.normpath(root))
    cur = Path(os.path.normpath(root))
    for part in rel.parts:
        cur = cur / part
        if cur.is_symlink():
            return True
    return False


def check_target_files(target: Any, root: Path) -> None:
    """What a resolved target promises: regular files lexically inside the model dir, the
    index's every shard among them; a file whose real path is elsewhere got there only
    through a symlink in the model dir (as in the Hugging Face cache's snapshots)."""
    assert os.path.normpath(target.root) == os.path.normpath(root)
    assert target.files
    for wf in target.files:
        assert _inside(wf.path, root), wf.path
        assert stat.S_ISREG(os.stat(wf.path).st_mode)
        if not os.path.realpath(wf.path).startswith(os.path.realpath(root) + os.sep):
            assert _via_symlink(wf.path, root), wf.path
    if target.weight_map is not None:
        named = {os.path.normpath(root / v) for v in target.weight_map.values()}
        assert named == {os.path.normpath(wf.path) for wf in target.files}


@fuzz_settings(200)
@given(layout=layouts())
def test_index_resolver_directory_layouts(
    layout: dict[str, Any], tmp_path: Path, hub_cache: Path, hardening_examples: Examples
) -> None:
    hardening_examples(1)
    root, spec = build_layout(tmp_path / "layout", layout)
    target = outcome(lambda: resolve(spec))
    if isinstance(target, LoadscopeError):
        return
    check_target_files(target, root)
    report = outcome(lambda: inspect_target(target))
    if not isinstance(report, LoadscopeError):
        assert len(report.files) == len(target.files)


@fuzz_settings(300)
@given(
    raw=st.one_of(
        st.binary(max_size=128),
        st.builds(
            lambda d: json.dumps(d, allow_nan=True).encode("utf-8", "surrogatepass"),
            JSON_VALUES
            | st.dictionaries(
                st.just("weight_map"),
                JSON_VALUES | st.dictionaries(st.text(max_size=4), WEIGHT_MAP_VALUES, max_size=4),
            ),
        ),
    )
)
def test_parse_index_arbitrary_json(raw: bytes, hardening_examples: Examples) -> None:
    hardening_examples(1)
    got = outcome(lambda: parse_index(raw, path=Path("model.safetensors.index.json")))
    if not isinstance(got, LoadscopeError):
        assert got and all(isinstance(v, str) and v for v in got.values())
        for v in got.values():
            assert not os.path.isabs(v) and ".." not in Path(v).parts and "\0" not in v


SPEC_ALPHABET = st.sampled_from(
    [*"ab./~@-_:\\ \n\t\x00", "\ud800", "\udc80", "\u00e9", "\U0001f600", "synthetic:"]
)


@fuzz_settings(200)
@given(spec=st.lists(SPEC_ALPHABET, max_size=12).map("".join) | ODD_TEXT | st.just("x" * 5000))
@example(spec="a\0b")
@example(spec="~nosuchuser-loadscope/x")
@example(spec="\ud800")
@example(spec="~\x00")
@example(spec="~\ud800")
def test_resolve_arbitrary_specs(
    spec: str,
    tmp_path: Path,
    hub_cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    hardening_examples: Examples,
) -> None:
    """What a user types (or a TUI field holds): resolved or refused, never a traceback.
    Only ``resolve`` (stat and the index), never a read of whatever the spec names."""
    hardening_examples(1)
    monkeypatch.chdir(tmp_path)
    if spec.startswith("synthetic:"):
        outcome(lambda: parse_synthetic(spec))  # building it would write gigabytes
        return
    outcome(lambda: resolve(spec))


# -- the atheris harnesses run without atheris ------------------------------------------------


def _load_harness(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """Import ``fuzz/<name>.py`` as a plain module, with atheris made unimportable (and
    the scratch files it makes at import kept under ``tmp_path``)."""
    import sys
    import tempfile

    monkeypatch.setitem(sys.modules, "atheris", None)  # "import atheris" now fails
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return _fuzz_module(name)


@pytest.mark.parametrize("name", ["fuzz_header", "fuzz_torch", "fuzz_index"])
def test_harness_runs_without_atheris(
    name: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    hub_cache: Path,
    hardening_examples: Examples,
) -> None:
    """Each harness's TestOneInput imports and runs without atheris, on its own seeds and
    on junk: what ``fuzz/README.md`` says to do with a crash file works."""
    harness = _load_harness(name, monkeypatch, tmp_path)
    corpus = _load_harness("make_corpus", monkeypatch, tmp_path)
    seeds = {
        "fuzz_header": corpus.header_seeds,
        "fuzz_torch": corpus.torch_seeds,
        "fuzz_index": corpus.index_seeds,
    }[name]()
    inputs = [*seeds, b"", b"\x00", b"\xff" * 9, b"PK\x03\x04", b"\x80\x02", b'\x00{"weight_map"']
    for data in inputs:
        with no_hang():
            harness.TestOneInput(data)
    hardening_examples(len(inputs))


# -- regression cases: every crash the fuzzers found, pinned with the error it must be now ------


def _zip_with(method: int, *, flag: int = 0, damage: int | None = None) -> bytes:
    """A torch-like zip whose data.pkl entry says ``method`` and ``flag`` in both headers, or
    whose compressed data has the byte at ``damage`` flipped."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if damage is None else method) as zf:
        zf.writestr("archive/data.pkl", TORCH_PKL)
    data = bytearray(buf.getvalue())
    local, central = data.find(b"PK\x03\x04"), data.find(b"PK\x01\x02")
    if damage is not None:
        data[local + 30 + len("archive/data.pkl") + damage] ^= 0xFF
        return bytes(data)
    struct.pack_into("<HH", data, local + 6, flag, method)
    struct.pack_into("<HH", data, central + 8, flag, method)
    return bytes(data)


# The LZMA-corrupt archive the long hypothesis run found (shrunk): the entry's LZMA
# properties and data are garbage, zipfile raised _lzma.LZMAError.
LZMA_CORRUPT = (
    b"PK\x03\x04?\x00\x02\x00\x0e\x00\x00\x00!\x00\xed\xcc\x13\x00\xcd\x00\x00\x00\xef\x00\x00"
    b"\x00\x10\x00\x00\x00archive/data.pkl\t\x04\x05\x00]\x00\x00\x80\x00\x00@\x00\x8a)\xd7"
    b"\x80\xa0c\xf7\x90&\xea8\xa4oy\x06\xc5\xa4\xf7r|\t\\k\xf3\xa2\xbc\xb7\xfc|T\x96\xa9\x99"
    b"\xbb\xf4\xed|\xfe\x03Ij\n\xdd\xac\xbbe\xd8\xc1\xe8\xd2_\xeb:\xfc&\xa3\x83\xb7VL\xfa\xbdQ"
    b"\xd2.\xd6\xd9\x02\xbf\xdf\xe8\x90\xa5h,^ \x81C\xd3\xe8.\x8f\xd0;b\xa04\xa5\x8dtp\xd4\xdd"
    b"\x15\x8b\xf5\xb1\x91x\xbeM\xc1\x0b\x06!\xe5\xfcY\xad\x96\x0f\xba\xab\xa8R\x80\xa7\xc6\xe3"
    b"\x9b\xf0\x7f\xaf\x87\xb6\xd0\x12\xfb\xcd\xab\xce\xcd\xbeDS\xc3\x1b\\<\\E\x96*\x80\x9eh\xae"
    b'\x93\x07\x8f\x990\x01"z|\xad\x93Xb\xc2\xcb=\xc8\xadU\x91\xe6\x1c\x00!\x08\x99\xa7\xff*\x8a'
    b"\x937\x1c\xc2y\xb6\xf2/\xc9B\xfe\xfbA\xf8\x80PK\x01\x02?\x03?\x00\x02\x00\x0e\x00\x00\x00"
    b"!\x00\xed\xcc\x13\x00\xcd\x00\x00\x00\xef\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00\x00"
    b"\x00\x00\x00\x80\x01\x00\x00\x00\x00archive/data.pklPK\x05\x06\x00\x00\x00\x00\x01\x00\x01"
    b"\x00>\x00\x00\x00\xfb\x00\x00\x00\x00\x00"
)


@pytest.mark.parametrize(
    ("blob", "was"),
    [
        (_zip_with(zipfile.ZIP_DEFLATED, flag=0x1), "RuntimeError: ... is encrypted"),
        (_zip_with(99), "NotImplementedError: compression method"),
        (_zip_with(zipfile.ZIP_DEFLATED, flag=0x20), "NotImplementedError: patched data"),
        (_zip_with(zipfile.ZIP_DEFLATED, damage=0), "zlib.error: invalid code lengths"),
        (_zip_with(zipfile.ZIP_BZIP2, damage=4), "OSError: Invalid data stream"),
        (_zip_with(zipfile.ZIP_LZMA, damage=9), "_lzma.LZMAError"),
        (LZMA_CORRUPT, "_lzma.LZMAError: Corrupt input data"),
    ],
    ids=[
        "encrypted",
        "unknown-method",
        "patched",
        "bad-deflate",
        "bad-bzip2",
        "bad-lzma",
        "lzma-found",
    ],
)
def test_regression_unreadable_data_pkl(
    blob: bytes, was: str, tmp_path: Path, hub_cache: Path, hardening_examples: Examples
) -> None:
    """zipfile raises far more than BadZipFile for a data.pkl it cannot inflate (``was``:
    what escaped before the fix); each is now a TorchCheckpointError."""
    hardening_examples(1)
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(blob)
    with pytest.raises(TorchCheckpointError) as info:
        read_torch_info(path)
    assert_clean_error(info.value)


def test_regression_specs(tmp_path: Path, hub_cache: Path, hardening_examples: Examples) -> None:
    """Target specs that made ``resolve`` raise ValueError/UnicodeEncodeError (from os.lstat,
    or from expanduser's user lookup) or RuntimeError (expanduser, no such user)."""
    hardening_examples(6)
    for spec in ("a\0b", str(tmp_path) + "/\0", "\ud800.safetensors", "~\0", "~\ud800"):
        with pytest.raises(BadTargetSpec, match="not a usable path") as bad:
            resolve(spec)
        assert_clean_error(bad.value)
    with pytest.raises(PathNotFound, match="cannot expand '~'") as missing:  # was RuntimeError
        resolve("~no-such-user-loadscope/model")
    assert_clean_error(missing.value)


def test_regression_shard_link_target_too_long(
    tmp_path: Path, hub_cache: Path, hardening_examples: Examples
) -> None:
    """An index shard that is a symlink whose target name is too long to stat: lexists is
    true, Path.exists() raised OSError(ENAMETOOLONG); now a ReadFailed naming the shard."""
    hardening_examples(1)
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "long.safetensors"}})
    )
    os.symlink("T" * 300, model / "long.safetensors")
    with pytest.raises(ReadFailed, match="File name too long") as info:
        resolve(str(model))
    assert_clean_error(info.value)
    assert info.value.path == str(model / "long.safetensors")


def test_regression_shard_names_are_quoted(
    tmp_path: Path, hub_cache: Path, hardening_examples: Examples
) -> None:
    """File names in inspect's cross-shard messages were unquoted: a shard named with a
    newline (or an escape sequence) broke the one-line message; now they are repr'd."""
    hardening_examples(2)
    model = tmp_path / "model"
    model.mkdir()
    (model / "a.safetensors").write_bytes(_st_file(["w"]))
    (model / "x\ny.safetensors").write_bytes(_st_file(["w"]))
    with pytest.raises(DuplicateTensor) as dup:
        inspect_target(resolve(str(model)))
    assert_clean_error(dup.value)
    assert "'x\\ny.safetensors'" in dup.value.message
    (model / "a.safetensors").unlink()
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"w": "x\ny.safetensors", "v": "x\ny.safetensors"}})
    )
    with pytest.raises(InvalidIndex, match="no shard holds it") as index:
        inspect_target(resolve(str(model)))
    assert_clean_error(index.value)


@pytest.mark.parametrize("where", ["zip", "legacy"])
def test_regression_bad_escape_under_warnings_as_errors(
    where: str, tmp_path: Path, hardening_examples: Examples
) -> None:
    """A STRING opcode with a bad escape makes pickletools warn (DeprecationWarning); with
    warnings as errors (``python -W error``, ``PYTHONWARNINGS=error``) that warning escaped
    the reader. Now it is a TorchCheckpointError; with default filters, no error at all."""
    hardening_examples(1)
    pkl = b"\x80\x02S'\\q'\n."
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(_stored_zip({"archive/data.pkl": pkl}) if where == "zip" else pkl)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TorchCheckpointError, match="not a valid pickle") as info:
            read_torch_info(path)
    assert_clean_error(info.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert read_torch_info(path).format == where


def test_regression_lzma_dictionary_claim(tmp_path: Path, hardening_examples: Examples) -> None:
    """An LZMA data.pkl whose properties claim a 4 GiB dictionary: lzma allocated all of it
    (tracemalloc saw 4,295,079,831 bytes for a 300-byte file; a MemoryError under strict
    overcommit). torch reads only stored and deflated entries, so the method is refused
    before anything is inflated."""
    hardening_examples(1)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_LZMA) as zf:
        zf.writestr("archive/data.pkl", TORCH_PKL)
    data = bytearray(buf.getvalue())
    start = data.find(b"PK\x03\x04") + 30 + len("archive/data.pkl")
    # LZMA in zip: version (2), properties size (2), lc/lp/pb (1), dictionary size (4).
    struct.pack_into("<I", data, start + 5, 0xFFFFFFFF)
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(data)
    with bounded_memory(len(data)), pytest.raises(TorchCheckpointError, match="method 14"):
        read_torch_info(path)


@pytest.mark.parametrize(
    "pkl",
    [
        b"\x80\x02ctests.\x7fnit.test_fuzz\n_canary\n)R.",  # as found
        b"\x80\x02cos\x1b[2J\nsystem\n)R.",
        b"\x80\x04\x8c\x04os\nx\x8c\x06system\x93)R.",  # STACK_GLOBAL: a newline in a name
    ],
    ids=["del", "escape-sequence", "newline"],
)
def test_regression_unsafe_global_name_is_escaped(
    pkl: bytes, tmp_path: Path, hub_cache: Path, hardening_examples: Examples
) -> None:
    """The long hypothesis run found a GLOBAL whose module name holds DEL (``\\x7f``): the
    UnsafePickle message printed it raw; a newline or an escape sequence there would
    break the one line or drive the terminal. Non-printable names are now repr'd."""
    hardening_examples(1)
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(_stored_zip({"archive/data.pkl": pkl}))
    with pytest.raises(LoadscopeError) as info:
        inspect_target(resolve(str(path)))
    assert_clean_error(info.value)
    assert not _CANARY
