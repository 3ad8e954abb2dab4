"""The app as the Pilot tests build and drive it: the golden reports to browse, no HF
cache, no FUSE, and one call that runs a test's steps against a fresh app."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from textual.app import App, ComposeResult
from textual.widget import Widget

from loadscope.tui.app import LoadscopeApp
from loadscope.tui.screens import OnboardingScreen
from tests.conftest import REPO_ROOT

GOLDEN = REPO_ROOT / "tests" / "golden" / "doctor_emulated.json"

#: A test's steps: given the running app and its pilot.
Steps = Callable[[LoadscopeApp, Any], Awaitable[None]]
T = TypeVar("T")


def make_app(**kw: Any) -> LoadscopeApp:
    kw.setdefault("browse_root", REPO_ROOT / "tests" / "golden")
    kw.setdefault("hf_cache", "/nonexistent/loadscope-hf-cache")
    kw.setdefault("fuse_reason", "not in tests")
    # The runs time safetensors' routes only: which stack's code wins is not the app
    # tests' subject (test_the_app_passes_its_stacks_to_the_run checks the plumbing).
    kw.setdefault("stacks", ("safetensors",))
    return LoadscopeApp(**kw)


def drive(
    steps: Steps, *, size: tuple[int, int] = (80, 24), settle: bool = True, **kw: Any
) -> LoadscopeApp:
    """Run ``steps`` on ``make_app(**kw)`` in a ``size`` terminal, after a first pause
    unless ``settle`` is False; returns the app once it has closed."""
    app = make_app(**kw)

    async def go() -> None:
        async with app.run_test(size=size) as pilot:
            if settle:
                await pilot.pause()
            await steps(app, pilot)

    asyncio.run(go())
    return app


def notices(app: LoadscopeApp, severity: str | None = None) -> list[str]:
    """The app's notifications (of one ``severity``, or all), oldest first."""
    return [n.message for n in app._notifications if severity in (None, n.severity)]


async def onboarding_error(app: LoadscopeApp, pilot: Any) -> str:
    """Ctrl+R on the onboarding screen that must refuse it: the error it shows."""
    await pilot.press("ctrl+r")
    assert isinstance(app.screen, OnboardingScreen)
    return str(app.screen.query_one("#onboarding-error").render())


def in_a_view(
    view: Widget, steps: Callable[[Any, Any], Awaitable[T]], size: tuple[int, int] = (100, 40)
) -> T:
    """``view`` alone in an app of ``size``: what ``steps`` (given the app and its pilot)
    reads from it."""

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield view

    async def go() -> T:
        app = One()
        async with app.run_test(size=size) as pilot:
            return await steps(app, pilot)

    return asyncio.run(go())
