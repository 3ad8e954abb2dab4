"""A rank's read to the GPU goes through pinned buffers with overlapped copies (issue 38).

Rank 0 used to read a file into pageable CPU memory, then ``.to(device)``: the copy
waited for the whole read. The pipeline here is tested with the staged path's fake
device, which checks that no slot is refilled before its copy was waited for.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from loadscope.loaders.rank import _Reads, read_to_device
from tests.unit.test_staged import FakeDevice


@pytest.mark.parametrize("size", [0, 1, 4095, (5 << 20) + 3])
def test_the_file_arrives_whole_through_the_ring(tmp_path: Path, size: int) -> None:
    data = torch.randint(0, 256, (size,), dtype=torch.uint8)
    path = tmp_path / "f.bin"
    path.write_bytes(data.numpy().tobytes())
    dev = FakeDevice()
    reads = _Reads()
    buf = read_to_device(str(path), size, dev, reads, chunk=1 << 20)
    assert torch.equal(buf, data)
    assert reads.bytes == size and not dev.violations and dev.error is None
    if size > 2 << 20:
        assert dev.max_in_flight > 1  # copies overlapped the next reads


def test_a_file_that_changed_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    with pytest.raises(RuntimeError, match="the plan says 200"):
        read_to_device(str(path), 200, FakeDevice(), _Reads(), chunk=64)
