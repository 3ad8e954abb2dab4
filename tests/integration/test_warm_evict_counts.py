"""``warm`` counts the model's bytes apart from the bytes it read (issue 37 item 7), and
eviction on memory-backed storage says once that there is no cold state and fails
(issue 41 item 5)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadscope.base.units import format_bytes
from loadscope.engine.bench_records import BenchReport, Trial
from loadscope.loaders.cachestate import prepare_cache
from loadscope.probes import pagecache
from loadscope.probes.pagecache import ColdCache
from loadscope.report.bench_text import unverified_items
from loadscope.tools.synth import synthesize
from tests.conftest import CliRunner

pytestmark = pytest.mark.integration


def _weights(root: Path) -> list[Path]:
    return sorted(root.glob("*.safetensors"))


def test_a_top_up_is_read_but_not_counted_as_the_models_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: CliRunner
) -> None:
    # A 256 MiB model printed "warmed 512 MiB": the re-read of a file whose pages were
    # evicted again while the rest was read counted as more model.
    import loadscope.actions.warm as warm_mod

    model = synthesize(tmp_path / "m", 4 << 20, seed=5).root
    real = warm_mod._fraction
    asked: dict[str, int] = {}

    def fraction(path: str) -> float | None:
        asked[path] = asked.get(path, 0) + 1
        # 1st: before warming; 2nd: right after it, when pressure took half back.
        return 0.5 if asked[path] == 2 else real(path)

    monkeypatch.setattr(warm_mod, "_fraction", fraction)
    out = tmp_path / "warm.json"
    r = cli("warm", str(model), "--json", str(out), "--quiet")
    assert r.code == 0, r.err
    total = sum(p.stat().st_size for p in _weights(model))
    doc = json.loads(out.read_text())
    assert doc["model_bytes"] == total
    assert doc["bytes_read"] == 2 * total and doc["top_up_bytes"] == total
    head = r.out.splitlines()[0]
    assert head.startswith(f"warmed {format_bytes(total)} in "), head
    assert f"read {format_bytes(2 * total)}" in head and "re-read" in head, head


def test_a_warm_without_top_up_says_the_models_size_once(tmp_path: Path, cli: CliRunner) -> None:
    model = synthesize(tmp_path / "m", 2 << 20, seed=6).root
    r = cli("warm", str(model), "--quiet")
    assert r.code == 0, r.err
    total = sum(p.stat().st_size for p in _weights(model))
    head = r.out.splitlines()[0]
    assert head.startswith(f"warmed {format_bytes(total)} in ") and "re-read" not in head


@pytest.fixture
def on_tmpfs() -> Iterator[Path]:
    """A folder on memory-backed storage (/dev/shm), removed afterwards."""
    found = subprocess.run(
        ["findmnt", "-n", "-o", "FSTYPE", "-T", "/dev/shm"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0 or found.stdout.split()[-1:] != ["tmpfs"]:
        pytest.skip("no tmpfs at /dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="loadscope-test-", dir="/dev/shm"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_memory_backed_storage_is_recognised(on_tmpfs: Path, tmp_path: Path) -> None:
    memory_backed = pagecache.memory_backed
    assert memory_backed(on_tmpfs) == "tmpfs"
    assert memory_backed(on_tmpfs / "m.safetensors") == "tmpfs"
    assert memory_backed(tmp_path) is None or str(tmp_path).startswith("/dev/shm")


def test_evict_on_tmpfs_says_once_there_is_no_cold_state_and_fails(
    on_tmpfs: Path, cli: CliRunner
) -> None:
    model = synthesize(on_tmpfs / "m", 3 << 20, shards=3, seed=7).root
    r = cli("warm", str(model), "--evict")
    assert r.code == 1, (r.out, r.err)
    assert r.out.startswith("evicted nothing"), r.out
    assert r.out.count("no cold state") == 1, r.out
    assert "still resident after eviction" not in r.out  # the per-file hint, 3 times before
    assert "drops them host-wide" not in r.out


def test_evict_of_a_disk_file_still_succeeds(tmp_path: Path, cli: CliRunner) -> None:
    model = synthesize(tmp_path / "m", 2 << 20, seed=8).root
    r = cli("warm", str(model), "--evict")
    assert r.code == 0, (r.out, r.err)
    assert r.out.startswith("evicted 1 file(s)")


def test_no_host_wide_drop_for_memory_backed_files(
    on_tmpfs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = on_tmpfs / "w.safetensors"
    path.write_bytes(b"\0" * (1 << 20))

    def refuse() -> None:
        raise AssertionError("dropped the host's page cache for a tmpfs file")

    monkeypatch.setattr(pagecache, "drop_caches", refuse)
    ev = ColdCache(allow_drop_caches=True).evict(path)
    assert not ev.verified and ev.memory_backed == "tmpfs"
    assert "no cold state" in ev.note and "--allow-drop-caches drops" not in ev.note


def test_a_cold_trial_on_tmpfs_says_it_once_for_every_file(on_tmpfs: Path) -> None:
    files = []
    for i in range(3):
        p = on_tmpfs / f"{i}.safetensors"
        p.write_bytes(b"\1" * (1 << 20))
        files.append((str(p), 1 << 20))
    ok, _, note = prepare_cache(files, "cold", ColdCache())
    assert not ok
    assert note.count("no cold state") == 1, note


def test_the_bench_lists_one_reason_once_for_the_trials_it_kept_out() -> None:
    note = "model.safetensors: tmpfs is memory-backed storage: ... no cold state"
    trials = [
        Trial(i, s, "cold", 1, False, cache_verified=False, detail={"cache_note": note})
        for i, s in [(1, "mmap"), (2, "auto"), (3, "direct"), (7, "mmap")]
    ]
    trials.append(
        Trial(9, "auto", "cold", 2, False, cache_verified=False, detail={"cache_note": "other"})
    )
    report = BenchReport({}, {}, trials, [], {}, None, [])
    lines = unverified_items(report.to_dict())
    assert lines[0] == "5 trial(s) kept out of the medians: cache state not verified"
    assert [line for line in lines if note in line] == [f"4 trials (#1-3, #7): {note}"]
    assert "#9 auto cold: other" in lines
