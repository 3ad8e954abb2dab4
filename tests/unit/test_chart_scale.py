"""The app's live charts share one scale set by how the series usually read, not by a
phase or a burst (issue 40: a prewarm's page-cache phase put the shared scale at 11 GB/s
and flattened cold loads at 1.3 GB/s to a line at the bottom)."""

from __future__ import annotations

import pytest

from loadscope.tui.charts import BURST_X, shared_scale


def _flat(rate: float, n: int = 20) -> list[tuple[float, float]]:
    return [(i * 0.05, rate) for i in range(n)]


def test_a_fast_phase_clips_instead_of_flattening_the_others() -> None:
    # prewarm: 16 windows filling the cache (0.3 GB/s of model bytes shown: 0), then 4
    # windows loading from it at 11 GB/s.
    prewarm = [*[(i * 0.05, 0.0) for i in range(16)], *[(0.8 + i * 0.05, 11e9) for i in range(4)]]
    y = shared_scale([_flat(1.3e9), _flat(2.1e9), prewarm])
    mean = 4 * 0.05 * 11e9 / 0.95  # its bytes over its time (windows of 0.05 s to 0.95 s)
    assert y == pytest.approx(max(2.1e9, BURST_X * mean) * 1.15) and y < 11e9


def test_series_that_differ_steadily_keep_their_true_ratio() -> None:
    """On the emulated disk mmap reads at 0.1 GB/s and auto at 1.5 GB/s: both steady, the
    scale is auto's, and mmap is low on it because it is slow."""
    assert shared_scale([_flat(0.1e9), _flat(1.5e9)]) == 1.5e9 * 1.15
    assert shared_scale([]) == 0.0


def test_a_short_burst_inside_a_series_clips() -> None:
    burst = [*_flat(1e9), (1.0, 30e9)]  # one window of 30 GB/s
    assert shared_scale([burst]) == 1e9 * 1.15


def test_warm_loads_have_their_own_scale_and_leave_the_cold_curves_readable() -> None:
    """In the app at 80x24 a warm trial at ~13 GB/s put the shared scale at 14.6 GB/s and
    the cold mmap curve (80 MB/s) drew nothing: each cache state now has its own."""
    from loadscope.tui.charts import Series, cache_scales

    def series(label: str, rate: float) -> Series:
        return Series(label, [(i * 0.1, int(rate * i * 0.1)) for i in range(30)], done=True)

    scales = cache_scales(
        [series("mmap cold", 80e6), series("auto cold", 1.3e9), series("api warm", 13e9)], 60
    )
    assert set(scales) == {"cold", "warm"}
    assert 1.3e9 <= scales["cold"] < 2e9  # auto's, with headroom: mmap is 1/16 of it
    assert scales["warm"] >= 13e9 * 0.99
    assert cache_scales([], 60) == {}


def test_a_two_window_page_cache_phase_is_weighed_by_its_time() -> None:
    """Seen at 80x24: prewarm's series is two windows (1.62 s of filling the cache, no load
    bytes; then 0.05 s loading from it at 14 GB/s). Their plain mean (7 GB/s) let its burst
    set the cold charts' scale at 15.9 GB/s; by time it averages 0.16 GB/s and clips."""
    prewarm = [(1.62, 0.0), (1.67, 14e9)]
    auto = [(0.21, 1.29e9)]
    y = shared_scale([auto, prewarm])
    assert y == 1.29e9 * 1.15
