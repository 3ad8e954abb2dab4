"""The bytes meter of ``warm`` and ``copy``: lines when piped, nothing when quiet."""

from __future__ import annotations

import io

from loadscope.cli.progress import LINE_RE, ByteMeter

MiB = 1 << 20


def _feed(meter: ByteMeter) -> None:
    for i in range(1, 101):  # 100 MiB over 10 s, a call every 0.1 s
        meter(i * MiB, 100 * MiB, i / 10)
    meter.close()


def test_lines_mode_says_a_line_every_interval_and_the_last_count() -> None:
    out = io.StringIO()
    _feed(ByteMeter("warming", "lines", out, every_s=2.0))
    lines = out.getvalue().splitlines()
    assert 4 <= len(lines) <= 6
    assert all(LINE_RE.match(ln) and "warming" in ln for ln in lines)
    assert "100 MiB of 100 MiB" in lines[-1] and "left" not in lines[-1]
    assert "s left" in lines[0]


def test_off_mode_prints_nothing_and_live_mode_clears_its_line() -> None:
    quiet = io.StringIO()
    _feed(ByteMeter("copying", "off", quiet))
    assert quiet.getvalue() == ""
    live = io.StringIO()
    _feed(ByteMeter("copying", "live", live))
    text = live.getvalue()
    assert "\n" not in text and text.count("\r") > 10
    assert text.endswith("\r") and text.rsplit("\r", 2)[-2].strip() == ""


def test_the_rate_is_decimal_as_in_every_report() -> None:
    out = io.StringIO()
    _feed(ByteMeter("warming", "lines", out, every_s=2.0))
    # 100 MiB in 10 s: it said "10 MiB/s" beside the "10.5 MB/s" of the reports.
    assert "10.5 MB/s" in out.getvalue().splitlines()[-1] and "iB/s" not in out.getvalue()
