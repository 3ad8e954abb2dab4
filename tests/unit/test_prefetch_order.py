"""``prefetch`` reads each file ahead and loads it before it reads the next one.

Reading every file ahead first and loading afterwards left the first files' pages idle
for a whole model's read; on a 4 GiB load on a busy machine 1-5% of them were reclaimed
by then and read again through the slow path (``benchmarks/bench_prefetch_order.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from loadscope.loaders.strategies import get
from loadscope.loaders.strategy import FileRequest, LoadContext
from loadscope.tools.synth import synthesize


def _requests(root: Path) -> list[FileRequest]:
    paths = sorted(root.glob("*.safetensors"))
    return [FileRequest(str(p), p.stat().st_size, "safetensors") for p in paths]


def test_each_file_is_loaded_before_the_next_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = synthesize(tmp_path / "m", 4 << 20, shards=2, seed=3)
    files = _requests(model.root)
    assert len(files) == 2
    read: list[str] = []
    real_open, real_preadv = os.open, os.preadv
    names: dict[int, str] = {}

    def tracked_open(path: Any, flags: int, *args: Any) -> int:
        fd = real_open(path, flags, *args)
        names[fd] = os.fspath(path)
        return fd

    def tracked_preadv(fd: int, buffers: Any, offset: int) -> int:
        read.append(names.get(fd, "?"))
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "open", tracked_open)
    monkeypatch.setattr(os, "preadv", tracked_preadv)
    loaded = get("prefetch").load(files, LoadContext())
    next(loaded)
    assert set(read) == {files[0].path}, "the second file was read before the first was loaded"
    got = dict(loaded)
    assert files[1].path in read
    # Every tensor of both files, with the bytes load_file gives.
    want = {**load_file(files[0].path), **load_file(files[1].path)}
    assert len(got) == len(want) - 1
    for name, tensor in got.items():
        assert tensor.equal(want[name])


def test_a_sample_reads_ahead_only_its_tensors(tmp_path: Path) -> None:
    model = synthesize(tmp_path / "m", 4 << 20, shards=2, seed=3)
    first, second = _requests(model.root)
    names = sorted(load_file(first.path))[:2]
    sampled = [FileRequest(first.path, first.size_bytes, "safetensors", tuple(names)), second]
    got = dict(get("prefetch").load(sampled, LoadContext()))
    assert set(names) <= set(got)
    assert set(got) - set(names) == set(load_file(second.path))
