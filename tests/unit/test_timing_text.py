"""``loadscope time``'s table: medians and ratios from the runs, each fix's change said,
a failed command said as failed with no median, every line within 80 columns."""

from __future__ import annotations

from loadscope.diagnosis.timing import TimeReport, Variant
from loadscope.diagnosis.timing_text import to_text
from loadscope.engine.usercmd import RunResult


def _run(seconds: float | None, status: str = "ok", reason: str = "") -> RunResult:
    r = RunResult(status, seconds, "exit", 0 if status == "ok" else 3, reason)  # type: ignore[arg-type]
    r.read_call_bytes, r.major_faults, r.peak_rss_bytes = 256 << 20, 2048, 600 << 20
    r.storage_read_bytes, r.device = 256 << 20, "8:0"
    r.device_requests, r.device_request_bytes = 2048, 131072.0
    return r


def _report(*variants: Variant) -> TimeReport:
    argv = ["python", "/a/very/long/path/to/the/users/own/script/that/loads/the/model.py"]
    return TimeReport(argv, ["/m/model.safetensors"], 256 << 20, 3, list(variants))


def test_medians_and_ratios_come_from_the_runs() -> None:
    base = Variant("as-is", runs=[_run(4.0), _run(3.0), _run(5.0)], cold=[True] * 3)
    warm = Variant("warm", "nothing lasting", runs=[_run(1.0), _run(1.5), _run(1.2)])
    warm.before_s, warm.cold = [1.0, 1.0, 1.0], [True] * 3
    copy = Variant("copy", skipped="not run: the command has no {model} to point at a copy")
    text = to_text(_report(base, warm, copy))
    table = [line for line in text.splitlines() if line[:2] == "  " and line[2:3] != " "]
    rows = {line.split()[0]: line for line in table}
    assert "4 s" in rows["as"] and "1.00x" in rows["as"]
    # warm: its runs with the warm-up they need (2.0, 2.5, 2.2): median 2.2, 4/2.2 = 1.82x.
    assert "2.2 s" in rows["loadscope"] and "1.82x" in rows["loadscope"]
    assert "warm 1 s of it" in rows["loadscope"]
    assert "{model}" in text and "256 MiB from storage (1.00x the model)" in text
    assert "2,048 read requests of 128 KiB" in text
    assert all(len(line) <= 80 for line in text.splitlines()), text
    doc = _report(base, warm, copy).to_dict()
    (w,) = [v for v in doc["variants"] if v["name"] == "warm"]
    assert abs(w["speedup"] - 4.0 / 2.2) < 1e-9


def test_a_failed_command_has_no_median() -> None:
    failed = _run(None, "failed", "the command failed (exit 3): not timed")
    report = _report(Variant("as-is", runs=[failed], cold=[True]))
    text = to_text(report)
    assert "the command failed (exit 3): not timed" in text and "median" not in text
    assert int(report.exit_code()) == 1


def test_fuse_reads_are_said_uncounted_not_zero() -> None:
    r = _run(2.0)
    r.device, r.storage_read_bytes, r.device_requests = "0:52", 0, None
    text = to_text(_report(Variant("as-is", runs=[r], cold=[True])))
    assert "not counted by the kernel" in text and "0 B from storage" not in text
