"""``loadscope inspect``: what a checkpoint holds, read from headers only, never unpickled.

For safetensors files the header parser gives every tensor; for torch
checkpoints the archive directory and the pickle's opcodes give the format,
storages and dtype bytes. Across shards, the index's weight map is checked
against the tensors the shards really hold. A torch pickle that imports anything
a weights-only load refuses (it would run code) is refused.

:func:`open_checked` is how every command that reads, loads, copies or probes a
model opens it: the same inspection first, so a hostile or broken file is one
line and its exit code before any probe, worker or write happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadscope.base.safeio import bounded, stall_timeout_s
from loadscope.base.units import format_bytes
from loadscope.loaders.errors import DuplicateTensor, UnsafePickle
from loadscope.loaders.safetensors_format import read_header
from loadscope.loaders.torch_format import read_torch_info
from loadscope.loaders.torch_safety import refuse_unsafe_torch
from loadscope.model.targets import InvalidIndex, Target, files_only, open_target

SCHEMA_VERSION = 1

#: Upper edges of the tensor-size histogram buckets, in bytes (the last bucket is open).
SIZE_BUCKET_EDGES = (64 << 10, 1 << 20, 16 << 20, 256 << 20)
SIZE_BUCKET_LABELS = ("< 64 KiB", "64 KiB - 1 MiB", "1 - 16 MiB", "16 - 256 MiB", ">= 256 MiB")


def size_bucket(nbytes: int) -> int:
    """Index of the histogram bucket for a tensor of ``nbytes``."""
    for i, edge in enumerate(SIZE_BUCKET_EDGES):
        if nbytes < edge:
            return i
    return len(SIZE_BUCKET_EDGES)


@dataclass(slots=True)
class FileInspection:
    path: str
    format: str  # "safetensors", "torch-zip" or "torch-legacy"
    size_bytes: int
    tensor_count: int | None
    header_bytes: int | None = None
    #: dtype -> number of tensors (safetensors) and dtype -> bytes (both formats).
    dtype_tensors: dict[str, int] = field(default_factory=dict)
    dtype_bytes: dict[str, int] = field(default_factory=dict)
    #: Tensors per size bucket (safetensors only; see SIZE_BUCKET_LABELS).
    size_histogram: list[int] | None = None
    #: Tensors whose file offset is not a multiple of their element size.
    unaligned_tensors: int | None = None
    largest_tensor_bytes: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Inspection:
    spec: str
    kind: str
    root: str
    index: str | None
    files: list[FileInspection]
    schema_version: int = SCHEMA_VERSION

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def tensor_count(self) -> int | None:
        counts = [f.tensor_count for f in self.files]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def dtype_bytes(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for f in self.files:
            total.update(f.dtype_bytes)
        return dict(total.most_common())

    def dtype_tensors(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for f in self.files:
            total.update(f.dtype_tensors)
        return dict(total.most_common())

    def size_histogram(self) -> list[int] | None:
        hists = [f.size_histogram for f in self.files if f.size_histogram is not None]
        if not hists:
            return None
        return [sum(col) for col in zip(*hists, strict=True)]

    def unaligned_tensors(self) -> int | None:
        vals = [f.unaligned_tensors for f in self.files if f.unaligned_tensors is not None]
        return sum(vals) if vals else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "target": {
                "spec": self.spec,
                "kind": self.kind,
                "root": self.root,
                "index": self.index,
            },
            "totals": {
                "files": len(self.files),
                "bytes": self.total_bytes,
                "tensors": self.tensor_count,
                "dtype_bytes": self.dtype_bytes(),
                "dtype_tensors": self.dtype_tensors(),
                "size_histogram": (
                    None
                    if (h := self.size_histogram()) is None
                    else dict(zip(SIZE_BUCKET_LABELS, h, strict=True))
                ),
                "unaligned_tensors": self.unaligned_tensors(),
            },
            "files": [asdict(f) for f in self.files],
        }


def inspect_target(target: Target) -> Inspection:
    """Inspect every weight file of ``target``; raises on the first malformed file."""
    files: list[FileInspection] = []
    owners: dict[str, str] = {}
    for wf in target.files:
        if wf.format == "safetensors":
            header = read_header(wf.path)
            hist = [0] * len(SIZE_BUCKET_LABELS)
            dtype_tensors: Counter[str] = Counter()
            dtype_bytes: Counter[str] = Counter()
            for t in header.tensors:
                hist[size_bucket(t.nbytes)] += 1
                dtype_tensors[t.dtype] += 1
                dtype_bytes[t.dtype] += t.nbytes
                if t.name in owners:
                    raise DuplicateTensor(
                        f"tensor {t.name!r} is in both {owners[t.name]!r} and"
                        f" {_relative(wf.path, target.root)!r}",
                        path=target.root,
                    )
                owners[t.name] = _relative(wf.path, target.root)
            files.append(
                FileInspection(
                    path=str(wf.path),
                    format="safetensors",
                    size_bytes=header.file_size,
                    tensor_count=len(header.tensors),
                    header_bytes=header.header_bytes,
                    dtype_tensors=dict(dtype_tensors.most_common()),
                    dtype_bytes=dict(dtype_bytes.most_common()),
                    size_histogram=hist,
                    unaligned_tensors=sum(1 for _ in header.unaligned()),
                    largest_tensor_bytes=max((t.nbytes for t in header.tensors), default=0),
                )
            )
        else:
            info = read_torch_info(wf.path)
            if info.unsafe_globals:
                more = len(info.unsafe_globals) - 1
                raise UnsafePickle(
                    f"its pickle imports {info.unsafe_globals[0]}"
                    + (f" (and {more} more)" if more else "")
                    + ", which a weights-only load refuses: unpickling it would run code, not"
                    " rebuild tensors (a malicious or non-weights file); refusing it, nothing"
                    " was executed",
                    path=wf.path,
                )
            files.append(
                FileInspection(
                    path=str(wf.path),
                    format=f"torch-{info.format}",
                    size_bytes=info.file_size,
                    tensor_count=info.tensor_count,
                    dtype_bytes=dict(Counter(info.dtype_bytes).most_common()),
                    notes=list(info.notes)
                    + (
                        [f"{info.storage_count} storages"] if info.storage_count is not None else []
                    ),
                )
            )
    if target.weight_map is not None and target.index is not None and owners:
        _check_weight_map(target, owners)
    return Inspection(
        spec=target.report_spec,
        kind=target.kind,
        root=target.report_root,
        index=os.path.abspath(target.index) if target.index else None,  # as root is
        files=files,
    )


def check_target(target: Target, *, loads: bool = False) -> Inspection:
    """What a command must know before it touches ``target``'s data: every header (or
    torch archive and pickle) is sound, the shards agree with each other and the index,
    and no pickle would run code; with ``loads``, that this torch may load pickles.

    Headers only, each read bounded by its file's size: fast, and before any probe,
    worker, fork server or write. A model in another source than files
    (``probes/sources.py``) is read only by its source's strategies: nothing to check
    here (their trials' tensors are checked against each other)."""
    if not target.on_files:
        return Inspection(
            spec=target.report_spec,
            kind=target.kind,
            root=target.report_root,
            index=None,
            files=[],
        )
    report = bounded(
        lambda: inspect_target(target),
        stall_timeout_s(),
        lambda: f"the headers under {target.root}",
    )
    if loads and "torch" in target.formats:
        refuse_unsafe_torch()
    return report


@contextlib.contextmanager
def open_checked(
    spec: str,
    *,
    synth_dir: str | os.PathLike[str] | None = None,
    loads: bool = False,
    only_files: str = "",
) -> Iterator[Target]:
    """:func:`~loadscope.model.targets.open_target`, then :func:`check_target`;
    ``only_files`` names a command that reads files only, refused another source."""
    with open_target(spec, synth_dir=synth_dir) as target:
        if only_files:
            files_only(target, only_files)
        check_target(target, loads=loads)
        yield target


def _relative(path: Path, root: Path) -> str:
    """A shard's name as an index writes it: its path under the model folder."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _check_weight_map(target: Target, owners: dict[str, str]) -> None:
    assert target.weight_map is not None and target.index is not None
    for tensor, shard in target.weight_map.items():
        found = owners.get(tensor)
        if found is None:
            raise InvalidIndex(
                f"lists tensor {tensor!r} in {shard!r}, but no shard holds it", path=target.index
            )
        if found != posixpath.normpath(shard):
            raise InvalidIndex(
                f"lists tensor {tensor!r} in {shard!r}, but it is in {found!r}", path=target.index
            )
    extra = sorted(set(owners) - set(target.weight_map))
    if extra:
        raise InvalidIndex(
            f"does not list {len(extra)} tensor(s) that the shards hold (first: {extra[0]!r})",
            path=target.index,
        )


# -- rendering ------------------------------------------------------------------------------


def to_json(report: Inspection) -> str:
    return json.dumps(report.to_dict(), indent=2)


def _bar(n: int, biggest: int, width: int = 24) -> str:
    return "#" * (0 if biggest == 0 else max(1 if n else 0, round(width * n / biggest)))


def to_text(report: Inspection) -> str:
    """The human-readable report: fits 80 columns."""
    lines = [f"target   {report.spec}  ({report.kind})", f"root     {report.root}"]
    if report.index:
        lines.append(f"index    {report.index}")
    tensors = report.tensor_count
    lines.append(
        f"files    {len(report.files)}, {format_bytes(report.total_bytes)}"
        f" ({report.total_bytes:,} bytes), {'?' if tensors is None else f'{tensors:,}'} tensors"
    )
    lines.append("")
    width = max(len(f.path.rsplit("/", 1)[-1]) for f in report.files)
    width = min(max(width, 4), 44)
    lines.append(f"  {'file':<{width}}  {'format':<13} {'size':>10} {'tensors':>8}")
    for f in report.files:
        name = f.path.rsplit("/", 1)[-1]
        if len(name) > width:
            name = "..." + name[-(width - 3) :]
        count = "?" if f.tensor_count is None else f"{f.tensor_count:,}"
        lines.append(
            f"  {name:<{width}}  {f.format:<13} {format_bytes(f.size_bytes):>10} {count:>8}"
        )
    dtype_bytes = report.dtype_bytes()
    if dtype_bytes:
        lines += ["", "dtype mix"]
        dtype_tensors = report.dtype_tensors()
        total = sum(dtype_bytes.values()) or 1
        for dtype, nbytes in dtype_bytes.items():
            n_tensors = dtype_tensors.get(dtype)
            counted = f"{n_tensors:>7,} tensors" if n_tensors is not None else " " * 15
            lines.append(
                f"  {dtype:<8} {counted}  {format_bytes(nbytes):>10}  {100 * nbytes / total:5.1f}%"
            )
    hist = report.size_histogram()
    if hist is not None:
        lines += ["", "tensor sizes"]
        biggest = max(hist)
        for label, n in zip(SIZE_BUCKET_LABELS, hist, strict=True):
            lines.append(f"  {label:<15} {n:>7,}  {_bar(n, biggest)}")
    unaligned = report.unaligned_tensors()
    if unaligned is not None:
        lines += ["", f"unaligned offsets  {unaligned} tensor(s) not aligned to their element size"]
    notes = [f"{f.path.rsplit('/', 1)[-1]}: {n}" for f in report.files for n in f.notes]
    if notes:
        lines += ["", "notes"] + [f"  {n}" for n in notes]
    return "\n".join(lines)
