"""Malformed and hostile inputs, one builder per rule, with the exact error each must raise.

Each case builds its input under a temporary directory and returns the target to
give loadscope. Later entry points (probe, bench, doctor, warm, copy, the TUI
picker) reuse this table so every one of them meets the same files.
"""

from __future__ import annotations

import builtins
import json
import os
import pickle
import socket
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadscope.base.errors import LoadscopeError, NotARegularFile, PathNotFound
from loadscope.loaders import errors as ce
from loadscope.loaders.safetensors_format import MAX_HEADER_BYTES
from loadscope.model.targets import (
    HubCacheMiss,
    InvalidIndex,
    NoWeightFiles,
    ShardMissing,
    ShardOutsideModel,
    UnsupportedFile,
)


def st_file(
    path: Path,
    header: dict[str, Any] | bytes,
    data: bytes = b"",
    *,
    length: int | None = None,
) -> Path:
    """Write a safetensors-like file: 8-byte length, header, data (all under our control)."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + raw + data)
    return path


def entry(
    dtype: str = "F32", shape: list[Any] | None = None, offsets: list[Any] | None = None
) -> dict[str, Any]:
    shape = [2] if shape is None else shape
    return {
        "dtype": dtype,
        "shape": shape,
        "data_offsets": offsets if offsets is not None else [0, 8],
    }


def good_st(path: Path, names: tuple[str, ...] = ("a",)) -> Path:
    """A valid file with one 2-element F32 tensor per name."""
    header = {n: entry(offsets=[8 * i, 8 * i + 8]) for i, n in enumerate(names)}
    return st_file(path, header, b"\0" * 8 * len(names))


@dataclass(frozen=True)
class Case:
    id: str
    build: Callable[[Path], str]
    error: type[LoadscopeError]
    #: A fragment the one-line message must contain (beyond the path).
    says: str


def _p(tmp: Path, name: str = "model.safetensors") -> Path:
    return tmp / name


def _index_dir(tmp: Path, weight_map: Any, *, shards: tuple[str, ...] = ()) -> str:
    d = tmp / "model"
    d.mkdir()
    for s in shards:
        good_st(d / s)
    (d / "model.safetensors.index.json").write_text(
        weight_map if isinstance(weight_map, str) else json.dumps({"weight_map": weight_map})
    )
    return str(d)


def _fifo(tmp: Path) -> str:
    p = _p(tmp)
    os.mkfifo(p)
    return str(p)


def _socket(tmp: Path) -> str:
    p = _p(tmp)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()
    return str(p)


def _symlink(tmp: Path, to: str, name: str = "model.safetensors") -> str:
    p = _p(tmp, name)
    p.symlink_to(to)
    return str(p)


def _loop(tmp: Path) -> str:
    a, b = tmp / "a.safetensors", tmp / "b.safetensors"
    a.symlink_to(b)
    b.symlink_to(a)
    return str(a)


def _deep(tmp: Path) -> str:
    depth = 200_000
    raw = b'{"a":' + b"[" * depth + b"]" * depth + b"}"
    return str(st_file(_p(tmp), raw))


def _two_shards_same_tensor(tmp: Path) -> str:
    d = tmp / "model"
    d.mkdir()
    good_st(d / "one.safetensors", ("a", "b"))
    good_st(d / "two.safetensors", ("b",))
    return str(d)


def _index_lists_absent_tensor(tmp: Path) -> str:
    return _index_dir(
        tmp, {"a": "s1.safetensors", "ghost": "s1.safetensors"}, shards=("s1.safetensors",)
    )


def _write(path: Path, data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    return str(path)


#: The file a code-running pickle would create if it were ever unpickled: it must never appear.
MARKER = "PWNED"


class RunsCode:
    """Pickles as the call ``fn(arg)``: what a malicious checkpoint makes ``pickle.load`` do."""

    def __init__(self, fn: Callable[[str], object], arg: str) -> None:
        self.fn, self.arg = fn, arg

    def __reduce__(self) -> tuple[Callable[[str], object], tuple[str]]:
        return (self.fn, (self.arg,))


def torch_zip(path: Path, obj: object) -> Path:
    """A torch.save zip archive of ``obj`` (the layout torch writes), pickled by plain pickle."""
    name = path.stem
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/data.pkl", pickle.dumps(obj, protocol=2))
        z.writestr(f"{name}/byteorder", "little")
        z.writestr(f"{name}/version", "3\n")
        z.writestr(f"{name}/.data/serialization_id", "0")
    return path


def _pickle_runs_system(tmp: Path) -> str:
    # os.system pickles as posix.system: a GLOBAL then REDUCE, as torch.save's protocol 2.
    payload = {"weight": RunsCode(os.system, f"touch {tmp / MARKER}")}
    return str(torch_zip(_p(tmp, "pytorch_model.bin"), payload))


def _legacy_pickle_runs_exec(tmp: Path) -> str:
    # A bare pickle (what torch.save wrote before 1.6), protocol 4: STACK_GLOBAL builtins.exec.
    code = f"open({str(tmp / MARKER)!r}, 'w').close()"
    return _write(_p(tmp, "model.pt"), pickle.dumps(RunsCode(builtins.exec, code), protocol=4))


def _pickle_size_lie(tmp: Path) -> str:
    """A torch zip whose data.pkl claims 2 GiB (so a scanner capped by size would skip it)."""
    path = torch_zip(_p(tmp, "pytorch_model.bin"), {"w": RunsCode(os.system, "true")})
    raw = bytearray(path.read_bytes())
    for sig, at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # local header, central dir
        i = raw.index(sig)  # data.pkl is the first entry
        raw[i + at : i + at + 4] = struct.pack("<I", 0x7FFFFFFF)
    path.write_bytes(bytes(raw))
    return str(path)


def _index_dir_shard_is(tmp: Path, make: Callable[[Path], object]) -> str:
    d = tmp / "model"
    d.mkdir()
    good_st(d / "s1.safetensors")
    make(d / "s2.safetensors")
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})
    )
    return str(d)


def _index_tensor_twice(tmp: Path) -> str:
    d = tmp / "model"
    d.mkdir()
    good_st(d / "s1.safetensors", ("a",))
    good_st(d / "s2.safetensors", ("b",))
    (d / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors", "a": "s2.safetensors"}}'
    )
    return str(d)


def _dir_only_cycle(tmp: Path) -> str:
    # Nothing but a symlink back to the parent: listing must not walk the loop.
    d = tmp / "m"
    d.mkdir()
    (d / "loop").symlink_to("..")
    (d / "self").symlink_to(".")
    return str(d)


def _dir_cycle_named_like_shard(tmp: Path) -> str:
    d = tmp / "m"
    d.mkdir()
    (d / "model.safetensors").symlink_to(".")
    return str(d)


def _dir_shard_self_loop(tmp: Path) -> str:
    d = tmp / "m"
    d.mkdir()
    (d / "model.safetensors").symlink_to("model.safetensors")
    return str(d)


def _huge_junk_header(tmp: Path) -> str:
    # A real 24 MB header (under the format's limit) that is not JSON: read, then refused.
    return str(st_file(_p(tmp), b"{" + b" " * (24 << 20) + b"not json"))


def _hf_miss(tmp: Path) -> str:
    # The test points HF_HUB_CACHE at an empty directory for every case.
    return "no-such-org/no-such-model"


CASES: list[Case] = [
    Case("empty-file", lambda t: _write(_p(t), b""), ce.EmptyFile, "empty"),
    Case("shorter-than-8", lambda t: _write(_p(t), b"\x10\0\0"), ce.TruncatedHeader, "8-byte"),
    Case(
        "length-2**63",
        lambda t: str(st_file(_p(t), b"{}", length=2**63)),
        ce.HeaderTooLarge,
        "limit",
    ),
    Case(
        "length-over-limit",
        lambda t: str(st_file(_p(t), b"{}", length=100_000_001)),
        ce.HeaderTooLarge,
        "limit",
    ),
    Case(
        "header-past-eof",
        lambda t: str(st_file(_p(t), b"{}", length=4096)),
        ce.TruncatedHeader,
        "truncated",
    ),
    Case(
        "header-not-utf8",
        lambda t: str(st_file(_p(t), b'{"\xff\xfe":1}')),
        ce.HeaderNotUtf8,
        "UTF-8",
    ),
    Case(
        "header-not-json",
        lambda t: str(st_file(_p(t), b"{not json at all")),
        ce.HeaderNotJson,
        "JSON",
    ),
    Case(
        "header-json-array", lambda t: str(st_file(_p(t), b"[1, 2, 3]")), ce.HeaderNotObject, "'{'"
    ),
    Case(
        "header-nan",
        lambda t: str(st_file(_p(t), b'{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,0]}}')),
        ce.HeaderNotJson,
        "JSON",
    ),
    Case("header-nested-too-deep", _deep, ce.HeaderNotJson, "JSON"),
    Case(
        "metadata-not-strings",
        lambda t: str(st_file(_p(t), {"__metadata__": {"k": 1}})),
        ce.InvalidMetadata,
        "__metadata__",
    ),
    Case(
        "entry-not-object",
        lambda t: str(st_file(_p(t), {"a": [1, 2]})),
        ce.InvalidTensorEntry,
        "'a'",
    ),
    Case(
        "entry-missing-shape",
        lambda t: str(st_file(_p(t), {"a": {"dtype": "F32", "data_offsets": [0, 8]}}, b"\0" * 8)),
        ce.InvalidTensorEntry,
        "missing shape",
    ),
    Case(
        "shape-bool",
        lambda t: str(st_file(_p(t), {"a": entry(shape=[True])}, b"\0" * 8)),
        ce.InvalidTensorEntry,
        "shape",
    ),
    Case(
        "shape-negative",
        lambda t: str(st_file(_p(t), {"a": entry(shape=[-2])}, b"\0" * 8)),
        ce.InvalidTensorEntry,
        "shape",
    ),
    Case(
        "offsets-three",
        lambda t: str(st_file(_p(t), {"a": entry(offsets=[0, 4, 8])}, b"\0" * 8)),
        ce.InvalidTensorEntry,
        "data_offsets",
    ),
    Case(
        "unknown-dtype",
        lambda t: str(st_file(_p(t), {"a": entry(dtype="F128")}, b"\0" * 8)),
        ce.UnknownDtype,
        "F128",
    ),
    Case(
        "offset-negative",
        lambda t: str(st_file(_p(t), {"a": entry(offsets=[-8, 0])}, b"\0" * 8)),
        ce.InvalidOffsets,
        "negative",
    ),
    Case(
        "offset-reversed",
        lambda t: str(st_file(_p(t), {"a": entry(offsets=[8, 0])}, b"\0" * 8)),
        ce.InvalidOffsets,
        "end before begin",
    ),
    Case(
        "offset-gap",
        lambda t: str(
            st_file(_p(t), {"a": entry(offsets=[0, 8]), "b": entry(offsets=[16, 24])}, b"\0" * 24)
        ),
        ce.InvalidOffsets,
        "gap",
    ),
    Case(
        "offset-overlap",
        lambda t: str(
            st_file(_p(t), {"a": entry(offsets=[0, 8]), "b": entry(offsets=[4, 12])}, b"\0" * 12)
        ),
        ce.InvalidOffsets,
        "overlap",
    ),
    Case(
        "offset-not-at-zero",
        lambda t: str(st_file(_p(t), {"a": entry(offsets=[8, 16])}, b"\0" * 16)),
        ce.InvalidOffsets,
        "expected 0",
    ),
    Case(
        "size-mismatch",
        lambda t: str(st_file(_p(t), {"a": entry(shape=[4], offsets=[0, 8])}, b"\0" * 8)),
        ce.TensorSizeMismatch,
        "needs 16 bytes",
    ),
    Case(
        "size-overflow",
        lambda t: str(
            st_file(_p(t), {"a": entry(shape=[2**40, 2**40], offsets=[0, 8])}, b"\0" * 8)
        ),
        ce.SizeOverflow,
        "64 bits",
    ),
    Case(
        "sub-byte-odd",
        lambda t: str(
            st_file(_p(t), {"a": entry(dtype="F4", shape=[3], offsets=[0, 2])}, b"\0" * 2)
        ),
        ce.TensorSizeMismatch,
        "whole number of bytes",
    ),
    Case(
        "data-truncated",
        lambda t: str(st_file(_p(t), {"a": entry(shape=[4], offsets=[0, 16])}, b"\0" * 8)),
        ce.DataSizeMismatch,
        "short",
    ),
    Case(
        "data-trailing",
        lambda t: str(st_file(_p(t), {"a": entry()}, b"\0" * 12)),
        ce.DataSizeMismatch,
        "unexplained",
    ),
    Case(
        "duplicate-tensor",
        lambda t: str(
            st_file(
                _p(t),
                b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}',
                b"\0" * 16,
            )
        ),
        ce.DuplicateTensor,
        "twice",
    ),
    Case(
        "git-lfs-pointer",
        lambda t: _write(
            _p(t), "version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n"
        ),
        ce.GitLfsPointer,
        "git lfs",
    ),
    Case(
        "html-page",
        lambda t: _write(_p(t), "<!DOCTYPE html><html><body>403 Forbidden</body></html>"),
        ce.HtmlInsteadOfWeights,
        "HTML",
    ),
    Case(
        "torch-zip-named-safetensors",
        lambda t: str(torch_zip(_p(t), {"a": 1})),
        ce.NotACheckpoint,
        "torch checkpoint",
    ),
    Case(
        "torch-garbage",
        lambda t: _write(_p(t, "pytorch_model.bin"), b"GARBAGE!" * 16),
        ce.TorchCheckpointError,
        "neither",
    ),
    Case(
        "torch-bad-zip",
        lambda t: _write(_p(t, "model.pt"), b"PK\x03\x04" + b"\0" * 60),
        ce.TorchCheckpointError,
        "zip",
    ),
    Case("fifo", _fifo, NotARegularFile, "FIFO"),
    Case("socket", _socket, NotARegularFile, "socket"),
    Case(
        "symlink-to-dev-zero",
        lambda t: _symlink(t, "/dev/zero"),
        NotARegularFile,
        "character device",
    ),
    Case("symlink-loop", _loop, NotARegularFile, "loop"),
    Case("missing-path", lambda t: str(t / "nope.safetensors"), PathNotFound, "no such file"),
    Case("broken-symlink", lambda t: _symlink(t, str(t / "gone")), PathNotFound, "broken"),
    Case(
        "unsupported-extension",
        lambda t: _write(_p(t, "weights.txt"), "hi"),
        UnsupportedFile,
        ".safetensors",
    ),
    Case(
        "dir-without-weights",
        lambda t: ((t / "empty").mkdir(), str(t / "empty"))[1],
        NoWeightFiles,
        "no weight files",
    ),
    Case(
        "dir-fifo-shard",
        lambda t: ((t / "m").mkdir(), os.mkfifo(t / "m" / "model.safetensors"), str(t / "m"))[2],
        NotARegularFile,
        "FIFO",
    ),
    Case("index-not-json", lambda t: _index_dir(t, "{oops"), InvalidIndex, "JSON"),
    Case(
        "index-no-weight-map",
        lambda t: _index_dir(t, json.dumps({"metadata": {}})),
        InvalidIndex,
        "weight_map",
    ),
    Case(
        "index-path-traversal",
        lambda t: _index_dir(t, {"a": "../outside.safetensors"}),
        ShardOutsideModel,
        "outside",
    ),
    Case(
        "index-absolute-path",
        lambda t: _index_dir(t, {"a": "/etc/passwd"}),
        ShardOutsideModel,
        "outside",
    ),
    Case(
        "index-missing-shard",
        lambda t: _index_dir(
            t, {"a": "s1.safetensors", "b": "s2.safetensors"}, shards=("s1.safetensors",)
        ),
        ShardMissing,
        "missing",
    ),
    Case("index-lists-absent-tensor", _index_lists_absent_tensor, InvalidIndex, "ghost"),
    Case("tensor-in-two-shards", _two_shards_same_tensor, ce.DuplicateTensor, "both"),
    Case("hf-id-not-in-cache", _hf_miss, HubCacheMiss, "local Hugging Face cache"),
    # -- issue 10: the same files at every entry point, and these ------------------------------
    Case(
        "length-just-under-limit-tiny-file",
        lambda t: str(st_file(_p(t), b"{}", length=MAX_HEADER_BYTES - 8)),
        ce.TruncatedHeader,
        "truncated",
    ),
    Case(
        "length-90MB-tiny-file",
        lambda t: str(st_file(_p(t), b"{}", length=90_000_000)),
        ce.TruncatedHeader,
        "90000000-byte header",
    ),
    Case("header-24MB-not-json", _huge_junk_header, ce.HeaderNotJson, "JSON"),
    Case(
        "git-lfs-pointer-torch",
        lambda t: _write(
            _p(t, "pytorch_model.bin"),
            "version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n",
        ),
        ce.GitLfsPointer,
        "git lfs pull",
    ),
    Case(
        "html-page-with-bom",
        lambda t: _write(_p(t), b"\xef\xbb\xbf\n  <html><head><title>401</title></head></html>"),
        ce.HtmlInsteadOfWeights,
        "download",
    ),
    Case(
        "index-shard-is-html",
        lambda t: _index_dir_shard_is(t, lambda p: p.write_text("<!doctype html><p>404</p>")),
        ce.HtmlInsteadOfWeights,
        "HTML",
    ),
    Case(
        "index-shard-is-lfs-pointer",
        lambda t: _index_dir_shard_is(
            t,
            lambda p: p.write_text(
                "version https://git-lfs.github.com/spec/v1\noid sha256:cd\nsize 7\n"
            ),
        ),
        ce.GitLfsPointer,
        "git lfs",
    ),
    Case(
        "index-shard-to-dev-zero",
        lambda t: _index_dir_shard_is(t, lambda p: p.symlink_to("/dev/zero")),
        NotARegularFile,
        "character device",
    ),
    Case(
        "index-shard-is-fifo",
        lambda t: _index_dir_shard_is(t, os.mkfifo),
        NotARegularFile,
        "FIFO",
    ),
    Case("index-tensor-listed-twice", _index_tensor_twice, InvalidIndex, "twice"),
    Case("dir-only-symlink-cycles", _dir_only_cycle, NoWeightFiles, "no weight files"),
    Case(
        "dir-cycle-named-like-shard",
        _dir_cycle_named_like_shard,
        NotARegularFile,
        "is a directory",
    ),
    Case("dir-shard-self-symlink", _dir_shard_self_loop, NotARegularFile, "loop"),
    Case("torch-pickle-runs-code", _pickle_runs_system, ce.UnsafePickle, "posix.system"),
    Case("torch-pickle-size-lie", _pickle_size_lie, ce.TorchCheckpointError, "impossible"),
    Case(
        "torch-legacy-truncated",
        lambda t: _write(_p(t, "model.pt"), b"\x80\x02\x8a\x0a\x6c\xfc"),
        ce.TorchCheckpointError,
        "not a valid pickle",
    ),
    Case(
        "torch-legacy-pickle-runs-code", _legacy_pickle_runs_exec, ce.UnsafePickle, "builtins.exec"
    ),
]
