"""``time --json`` read back: its schema refuses what the renderer could not lay out (a
run's field of the wrong type, no variant at all), and a report round-trips to the text
``time`` printed."""

from __future__ import annotations

import copy
import json

import pytest

from loadscope.diagnosis.timing import TimeReport, Variant
from loadscope.diagnosis.timing_text import to_text
from loadscope.engine.usercmd import RunResult, TreeSample
from loadscope.report.schema import SchemaError, check


def _report() -> TimeReport:
    run = RunResult("ok", 2.0, "exit", 0, resident_after=1.0)
    run.samples = [TreeSample(0.1, 1 << 20, 1 << 20, 30 << 20, 0.5)]
    warm = RunResult("ok", 1.0, "exit", 0, resident_after=1.0)
    return TimeReport(
        ["python", "load.py", "m"],
        ["/m/model.safetensors"],
        64 << 20,
        1,
        [Variant("as-is", runs=[run], cold=[True]), Variant("warm", runs=[warm], cold=[True])],
    )


def test_a_time_report_round_trips_to_the_same_text() -> None:
    report = _report()
    doc = json.loads(json.dumps(report.to_dict()))
    check(doc, "time")
    assert to_text(TimeReport.from_dict(doc)) == to_text(report)
    assert "2.00x" in to_text(report)


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [
        (("variants", 0, "runs", 0, "seconds"), "x", "expected a number or null"),
        (("variants",), [], "should be non-empty"),
        (("variants", 0, "runs", 0, "samples", 0), {"t": 1.0}, "missing .read_bytes."),
    ],
)
def test_a_malformed_time_report_is_refused_naming_the_field(
    where: tuple[object, ...], value: object, said: str
) -> None:
    doc = copy.deepcopy(_report().to_dict())
    at = doc
    for key in where[:-1]:
        at = at[key]  # type: ignore[index]
    at[where[-1]] = value  # type: ignore[index]
    with pytest.raises(SchemaError, match=said):
        check(doc, "time")
