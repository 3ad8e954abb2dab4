"""The fastest cold load against the probe's two ceilings on the same mount (issue 17)."""

from __future__ import annotations

from typing import Any

from loadscope.report.sections import ceiling_line

GB = 1e9


def _probe(parallel: list[float], into_ram: float | None) -> dict[str, Any]:
    thr: dict[str, Any] = {
        "status": "ok",
        "parallel": [{"readers": 4**i, "bytes_per_s": r} for i, r in enumerate(parallel)],
    }
    if into_ram is not None:
        thr["into_ram"] = {"bytes_per_s": into_ram, "bytes_read": 1 << 30}
    return {"throughput": thr}


def _bench(device: str = "cpu", **medians: float) -> dict[str, Any]:
    return {
        "options": {"device": device},
        "target": {"total_bytes": 2 * 10**9},
        "summary": [
            {"strategy": name, "cache": "cold", "median_bytes_per_s": rate}
            for name, rate in medians.items()
        ]
        + [{"strategy": "mmap", "cache": "warm", "median_bytes_per_s": 9 * GB}],
    }


def test_the_fastest_cold_load_is_held_to_both_ceilings() -> None:
    line = ceiling_line(
        _probe([0.5 * GB, 1.8 * GB], 1.3 * GB), _bench(mmap=0.4 * GB, auto=1.4 * GB)
    )
    assert line == (
        "fastest cold load: `auto` at 1.4 GB/s; 1.08x what this storage delivers into fresh"
        " RAM (1.3 GB/s: at the ceiling a loader can reach here), 0.78x its best parallel"
        " read into reused buffers (1.8 GB/s)"
    )


def test_a_load_under_the_into_ram_ceiling_says_by_how_much() -> None:
    line = ceiling_line(_probe([1.8 * GB], 1.3 * GB), _bench(auto=0.65 * GB))
    assert line is not None and "0.50x what this storage delivers into fresh RAM" in line
    assert "50% under the ceiling a loader can reach here" in line


def test_without_the_into_ram_point_only_the_storage_ceiling_is_named() -> None:
    line = ceiling_line(_probe([2 * GB], None), _bench(auto=GB))
    assert line == (
        "fastest cold load: `auto` at 1 GB/s; 0.50x its best parallel read into reused"
        " buffers (2 GB/s)"
    )


def test_no_line_without_a_cold_time_a_scan_or_on_the_gpu() -> None:
    assert ceiling_line(_probe([2 * GB], GB), _bench()) is None
    assert ceiling_line(_probe([], GB), _bench(auto=GB)) is None
    assert ceiling_line({"throughput": {"status": "error"}}, _bench(auto=GB)) is None
    assert ceiling_line(_probe([2 * GB], GB), _bench("cuda", staged=GB)) is None
