"""As a new user would: the real command in a real terminal (tmux), keys sent, screens read."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT, cmdline_of, tagged_processes

pytestmark = pytest.mark.integration

TMUX = shutil.which("tmux")


def _tm(session: str, *args: str) -> list[str]:
    """A tmux command on the session's own server (``-L``): tests in parallel, or one test
    right after another, never share a server that is starting or exiting (a shared one
    failed ``new-session`` with "server exited unexpectedly" under load)."""
    return ["tmux", "-L", session, *args]


def _capture(session: str) -> str:
    return subprocess.run(
        _tm(session, "capture-pane", "-p", "-t", session),
        capture_output=True,
        text=True,
        check=False,
    ).stdout


@contextlib.contextmanager
def _tmux(session: str, cmd: str, size: tuple[int, int], tag: str | None = None) -> Iterator[None]:
    """``cmd`` in a detached tmux session of ``size`` (columns, rows) at the repository root,
    its processes tagged ``LOADSCOPE_TEST_TAG=tag``; the session is killed on the way out."""
    env = {k: v for k, v in os.environ.items() if k != "TMUX"} | {"TERM": "xterm-256color"}
    if tag is not None:
        env["LOADSCOPE_TEST_TAG"] = tag
    columns, rows = size
    subprocess.run(
        _tm(session, "new-session", "-d", "-s", session, "-x", str(columns), "-y", str(rows), cmd),
        check=True,
        cwd=REPO_ROOT,
        env=env,
    )
    socket = subprocess.run(
        _tm(session, "display-message", "-p", "#{socket_path}"),
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    try:
        yield
    finally:
        subprocess.run(_tm(session, "kill-server"), check=False, capture_output=True)
        if socket:
            Path(socket).unlink(missing_ok=True)


def _wait_for_the_chart(session: str) -> None:
    """Up to 120 s for the app's rate chart: the trials have started."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "B/s│" not in _capture(session):
        time.sleep(0.3)
    assert "B/s│" in _capture(session), "the trials never started"


def _wait_for_file(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.2)


def _left_after(tag: str, timeout_s: float) -> list[Any]:
    """The processes tagged ``tag`` still alive ``timeout_s`` on (none: sooner)."""
    deadline = time.monotonic() + timeout_s
    while (left := tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (Debian: apt-get install tmux)")
def test_tui_in_tmux_shows_the_chart_and_the_verdict(tmp_path: Path) -> None:
    session = f"loadscope-test-{os.getpid()}"
    exe = Path(sys.executable).parent / "loadscope"
    status = tmp_path / "status"
    cmd = f"{exe} tui --stack safetensors synthetic:32MiB --budget 25; echo $? > {status}"
    with _tmux(session, cmd, (100, 30)):
        seen_chart = seen_verdict = False
        deadline = time.monotonic() + 240
        screen = ""
        while time.monotonic() < deadline and not (seen_chart and seen_verdict):
            screen = _capture(session)
            seen_chart = seen_chart or ("B/s│" in screen and "cold" in screen)
            seen_verdict = "HEALTHY" in screen or "PROBLEM" in screen
            time.sleep(0.5)
        assert seen_chart, screen
        assert seen_verdict, screen
        subprocess.run(_tm(session, "send-keys", "-t", session, "2"), check=True)
        time.sleep(1)
        assert "strategy" in _capture(session)  # the results table on the benchmark tab
        subprocess.run(_tm(session, "send-keys", "-t", session, "C-q"), check=True)
        _wait_for_file(status, 20)
        assert status.exists() and status.read_text().strip() == "0"


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (Debian: apt-get install tmux)")
def test_sigterm_mid_run_stops_the_app_cleanly(tmp_path: Path) -> None:
    """kill (SIGTERM) while trials run: exit 143, the terminal's app screen left, no worker."""
    import uuid

    session = f"loadscope-term-{os.getpid()}"
    exe = Path(sys.executable).parent / "loadscope"
    status = tmp_path / "status"
    tag = uuid.uuid4().hex
    cmd = f"{exe} tui --stack safetensors synthetic:64MiB --budget 60; echo $? > {status}"
    cmd += "; sleep 30"
    with _tmux(session, cmd, (100, 30), tag):
        _wait_for_the_chart(session)
        app = [p for p in tagged_processes(tag) if "tui" in cmdline_of(p)]
        assert len(app) == 1, [cmdline_of(p) for p in tagged_processes(tag)]
        app[0].terminate()
        _wait_for_file(status, 30)
        assert status.exists() and status.read_text().strip() == "143"
        time.sleep(0.5)
        assert "B/s│" not in _capture(session), "the app's screen was left on the terminal"
        left = _left_after(tag, 10)
        assert not left, [cmdline_of(p) for p in left]


#: How many times the terminal is killed mid-run (the hang was a race: 5 of 6 tries).
DROP_RUNS = int(os.environ.get("LOADSCOPE_DROP_RUNS", "1"))


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (Debian: apt-get install tmux)")
@pytest.mark.parametrize("attempt", range(DROP_RUNS))
def test_losing_the_terminal_mid_run_leaves_no_process(tmp_path: Path, attempt: int) -> None:
    """The terminal killed while trials draw (an SSH drop): the app stayed alive, stuck in
    Textual's shutdown; now it exits after a bounded grace and its engine follows, within
    5 s. ``LOADSCOPE_DROP_RUNS=10`` repeats it."""
    import uuid

    from loadscope.tools.emulator import fuse_unavailable_reason

    session = f"loadscope-drop-{os.getpid()}-{attempt}"
    exe = Path(sys.executable).parent / "loadscope"
    tag = uuid.uuid4().hex
    emulate = " --emulate" if fuse_unavailable_reason() is None else ""
    cmd = f"{exe} tui --stack safetensors synthetic:64MiB --budget 60 --synth-dir {tmp_path}"
    cmd += emulate
    with _tmux(session, cmd, (80, 24), tag):
        _wait_for_the_chart(session)
    left = _left_after(tag, 5)
    assert not left, [cmdline_of(p) for p in left]
    assert list(tmp_path.iterdir()) == [], "the synthetic checkpoint was left behind"


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (Debian: apt-get install tmux)")
def test_losing_the_terminal_mid_doctor_leaves_nothing(tmp_path: Path) -> None:
    """The CLI's terminal killed mid-run (an SSH drop, SIGHUP to the whole foreground
    group): ``doctor`` died at once, leaving its synthetic checkpoint, its scratch and the
    fork server's folder behind; now it cleans up as on SIGTERM, its children too."""
    import uuid

    session = f"loadscope-hup-{os.getpid()}"
    exe = Path(sys.executable).parent / "loadscope"
    tag = uuid.uuid4().hex
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    cmd = f"env TMPDIR={scratch} {exe} doctor synthetic:64MiB --budget 60"
    with _tmux(session, cmd, (80, 24), tag):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "trial " not in _capture(session):
            time.sleep(0.2)
        assert "trial " in _capture(session), "the trials never started"
    left = _left_after(tag, 10)
    assert not left, [cmdline_of(p) for p in left]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and list(scratch.iterdir()):
        time.sleep(0.2)
    assert list(scratch.iterdir()) == [], "left behind"


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (Debian: apt-get install tmux)")
def test_doctor_on_a_terminal_redraws_its_progress_line(tmp_path: Path) -> None:
    """Issue 19: `doctor` on a terminal said "diagnosing ..." and then nothing for minutes.
    Now one line is redrawn in place: the trial, its rate and the time left, changing at
    least once a second; and stdout still carries only the report."""
    session = f"loadscope-progress-{os.getpid()}"
    exe = Path(sys.executable).parent / "loadscope"
    out = tmp_path / "out.json"
    cmd = f"{exe} doctor synthetic:128MiB --budget 12 --synth-dir {tmp_path} --json - > {out}"
    with _tmux(session, f"{cmd}; sleep 60", (80, 24)):
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            len(lines) >= 4 and any("trial " in ln for ln in lines)
        ):
            shown = [ln for ln in _capture(session).splitlines() if "s left" in ln]
            if shown and (not lines or shown[-1] != lines[-1]):
                lines.append(shown[-1])
            time.sleep(0.3)
        assert len(lines) >= 4, lines  # redrawn: the clock moves, trials go by
        assert any("trial " in ln for ln in lines), lines
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "\n}" not in (
            out.read_text() if out.exists() else ""
        ):
            time.sleep(0.3)
        doc = json.loads(out.read_text())  # nothing but the report on stdout
        assert doc["schema_version"] == 1


def test_progress_is_plain_lines_without_a_terminal_and_none_with_quiet() -> None:
    from tests.conftest import run_loadscope

    bench = ("bench", "synthetic:8MiB", "--strategies", "mmap", "--repeats", "1", "--no-warmup")
    plain = run_loadscope(*bench, timeout=120)
    assert plain.code == 0, plain
    steps = plain.err.splitlines()
    assert steps and all(re.match(r"^\[\s*\d+\.\d+s\] ", ln) for ln in steps), steps
    assert any("trial 1/1 mmap cold:" in ln for ln in steps), steps
    quiet = run_loadscope(*bench, "--quiet", timeout=120)
    assert quiet.code == 0 and quiet.err == "", quiet
