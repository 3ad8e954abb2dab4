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


def test_the_fastest_cold_load_against_the_probes_best_read() -> None:
    line = ceiling_line(
        _probe([0.5 * GB, 1.8 * GB], 1.3 * GB), _bench(mmap=0.4 * GB, auto=1.4 * GB)
    )
    assert line == (
        "fastest cold load (measured whole): `auto` at 1.4 GB/s, 0.78x the probe's best read"
        " (1.8 GB/s); into fresh RAM the probe read 1.3 GB/s"
    )
    # Issue 37: "1.13x what this storage delivers into fresh RAM (... at the ceiling a
    # loader can reach here)": a value loaders beat is never called a ceiling.
    assert "ceiling" not in line


def test_a_load_above_the_probe_says_the_probe_under_read() -> None:
    line = ceiling_line(_probe([0.7 * GB], 0.6 * GB), _bench(auto=1.4 * GB))
    assert line is not None and "2.00x the probe's best read (700 MB/s)" in line
    assert "under-read this storage, so its figure is no limit here" in line


def test_without_the_into_ram_point_only_the_best_read_is_named() -> None:
    line = ceiling_line(_probe([2 * GB], None), _bench(auto=GB))
    assert line == (
        "fastest cold load (measured whole): `auto` at 1 GB/s, 0.50x the probe's best read (2 GB/s)"
    )


def test_an_estimate_is_not_held_to_the_probe() -> None:
    bench = _bench(auto=3 * GB)
    bench["summary"][0]["scope"] = "sampled"
    assert ceiling_line(_probe([2 * GB], None), bench) is None


def test_the_html_chart_draws_the_same_value(tmp_path: object) -> None:
    from loadscope.report.html import _trial_charts

    doc = {"probe": _probe([0.5 * GB, 1.8 * GB], 1.3 * GB), "bench": _bench(auto=1.4 * GB)}
    doc["bench"]["trials"] = []
    chart = _trial_charts(doc)[0]
    assert "probe&#x27;s best read" in chart or "probe's best read" in chart
    assert "1.8 GB/s" in chart


def test_no_line_without_a_cold_time_a_scan_or_on_the_gpu() -> None:
    assert ceiling_line(_probe([2 * GB], GB), _bench()) is None
    assert ceiling_line(_probe([], GB), _bench(auto=GB)) is None
    assert ceiling_line({"throughput": {"status": "error"}}, _bench(auto=GB)) is None
    assert ceiling_line(_probe([2 * GB], GB), _bench("cuda", staged=GB)) is None
