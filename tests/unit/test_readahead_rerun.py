"""The readahead check reruns from_pretrained itself with the readahead raised where that
rerun is cheap, judged by what the raised readahead gave load_file here: capped at its
time as is (14 s for 1 GiB on the emulated disk), it was never rerun there, where it
took 2.6 s, and transformers' readahead route printed "not measured here"."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from loadscope.diagnosis import readahead_trial
from loadscope.engine.bench import Summary


def _bench(hf_s: float) -> Any:
    hf = Summary("hf-pretrained", "cold", 1, hf_s, 1e9 / hf_s, None, hf_s, hf_s, hf_s)  # type: ignore[arg-type]
    return SimpleNamespace(summary=[hf])


@pytest.mark.parametrize(
    ("hf_s", "speedup", "reruns"),
    [(14.0, 10.0, True), (14.0, 1.2, False), (4.0, 1.0, True), (30.0, 2.0, False)],
)
def test_from_pretrained_is_rerun_where_its_raised_load_is_cheap(
    monkeypatch: pytest.MonkeyPatch, hf_s: float, speedup: float, reruns: bool
) -> None:
    ran: list[object] = []
    monkeypatch.setattr(readahead_trial, "run_bench", lambda *a, **k: ran.append(a) or "report")
    got = readahead_trial._from_pretrained_raised(None, _bench(hf_s), speedup, [])  # type: ignore[arg-type]
    assert (got == "report") is reruns and bool(ran) is reruns
