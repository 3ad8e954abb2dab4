"""SVG snapshots of every view at 80x24 and 120x40 (pytest-textual-snapshot).

Deterministic by construction: the views are filled from the golden report or
from hand-made trial events with fixed times, the onboarding tree browses a
fixed folder, the HF cache and FUSE answers are injected, cursors do not blink.
Update after an intended change with ``pytest tests/tui --snapshot-update`` and
look at the SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input

from loadscope.engine.bench import Trial
from loadscope.engine.profiler import Frame, Profile
from loadscope.tui.app import LoadscopeApp
from loadscope.tui.screens import ProfileScreen
from loadscope.tui.views import BenchView
from tests.conftest import REPO_ROOT

pytest.importorskip("pytest_textual_snapshot")

GOLDEN = "tests/golden/doctor_emulated.json"
SIZES = [(80, 24), (120, 40)]
every_size = pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)  # relative paths: the same SVG from any checkout


def _app(**kw: Any) -> LoadscopeApp:
    kw.setdefault("browse_root", Path("tests/golden"))
    kw.setdefault("hf_cache", "/nonexistent/hf-cache")
    kw.setdefault("fuse_reason", None)
    return LoadscopeApp(**kw)


async def _settle(pilot: Any) -> None:
    # not workers.wait_for_complete(): the pilot itself runs as a worker
    for worker in list(pilot.app.workers):
        if worker.group == "hf-scan":
            await worker.wait()
    for inp in pilot.app.screen.query(Input):
        inp.cursor_blink = False
    await pilot.pause()


@every_size
def test_onboarding(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(_app(), terminal_size=size, run_before=_settle)


@every_size
@pytest.mark.parametrize("tab", ["1", "2", "3"], ids=["probes", "bench", "advice"])
def test_report_views(snap_compare: Any, size: tuple[int, int], tab: str) -> None:
    assert snap_compare(_app(report=GOLDEN), press=[tab], terminal_size=size, run_before=_settle)


async def _live(pilot: Any) -> None:
    """A run in progress: mmap done, auto half-way, from fixed events (a fake clock)."""
    app = pilot.app
    app.pop_screen()
    app.running = True
    view = app.query_one(BenchView)
    app.action_tab("bench")
    await pilot.pause()
    mib = 1 << 20
    done = Trial(
        1,
        "mmap",
        "cold",
        1,
        False,
        seconds=1.6,
        bytes=64 * mib,
        bytes_per_s=64 * mib / 1.6,
        major_faults=812,
        read_syscalls=17,
        peak_rss_bytes=290 * mib,
    )
    view.trial_began(done, 0, 6)
    for i in range(1, 33):
        view.sample(1, i * 0.05, min(64 * mib, int(i * 2.1 * mib)), 64 * mib)
    view.trial_ended(done)
    running = Trial(2, "auto", "cold", 1, False)
    view.trial_began(running, 1, 6)
    for i in range(1, 11):
        view.sample(
            2,
            i * 0.01,
            i * 3 * mib,
            64 * mib,
            pid=4242,
            major_faults=0,
            read_syscalls=i * 3,
            read_bytes=i * 3 * mib,
        )
    view.tick()
    app.refresh_bindings()
    await pilot.pause()


@every_size
def test_live_benchmark(snap_compare: Any, size: tuple[int, int]) -> None:
    assert snap_compare(_app(), terminal_size=size, run_before=_live)


class _FixedProfile(ProfileScreen):
    def _run(self) -> None:  # type: ignore[override]
        """No real py-spy: Textual calls the base class's on_mount too, which would run
        it on pid 4242 and race the snapshot with whatever that returned."""

    def on_mount(self) -> None:
        self.show(
            Profile(
                4242,
                True,
                dump='Thread 4242 (active): "MainThread"\n    _touch (strategy.py:88)\n',
                top_self=[
                    Frame("pread (libc.so.6)", 140, 0.7),
                    Frame("_touch (strategy.py:88)", 60, 0.3),
                ],
                top_total=[Frame("load (parallel.py:40)", 200, 1.0)],
                samples=200,
            )
        )


def _dialog(snap_compare: Any, size: tuple[int, int], open_it: Any) -> bool:
    """The golden report's app, settled, then ``open_it(pilot)``: its snapshot matches."""

    async def before(pilot: Any) -> None:
        await _settle(pilot)
        await open_it(pilot)

    result: bool = snap_compare(_app(report=GOLDEN), terminal_size=size, run_before=before)
    return result


@every_size
def test_profile_dialog(snap_compare: Any, size: tuple[int, int]) -> None:
    async def open_it(pilot: Any) -> None:
        pilot.app.push_screen(_FixedProfile(4242))
        await pilot.pause()
        # The body is set on mount: let its update and the layout after it both land.
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    assert _dialog(snap_compare, size, open_it)


@every_size
def test_compare_dialog(snap_compare: Any, size: tuple[int, int]) -> None:
    async def open_it(pilot: Any) -> None:
        pilot.app.compare([GOLDEN, "tests/golden/doctor_report.json"])
        await pilot.pause()

    assert _dialog(snap_compare, size, open_it)


@every_size
def test_export_dialog(snap_compare: Any, size: tuple[int, int]) -> None:
    async def open_it(pilot: Any) -> None:
        await pilot.press("e")
        await _settle(pilot)

    assert _dialog(snap_compare, size, open_it)
