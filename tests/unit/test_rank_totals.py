"""A multi-rank trial's totals (``engine/rank_launch.py``): the bytes that reached storage
are unknown, not 0, where the counter cannot see the reads."""

from __future__ import annotations

import pytest

from loadscope.engine.rank_launch import _finished
from loadscope.engine.rank_records import BroadcastTrial, RankResult

MODEL = 64 << 20


def _rank(rank: int, storage: int | None) -> RankResult:
    return RankResult(
        rank=rank, seconds=1.0, bytes_read=MODEL, read_calls=4, storage_read_bytes=storage,
        rchar=MODEL, peak_rss_bytes=1 << 30, peak_rss_scope="trial", ru_maxrss_bytes=1 << 30,
        tensors=10, tensor_bytes=MODEL, collectives=0, verified=True,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("cache", "verified", "storage", "total", "amplification"),
    [
        # FUSE, NFS: read_bytes counts block-layer reads only; a verified-cold load read
        # every byte from storage, so its 0 is a blind counter (shown 0.0x before).
        ("cold", True, 0, None, None),
        # A cold cache that could not be verified: 0 may be true (pages were resident).
        ("cold", False, 0, 0, 0.0),
        # Warm: nothing reached storage, truly.
        ("warm", True, 0, 0, 0.0),
        # A counter that sees the reads: both ranks' bytes.
        ("cold", True, MODEL, 2 * MODEL, 2.0),
    ],
)
def test_storage_totals_are_unknown_where_the_counter_is_blind(
    cache: str, verified: bool, storage: int, total: int | None, amplification: float | None
) -> None:
    trial = BroadcastTrial(1, "independent", cache, 1, False, cache_verified=verified)  # type: ignore[arg-type]
    done = _finished(trial, {0: _rank(0, storage), 1: _rank(1, storage)}, MODEL)
    assert done.storage_read_bytes_total == total
    assert done.storage_amplification == amplification
