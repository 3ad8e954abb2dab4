"""A sampled ``prewarm`` fills its sample the way ``loadscope warm`` fills the whole files."""

from __future__ import annotations

from pathlib import Path

from loadscope.loaders.pagefill import WARM_BLOCK_BYTES, WARM_THREADS
from loadscope.loaders.safetensors_format import read_header
from loadscope.loaders.strategies.prewarm import (
    MIN_SAMPLE_BLOCK,
    command_target,
    sample_fill,
    whole_blocks,
)
from loadscope.loaders.strategy import FileRequest
from loadscope.tools.synth import synthesize


def _requests(tmp_path: Path, size: int, share: float) -> list[FileRequest]:
    model = synthesize(tmp_path / "m", size, seed=5)
    path = next(model.root.glob("*.safetensors"))
    header = read_header(path)
    picked, got = [], 0
    for t in header.tensors:
        if got >= share * header.file_size:
            break
        picked.append(t.name)
        got += t.nbytes
    return [FileRequest(str(path), header.file_size, "safetensors", tuple(picked))]


def test_a_sample_has_as_many_blocks_as_the_whole_file(tmp_path: Path) -> None:
    # 64 MiB of tensors and a header: 5 blocks of 16 MiB on 8 threads. A quarter of it in
    # 16 MiB blocks would be 1-2 blocks (1-2 threads busy, the estimate far off); scaled
    # it is as many blocks (of at least 1 MiB), each of the command's busy threads stood for.
    files = _requests(tmp_path, 64 << 20, 0.25)
    assert command_target(files) is None  # a sample: the command cannot read it
    whole = whole_blocks(files, WARM_BLOCK_BYTES)
    assert whole == -(-files[0].size_bytes // WARM_BLOCK_BYTES) == 5
    fill = sample_fill(files, WARM_THREADS, WARM_BLOCK_BYTES)
    assert fill.block_bytes < WARM_BLOCK_BYTES
    assert fill.block_bytes >= MIN_SAMPLE_BLOCK and fill.block_bytes % 4096 == 0
    assert whole <= len(fill.jobs) <= whole + len(fill.jobs) // 4 + 1
    assert fill.total_bytes >= 0.2 * files[0].size_bytes


def test_a_whole_file_keeps_the_commands_blocks(tmp_path: Path) -> None:
    files = _requests(tmp_path, 8 << 20, 2.0)
    whole = [FileRequest(files[0].path, files[0].size_bytes, "safetensors", None)]
    assert command_target(whole) == files[0].path  # the command itself runs
    fill = sample_fill(whole, WARM_THREADS, WARM_BLOCK_BYTES)
    assert len(fill.jobs) == whole_blocks(whole, WARM_BLOCK_BYTES)
    assert fill.total_bytes == files[0].size_bytes
