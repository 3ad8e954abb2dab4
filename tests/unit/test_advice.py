"""Every advice rule on hand-made facts: when it fires, when it must not, and the contradictions."""

from __future__ import annotations

from typing import Any

from loadscope.advice import Facts, advise_facts
from loadscope.bench import Summary

GiB = 1 << 30


def _summary(strategy: str, cache: str, seconds: float, model: int) -> Summary:
    return Summary(strategy, cache, 2, seconds, model / seconds, None, seconds, seconds, seconds)  # type: ignore[arg-type]


def facts(
    cold: dict[str, float],
    warm: dict[str, float] | None = None,
    *,
    storage: str = "fuse",
    model: int = GiB,
    headroom: int | None = 20 * GiB,
    cgroup: int | None = None,
    seq_limit: float | None = 1.5e9,
    limit: float | None = 2e9,
    read_ahead_kb: int | None = 128,
    formats: set[str] | None = None,
    **extra: Any,
) -> Facts:
    return Facts(
        storage_class=storage,
        model_bytes=model,
        headroom_bytes=headroom,
        cgroup_limit_bytes=cgroup,
        limit_bytes_per_s=limit,
        sequential_limit_bytes_per_s=seq_limit,
        parallel_scaling=extra.get("scaling", 8.0),
        read_ahead_kb=read_ahead_kb,
        bdi_path="/sys/class/bdi/0:42",
        fuse=storage == "fuse",
        formats=formats or {"safetensors"},
        cold={k: _summary(k, "cold", v, model) for k, v in cold.items()},
        warm={k: _summary(k, "warm", v, model) for k, v in (warm or {}).items()},
        trial_ids={(k, "cold"): [i + 1] for i, k in enumerate(cold)},
    )


def ids(advice: Any) -> list[str]:
    return [r.id for r in advice.recommendations if not r.optional]


def test_parallel_reads_when_measured_faster_with_the_gain() -> None:
    a = advise_facts(facts({"mmap": 15.5, "fullread": 35.0, "auto": 0.81, "parallel": 6.9}))
    assert a.verdict.status == "problem"
    top = a.recommendations[0]
    assert top.id == "parallel-reads" and top.strategy == "auto"
    assert top.expected_speedup is not None and 19 < top.expected_speedup < 19.3
    assert "0.81 s vs 15.5 s cold" in top.action
    assert top.evidence[0].trial_ids == [3]
    assert "19.1x faster" in a.verdict.headline


def test_small_gains_are_not_a_problem() -> None:
    a = advise_facts(
        facts(
            {"mmap": 1.0, "auto": 0.9, "parallel": 0.95}, storage="network-fs", read_ahead_kb=8192
        )
    )
    assert "parallel-reads" not in ids(a)


def test_read_whole_files_only_when_faster_and_it_fits() -> None:
    a = advise_facts(facts({"mmap": 10.0, "fullread": 4.0}, read_ahead_kb=8192))
    rec = next(r for r in a.recommendations if r.id == "read-whole-files")
    assert rec.expected_speedup == 2.5 and rec.ram_bytes_needed == 2 * GiB
    assert "N copies" in rec.risk
    assert "vllm" in rec.snippets and "diffusers" in rec.snippets and "sglang" in rec.snippets


def test_ram_and_cgroup_guard_blocks_read_whole_files() -> None:
    # A 6 GiB model behind a 4 GiB cgroup limit must not be told to read whole files.
    f = facts(
        {"mmap": 30.0, "fullread": 10.0},
        model=6 * GiB,
        headroom=4 * GiB,
        cgroup=4 * GiB,
        read_ahead_kb=8192,
    )
    a = advise_facts(f)
    assert "read-whole-files" not in [r.id for r in a.recommendations]
    assert any("needs ~12 GiB" in n and "not recommended" in n for n in a.notes)


def test_contradiction_full_read_slower_than_mmap() -> None:
    a = advise_facts(facts({"mmap": 2.28, "fullread": 5.9, "auto": 0.16}))
    assert "read-whole-files" not in [r.id for r in a.recommendations]
    assert any("measured 2.6x slower than mmap" in n for n in a.notes)


def test_raise_readahead_on_latency_bound_fuse() -> None:
    a = advise_facts(facts({"mmap": 15.3}, read_ahead_kb=128))
    rec = next(r for r in a.recommendations if r.id == "raise-readahead")
    assert "128 KiB" in rec.action
    assert "/sys/class/bdi/0:42/read_ahead_kb" in rec.snippets["shell"]
    assert "max_background" in rec.snippets["shell"]


def test_no_readahead_advice_on_local_disk_or_when_already_large() -> None:
    assert "raise-readahead" not in ids(advise_facts(facts({"mmap": 15.3}, storage="local-block")))
    assert "raise-readahead" not in ids(advise_facts(facts({"mmap": 15.3}, read_ahead_kb=8192)))


def test_prewarm_is_optional_and_needs_ram() -> None:
    a = advise_facts(facts({"mmap": 1.0}, {"mmap": 0.05}, storage="local-block", seq_limit=1.1e9))
    rec = next(r for r in a.recommendations if r.id == "prewarm")
    assert rec.optional and rec.ram_bytes_needed == GiB
    tight = advise_facts(facts({"mmap": 1.0}, {"mmap": 0.05}, headroom=GiB // 2))
    assert "prewarm" not in [r.id for r in tight.recommendations]


def test_healthy_local_disk_is_nothing_to_fix() -> None:
    # mmap at 1.07 GB/s against a 1.5 GB/s sequential limit: 71%, healthy even though
    # a strategy is 1.7x faster (listed as an optional tip).
    a = advise_facts(facts({"mmap": 1.0, "auto": 0.58}, storage="local-block", seq_limit=1.5e9))
    assert a.verdict.status == "healthy"
    assert "nothing to fix" in a.verdict.headline
    assert all(r.optional for r in a.recommendations)


def test_slow_local_disk_is_a_problem() -> None:
    a = advise_facts(facts({"mmap": 4.0, "auto": 1.0}, storage="local-block", seq_limit=1.5e9))
    assert a.verdict.status == "problem"


def test_tmpfs_is_healthy() -> None:
    a = advise_facts(facts({}, storage="memory"))
    assert a.verdict.status == "healthy" and "RAM" in a.verdict.headline


def test_wsl_and_pickles() -> None:
    a = advise_facts(facts({"mmap": 5.0}, storage="wsl", formats={"torch"}))
    got = [r.id for r in a.recommendations]
    assert "move-off-wsl-drive" in got and "convert-to-safetensors" in got


def test_no_trials_no_invented_gain() -> None:
    a = advise_facts(facts({}, storage="network-fs", read_ahead_kb=8192))
    assert all(r.expected_speedup is None for r in a.recommendations)
    assert a.verdict.status == "healthy" and "no measured fix" in a.verdict.headline
