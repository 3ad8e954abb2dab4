"""I/O sampler: counter parsing, deltas, blind spots, and a live sample of our own reads."""

from __future__ import annotations

import os
from pathlib import Path

from loadscope.probes.iosampler import (
    IoSample,
    IoSampler,
    blind_signals,
    delta,
    parse_block_stat,
    parse_mountstats,
)

BLOCK_STAT = (
    "   52311     1203  8397822    19832   160021   120012  9823744   412233"
    "        3   230044   432112 0 0 0 0"
)

MOUNTSTATS = """\
device proc mounted on /proc with fstype proc
device fs1:/export mounted on /mnt/models with fstype nfs4 statvers=1.1
\topts:\trw,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,acregmin=3,nconnect=8
\tper-op statistics
\t        NULL: 1 1 0 44 24 0 0 0 0
\t        READ: 2048 2048 0 286720 2147745792 12 40960 41984 0
\t       WRITE: 0 0 0 0 0 0 0 0 0
device fs2:/other mounted on /mnt/other with fstype nfs statvers=1.1
\t        READ: 7 7 0 0 7000 0 70 80 0
"""


def test_parse_block_stat() -> None:
    st = parse_block_stat(BLOCK_STAT)
    assert (st.read_ios, st.read_merges, st.read_sectors, st.read_ticks_ms, st.in_flight) == (
        52311,
        1203,
        8397822,
        19832,
        3,
    )


def test_parse_mountstats_picks_the_right_mount() -> None:
    st = parse_mountstats(MOUNTSTATS, "/mnt/models")
    assert (
        st is not None
        and st.ops == 2048
        and st.bytes_recv == 2147745792
        and st.rtt_ms_total == 40960
    )
    other = parse_mountstats(MOUNTSTATS, "/mnt/other")
    assert other is not None and other.ops == 7
    assert parse_mountstats(MOUNTSTATS, "/proc") is None


def test_delta_average_request_size() -> None:
    a = IoSample(0.0, 10, 1, 0, 0, 0, parse_block_stat("100 0 800 5 0 0 0 0 0 0 0"))
    b = IoSample(2.0, 30, 5, 1 << 20, 3, 4096, parse_block_stat("110 4 2848 25 0 0 0 0 1 0 0"))
    d = delta(a, b)
    assert d.seconds == 2.0 and d.minflt == 20 and d.majflt == 4 and d.syscr == 3
    assert d.block_read_ios == 10 and d.block_read_bytes == 2048 * 512 and d.block_read_merges == 4
    assert d.avg_request_bytes == 2048 * 512 / 10
    assert d.nfs_read_ops is None


def test_blind_signals_name_fuse_fault_undercount() -> None:
    fuse = blind_signals("fuse")
    assert "majflt" in fuse and "minor" in fuse["majflt"]
    assert "read_bytes" in fuse and "block_requests" in fuse
    assert "majflt" not in blind_signals("local-block")


def test_live_sampler_sees_our_reads(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 20))
    sampler = IoSampler()
    before = sampler.sample()
    with open(path, "rb") as fh:
        while fh.read(4096):
            pass
    d = delta(before, sampler.sample())
    assert d.rchar is not None and d.rchar >= 1 << 20
    assert d.syscr is not None and d.syscr >= 256
