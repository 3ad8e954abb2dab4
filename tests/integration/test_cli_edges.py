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
from tests.conftest import CliRunner, run_here


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
    proc = run_here([sys.executable, "-c", code], timeout=60)
    assert proc.stdout.startswith("7 cannot write"), (proc.stdout, proc.stderr)
    assert not path.exists()


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter from the repository (its output captured)."""
    return run_here([sys.executable, "-c", code], timeout=60)


@pytest.mark.parametrize(
    ("first", "second", "raised"),
    [
        (signal.SIGINT, signal.SIGINT, "KeyboardInterrupt"),
        (signal.SIGTERM, signal.SIGINT, "Terminated"),
        (signal.SIGINT, signal.SIGTERM, "KeyboardInterrupt"),
    ],
)
def test_a_second_signal_cannot_break_into_the_cleanup_and_a_third_stops(
    first: signal.Signals, second: signal.Signals, raised: str
) -> None:
    # The handler main() installs, driven in a child: the first signal stops the command,
    # the second (of either kind) only says the cleanup is under way (it used to raise
    # into the cleanup: a KeyboardInterrupt traceback), the third ends it by the signal.
    code = f"""
import os, signal, sys, time
from loadscope.cli import _stop_once
stop = _stop_once()
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
try:
    os.kill(os.getpid(), {int(first)})
    time.sleep(5)
except BaseException as exc:
    print(type(exc).__name__, flush=True)
os.kill(os.getpid(), {int(second)})
print("cleanup goes on", flush=True)
os.kill(os.getpid(), {int(second)})
time.sleep(5)
print("not reached", flush=True)
"""
    proc = _python(code)
    assert proc.stdout.splitlines() == [raised, "cleanup goes on"], proc
    assert "cleaning up; once more to stop at once" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.returncode == -int(second)


@pytest.mark.parametrize(
    ("sig", "raised"), [(signal.SIGINT, "KeyboardInterrupt"), (signal.SIGTERM, "Terminated")]
)
def test_a_stop_that_lands_in_a_weakref_callback_still_stops(
    sig: signal.Signals, raised: str
) -> None:
    # A Ctrl-C during `copy` landed in a WeakSet callback: Python printed "Exception
    # ignored in: <function WeakSet...>" with a traceback, swallowed the KeyboardInterrupt
    # and the copy ran to its end. The stop is now raised again where it can be.
    code = f"""
import signal, sys, time, weakref
from loadscope.cli import _stop_once
stop = _stop_once()
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGALRM, stop.alarm)
sys.unraisablehook = stop.unraisable
class Thing:
    pass
thing = Thing()
ref = weakref.ref(thing, lambda _: signal.raise_signal({int(sig)}))
try:
    del thing  # the callback runs, the handler raises inside it
    time.sleep(5)
    print("went on", flush=True)
except BaseException as exc:
    print(type(exc).__name__, flush=True)
"""
    proc = _python(code)
    assert proc.stdout.splitlines() == [raised], proc
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc


def test_bench_budget_holds_against_many_repeats(cli: CliRunner, tmp_path: Path) -> None:
    # bench --repeats 1000 --budget 5 ran for minutes: the budget sized samples but never
    # ended the run. The rounds it leaves no time for are now skipped and counted.
    synthesize(tmp_path / "m", size_bytes=1 << 20)
    result = cli(
        "bench", str(tmp_path / "m"), "--strategies", "mmap", "--repeats", "1000",
        "--budget", "3", "--json", "-",
    )  # fmt: skip
    assert result.code == 0, result
    doc = json.loads(result.out)
    skipped = [t for t in doc["trials"] if t["status"] == "skipped"]
    assert skipped and all(t["reason"].startswith("the time budget was spent") for t in skipped)
    assert any(t["status"] == "ok" for t in doc["trials"])  # the budget ran trials first


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


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["demo", "--size", "8MiB", "--work-dir", "{file}"], 3, "no such directory for the demo"),
        (["demo", "--size", "8MiB", "--work-dir", "{missing}"], 3, "no such directory for"),
        (["demo", "--size", "1TiB", "--work-dir", "{dir}"], 8, "use --size or --work-dir"),
        (["doctor", "synthetic:1TiB", "--synth-dir", "{dir}"], 8, "or --synth-dir"),
    ],
)
def test_a_scratch_folder_that_cannot_hold_the_model_is_one_line_before_any_work(
    cli: CliRunner, tmp_path: Path, argv: list[str], code: int, says: str
) -> None:
    """The demo's --work-dir a file, missing or too small was an internal error
    (NotADirectoryError) after its first line; now one line, as --synth-dir's."""
    (tmp_path / "file").write_text("x")
    where = {"file": tmp_path / "file", "missing": tmp_path / "no" / "such", "dir": tmp_path}
    result = cli(*[a.format(**where) for a in argv])
    assert result.code == code, result
    assert says in result.err and len(result.err.strip().splitlines()) == 1, result.err
    assert "Traceback" not in result.err and "internal error" not in result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("fmt", ["--md", "--html", "--text"])
def test_stdout_on_a_full_disk_is_one_line_and_the_io_error_code(fmt: str) -> None:
    """``> /dev/full`` (stdout on a full disk) was an internal error with exit 70."""
    golden = Path(__file__).resolve().parents[1] / "golden" / "doctor_report.json"
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "loadscope", "report", str(golden), fmt],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert proc.returncode == 7, proc.stderr
    assert proc.stderr == "loadscope: cannot write the output: No space left on device\n"
