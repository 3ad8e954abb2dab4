"""As a new user would: the real command in a real terminal (tmux), keys sent, screens read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.integration

TMUX = shutil.which("tmux")


def _capture(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True, check=False
    ).stdout


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (Debian: apt-get install tmux)")
def test_tui_in_tmux_shows_the_chart_and_the_verdict(tmp_path: Path) -> None:
    session = f"loadscope-test-{os.getpid()}"
    exe = Path(sys.executable).parent / "loadscope"
    status = tmp_path / "status"
    cmd = f"{exe} tui synthetic:32MiB --budget 25; echo $? > {status}"
    env = {**os.environ, "TERM": "xterm-256color"}
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "100", "-y", "30", cmd],
        check=True,
        cwd=REPO_ROOT,
        env=env,
    )
    try:
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
        subprocess.run(["tmux", "send-keys", "-t", session, "2"], check=True)
        time.sleep(1)
        assert "strategy" in _capture(session)  # the results table on the benchmark tab
        subprocess.run(["tmux", "send-keys", "-t", session, "C-q"], check=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not status.exists():
            time.sleep(0.2)
        assert status.exists() and status.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)
