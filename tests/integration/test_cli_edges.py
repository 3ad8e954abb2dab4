"""Edges of the headless commands found by trying them as a demanding user would.

* ``warm --lock --json -``: stdout held the JSON and then "holding the lock ...", so
  ``| python -m json.tool`` failed; the line is not part of the report.
* A report that cannot be written (a full disk) left an empty file under its name.
* A second SIGINT (Ctrl-C twice, or a kill of the whole group that the supervising parent
  also passes on) broke into the cleanup the first one started: a KeyboardInterrupt
  traceback from ``main``'s ``finally``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loadscope.tools.synth import synthesize
from tests.conftest import REPO_ROOT, CliRunner


def test_warm_lock_json_to_stdout_is_only_the_json(cli: CliRunner, tmp_path: Path) -> None:
    synthesize(tmp_path / "m", size_bytes=1 << 20)
    result = cli("warm", str(tmp_path / "m"), "--lock", "--for", "0.05", "--json", "-")
    assert result.code == 0, result
    doc = json.loads(result.out)  # nothing but the report
    assert doc["mode"] == "warm"
    if doc["locked_bytes"]:
        assert "holding the lock for 0.05 s" in result.err


def test_a_report_that_cannot_be_written_leaves_no_file(tmp_path: Path) -> None:
    # A write past RLIMIT_FSIZE fails as a full disk does (EFBIG instead of ENOSPC).
    path = tmp_path / "r.json"
    code = f"""
import resource, signal
from loadscope.base.errors import LoadscopeError
from loadscope.cli.common import write_file
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    write_file({str(path)!r}, "x" * 100_000)
except LoadscopeError as exc:
    print(int(exc.exit_code), exc)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert proc.stdout.startswith("7 cannot write"), (proc.stdout, proc.stderr)
    assert not path.exists()


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_cannot_break_into_the_cleanup(first: signal.Signals) -> None:
    from loadscope.cli import _once

    calls: list[int] = []
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        handler = _once(lambda signum, _frame: calls.append(signum))
        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
        handler(first, None)
        assert calls == [first]
        # Both are ignored from now on: the cleanup the first one started runs to its end.
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def test_bench_budget_holds_against_many_repeats(cli: CliRunner, tmp_path: Path) -> None:
    # bench --repeats 10000 --budget 5 ran for minutes: the budget sized samples but never
    # ended the run. The rounds it leaves no time for are now skipped and counted.
    synthesize(tmp_path / "m", size_bytes=1 << 20)
    result = cli(
        "bench", str(tmp_path / "m"), "--strategies", "mmap", "--repeats", "1000",
        "--budget", "3", "--json", "-",
    )  # fmt: skip
    assert result.code == 0, result
    doc = json.loads(result.out)
    skipped = [t for t in doc["trials"] if t["status"] == "skipped"]
    assert skipped and all(t["reason"] == "the time budget was spent" for t in skipped)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # Each was dropped in silence: two reports into one file kept only the last
        # written, --md beside --html rendered HTML, and warm ignored the options that
        # belong to the other mode.
        (["doctor", "{m}", "--json", "{t}/r", "--md", "{t}/./r"], "--json and --md both name"),
        (["warm", "{m}", "--for", "1"], "--for goes with --lock"),
        (["warm", "{m}", "--allow-drop-caches"], "--allow-drop-caches goes with --evict"),
        (["report", "{t}/r.json", "--md", "--html"], "--md and --html: pick one"),
    ],
)
def test_options_that_would_be_ignored_are_refused(
    cli: CliRunner, tmp_path: Path, argv: list[str], said: str
) -> None:
    model = synthesize(tmp_path / "m", size_bytes=1 << 20).root
    result = cli(*(a.format(m=model, t=tmp_path) for a in argv))
    assert result.code == 2 and said in result.err, result
    assert len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()
