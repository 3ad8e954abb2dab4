"""The bytes a load request covers, and tensors built from a buffer of them.

Shared by the strategies that read file bytes themselves (full read, parallel,
O_DIRECT, prefetch, the GPU stagers): which tensors a request asks for, the
contiguous spans they occupy, the page-cache fill ranges for those spans, torch
dtypes by safetensors name, and zero-copy tensor views on a buffer of the bytes.
May import the rest of ``loaders`` below the strategies (the format reader, the
request record); never a strategy.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from loadscope.loaders.requests import FileRequest, Tensors
from loadscope.loaders.safetensors_format import SafetensorsHeader, TensorEntry

if TYPE_CHECKING:
    import torch

    from loadscope.loaders.pagefill import FillRange

_TORCH_DTYPES: dict[str, str] = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "U16": "uint16",
    "I32": "int32",
    "U32": "uint32",
    "I64": "int64",
    "U64": "uint64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F8_E8M0": "float8_e8m0fnu",
}


def torch_dtype(name: str) -> torch.dtype:
    import torch

    attr = _TORCH_DTYPES.get(name)
    if attr is None or not hasattr(torch, attr):
        raise ValueError(f"dtype {name} has no torch equivalent in this torch build")
    dtype: torch.dtype = getattr(torch, attr)
    return dtype


def selected(header: SafetensorsHeader, request: FileRequest) -> list[TensorEntry]:
    """The header's tensors a request asks for, in file order."""
    if request.tensors is None:
        return list(header.tensors)
    wanted = set(request.tensors)
    return [t for t in header.tensors if t.name in wanted]


def group_by_span(
    header: SafetensorsHeader, entries: list[TensorEntry]
) -> list[tuple[int, int, list[TensorEntry]]]:
    """``(start, end, entries)`` per contiguous byte range of ``entries``."""
    groups: list[tuple[int, int, list[TensorEntry]]] = []
    for t in entries:
        start, end = header.data_offset + t.begin, header.data_offset + t.end
        if groups and groups[-1][1] == start:
            groups[-1] = (groups[-1][0], end, [*groups[-1][2], t])
        else:
            groups.append((start, end, [t]))
    return groups


def byte_ranges(request: FileRequest) -> list[tuple[int, int]]:
    """The file bytes a request needs: the whole file, or the spans of its sampled tensors.

    Strategies that read ahead of the load (prefetch, prewarm) read exactly these, so a
    sampled trial reads what the sample says and its time can be extrapolated.
    """
    if request.tensors is None:
        return [(0, request.size_bytes)]
    from loadscope.loaders.safetensors_format import read_header

    header = read_header(request.path)
    return [(start, end) for start, end, _ in group_by_span(header, selected(header, request))]


def fill_ranges(requests: list[FileRequest]) -> list[FillRange]:
    """:func:`byte_ranges` of every request, widened to whole pages, as page-cache fill
    ranges (a span's reads then start on the page boundaries a whole file's reads do)."""
    from loadscope.loaders.pagefill import FillRange

    page = 4096
    out: list[FillRange] = []
    for r in requests:
        for a, b in byte_ranges(r):
            start, end = a - a % page, min(r.size_bytes, -(-b // page) * page)
            if out and out[-1].path == r.path and out[-1].end >= start:
                out[-1] = FillRange(r.path, out[-1].start, max(out[-1].end, end))
            else:
                out.append(FillRange(r.path, start, end))
    return out


def tensors_from_buffer(
    buffer: Any, base_offset: int, header: SafetensorsHeader, entries: list[TensorEntry]
) -> Tensors:
    """Tensors as views on ``buffer``, which holds file bytes starting at ``base_offset``.

    Views are zero-copy; a tensor at an offset its dtype cannot view (unaligned) is copied.
    """
    import torch

    for t in entries:
        dtype = torch_dtype(t.dtype)
        start = header.data_offset + t.begin - base_offset
        if t.nbytes == 0:
            yield t.name, torch.empty(t.shape, dtype=dtype)
            continue
        itemsize = torch.empty((), dtype=dtype).element_size()
        if start % itemsize:
            raw = torch.frombuffer(buffer, dtype=torch.uint8, count=t.nbytes, offset=start).clone()
            yield t.name, raw.view(dtype).reshape(t.shape)
        else:
            view = torch.frombuffer(buffer, dtype=dtype, count=t.nbytes // itemsize, offset=start)
            yield t.name, view.reshape(t.shape)


def read_spans(request: FileRequest) -> Tensors:
    """A sampled request's tensors: one ``pread`` per contiguous span of them (the
    one-big-read pattern, on the bytes the trial is asked to load), each tensor copied
    out of its span's bytes as ``safetensors.torch.load`` copies out of a file's."""
    from loadscope.loaders.safetensors_format import read_header

    header = read_header(request.path)
    fd = os.open(request.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for start, end, entries in group_by_span(header, selected(header, request)):
            span = bytearray(os.pread(fd, end - start, start))
            for name, t in tensors_from_buffer(span, start, header, entries):
                yield name, t.clone()
    finally:
        os.close(fd)


def o_direct_ok(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True
