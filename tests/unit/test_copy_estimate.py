"""The copy recommendation's time rests on the rate copy reads the source at: the probe's
measured read rate (copy reads as ``auto`` does), not the fastest load (issue 37 item 7)."""

from __future__ import annotations

import pytest

from loadscope.advice.placement_rules import copy_estimate
from loadscope.advice.rules import advise_facts
from tests.unit.test_advice import GiB, _disk, facts


def _copy_rec(f: object) -> object:
    return next(r for r in advise_facts(f).recommendations if r.id == "copy-to-local-disk")  # type: ignore[arg-type]


def test_the_copy_time_rests_on_the_probes_read_rate_and_says_so() -> None:
    # auto loads the model at 2.1 GB/s, but the probe measured the storage's parallel
    # reads at 500 MB/s: copy reads that way, so its time rests on 500 MB/s.
    f = facts({"mmap": 40.0, "auto": 4.0}, model=8 * GiB, limit=5e8)
    f.local_disk = _disk(read=8e9, write=2e9)
    e = copy_estimate(f)
    assert e is not None
    read_s, verify_s = 8 * GiB / 5e8, 8 * GiB / 8e9  # 17.2 s, then 1.1 s read back
    assert e.copy_s == pytest.approx(read_s + verify_s)
    assert e.read_bytes_per_s == 5e8 and "probe" in e.read_basis
    rec = _copy_rec(f)
    action = rec.action  # type: ignore[attr-defined]
    assert "the copy takes an estimated ~18.3 s" in action, action
    assert "reading the source at 500 MB/s, the probe's best measured read rate here" in action
    assert "writing at the local disk's measured 2 GB/s" in action
    evidence = {e.what: e.value for e in rec.evidence}  # type: ignore[attr-defined]
    assert evidence["copy's source read rate: the probe's best measured read rate here"] == 5e8


def test_a_slow_local_disk_sets_the_pace_of_the_copy() -> None:
    f = facts({"mmap": 40.0}, model=8 * GiB, limit=2e9)
    f.local_disk = _disk(read=8e9, write=2e8)
    e = copy_estimate(f)
    assert e is not None
    assert e.copy_s == pytest.approx(8 * GiB / 2e8 + 8 * GiB / 8e9)


def test_without_a_probe_rate_the_fastest_load_stands_in_and_is_named() -> None:
    f = facts({"mmap": 40.0, "auto": 10.0}, model=8 * GiB, limit=None)
    f.local_disk = _disk(read=8e9, write=2e9)
    e = copy_estimate(f)
    assert e is not None
    assert e.read_bytes_per_s == pytest.approx(8 * GiB / 10.0)
    assert e.read_basis == "the fastest cold load measured here (auto)"
    assert "the fastest cold load measured here (auto)" in _copy_rec(f).action  # type: ignore[attr-defined]
