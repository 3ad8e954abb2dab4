"""``copy`` reads the source as ``auto`` reads a cold file (issue 37 item 7): many large
O_DIRECT requests in flight where the filesystem allows it, buffered preads where it
refuses them, and the source's read rate said apart from DEST's write rate."""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loadscope.actions.copydest import CopyRefused
from loadscope.actions.localcopy import PARTIAL_SUFFIX, copy_model
from loadscope.loaders.buffers import o_direct_ok
from loadscope.model.targets import resolve
from loadscope.probes.pagecache import ColdCache
from loadscope.tools.synth import synthesize
from tests.conftest import CliRunner

pytestmark = pytest.mark.integration


def _cold(root: Path) -> None:
    for p in root.glob("*.safetensors"):
        ColdCache().evict(p)


def _same_tree(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert sorted(p.name for p in b.iterdir()) == names
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes(), n


def _odd_model(tmp_path: Path) -> Path:
    """A model whose weights end off a page boundary (the O_DIRECT tail is read buffered)."""
    root = synthesize(tmp_path / "m", 3 << 20, seed=21).root
    weights = next(root.glob("*.safetensors"))
    assert weights.stat().st_size % 4096, "want a size off the page size"
    return root


def test_a_cold_source_is_read_with_o_direct_and_the_rates_are_apart(
    tmp_path: Path, cli: CliRunner
) -> None:
    root = _odd_model(tmp_path)
    if not o_direct_ok(str(next(root.glob("*.safetensors")))):
        pytest.skip("this filesystem refuses O_DIRECT")
    _cold(root)
    out = tmp_path / "copy.json"
    r = cli("copy", str(root), str(tmp_path / "d"), "--json", str(out), "--quiet")
    assert r.code == 0, r.err
    _same_tree(root, tmp_path / "d")
    doc = json.loads(out.read_text())
    weights = [f for f in doc["files"] if f["relative"].endswith(".safetensors")]
    assert [f["read"] for f in weights] == ["O_DIRECT"]
    total = sum(f["size_bytes"] for f in doc["files"])
    read, write = doc["source_read"], doc["write"]
    assert read["bytes"] == total and read["seconds"] > 0 and read["bytes_per_s"] > 0
    assert read["threads"] == 12 and read["block_bytes"] == 1 << 20  # auto's defaults
    assert write["bytes"] == total and write["seconds"] > 0
    # Reads and writes overlap: each one's busy time is within the whole copy's.
    assert read["seconds"] <= doc["seconds"] + 0.01 and write["seconds"] <= doc["seconds"] + 0.01
    said = next(line for line in r.out.splitlines() if "source read:" in line)
    assert "O_DIRECT" in said and "12 x 1 MiB requests in flight" in said
    assert any("DEST write:" in line for line in r.out.splitlines())


def _refuse_direct_open(monkeypatch: pytest.MonkeyPatch) -> None:
    real_open: Callable[..., int] = os.open

    def no_direct(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", no_direct)


def test_a_filesystem_that_refuses_o_direct_is_read_buffered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _odd_model(tmp_path)
    _cold(root)
    _refuse_direct_open(monkeypatch)
    report = copy_model(resolve(str(root)), tmp_path / "d", threads=3, block_bytes=64 << 10)
    _same_tree(root, tmp_path / "d")
    weights = next(f for f in report.files if f.relative.endswith(".safetensors"))
    assert weights.read == "buffered pread (the filesystem refuses O_DIRECT: Invalid argument)"
    assert report.source_bytes_read == sum(f.size_bytes for f in report.files)
    assert not list((tmp_path / "d").rglob(f"*{PARTIAL_SUFFIX}"))


def test_o_direct_reads_refused_after_the_open_fall_back_to_buffered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Some filesystems take an O_DIRECT open and then fail its reads with EINVAL.
    root = _odd_model(tmp_path)
    if not o_direct_ok(str(next(root.glob("*.safetensors")))):
        pytest.skip("this filesystem refuses O_DIRECT opens")
    _cold(root)
    direct_fds: set[int] = set()
    real_open: Callable[..., int] = os.open
    real_preadv = os.preadv

    def track(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        fd = real_open(path, flags, *args, **kw)
        if flags & os.O_DIRECT:
            direct_fds.add(fd)
        return fd

    def preadv(fd: int, buffers: Any, offset: int, *args: Any) -> int:
        if fd in direct_fds:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_preadv(fd, buffers, offset, *args)

    monkeypatch.setattr(os, "open", track)
    monkeypatch.setattr(os, "preadv", preadv)
    report = copy_model(resolve(str(root)), tmp_path / "d", threads=4, block_bytes=256 << 10)
    weights = next(f for f in report.files if f.relative.endswith(".safetensors"))
    monkeypatch.undo()
    assert direct_fds, "the source was never opened with O_DIRECT"
    _same_tree(root, tmp_path / "d")
    assert weights.read == "buffered pread (the filesystem refuses O_DIRECT reads: EINVAL)"


def test_a_rerun_checks_the_source_the_same_way(tmp_path: Path) -> None:
    root = _odd_model(tmp_path)
    copy_model(resolve(str(root)), tmp_path / "d")
    _cold(root)
    again = copy_model(resolve(str(root)), tmp_path / "d")
    assert {f.status for f in again.files} == {"already-there"} and again.bytes_copied == 0
    assert again.source_bytes_read == sum(f.size_bytes for f in again.files)
    # A file in DEST that differs in one byte is found by the block comparison.
    victim = next((tmp_path / "d").glob("*.safetensors"))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(CopyRefused, match="differs from the source"):
        copy_model(resolve(str(root)), tmp_path / "d")


def test_the_emulated_network_disk_gets_large_requests(tmp_path: Path) -> None:
    # The page cache cut the copy's reads into 128 KiB readahead requests (65 for 8 MiB,
    # 6.2 s for 512 MiB at 5 ms where load_model took 0.5 s); O_DIRECT asks 1 MiB at a time.
    from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason

    if (reason := fuse_unavailable_reason()) is not None:
        pytest.skip(f"needs the emulated slow disk: {reason}")
    src = synthesize(tmp_path / "src", 8 << 20, seed=22)
    settings = EmulatorSettings(latency_s=0.005, jitter_s=0.0, readahead_kb=128)
    with emulated_disk(src.root, tmp_path / "mnt", settings, log_requests=True) as disk:
        _cold(disk.path)
        assert disk.log is not None
        disk.log.clear()
        report = copy_model(resolve(str(disk.path)), tmp_path / "d")
        sizes = Counter(
            r.size for r in disk.log.requests() if r.path.endswith(".safetensors") and r.size > 4096
        )
    # The weights (8 MiB and a header) in whole 1 MiB requests, but for the tail.
    assert sizes[1 << 20] >= 7, sizes
    assert sum(n for size, n in sizes.items() if size < 1 << 20) <= 1, sizes
    assert report.read_bytes_per_s is not None
    shutil.rmtree(tmp_path / "d")
