"""The app driven by Pilot with the real engine: onboarding to advice, stop, reports, export."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from loadscope.advice.snippets import snippet_heading, snippets_of
from loadscope.loaders.forkserver import WORKER_NAME
from loadscope.report.store import last, reports_dir
from loadscope.tui.app import LoadscopeApp
from loadscope.tui.messages import StepStarted
from loadscope.tui.probes_view import ProbesView
from loadscope.tui.screens import OnboardingScreen, PromptScreen, SnippetPickScreen
from loadscope.tui.views import AdviceView, BenchView
from tests.conftest import REPO_ROOT
from tests.tui.harness import GOLDEN, drive, notices, onboarding_error


async def _wait_for(pilot: Any, cond: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s")
        await pilot.pause(0.1)


def _workers() -> list[psutil.Process]:
    """Trial workers under this process: forked by the fork server, or spawned (live ones:
    a zombie is a process that has exited and waits to be reaped)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.name() == WORKER_NAME or "loadscope.loaders.worker" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.NoSuchProcess:  # exited meanwhile (ZombieProcess included)
            continue
    return found


def test_onboarding_to_advice_on_a_synthetic_model() -> None:
    """Pick a small synthetic checkpoint, run the real diagnosis, end on the advice."""

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        assert isinstance(app.screen, OnboardingScreen)
        size = app.screen.query_one("#synth-size")
        size.value = ""  # type: ignore[attr-defined]
        size.focus()
        await pilot.press(*"16MiB")
        await _run_to_the_end(app, pilot)
        seen = app.messages_seen
        # the typed messages in order: probes before trials, samples, then the end
        assert seen.index("ProbesReady") < seen.index("TrialBegan")
        assert {"TrialSample", "TrialEnded", "StepStarted"} <= set(seen)
        assert seen[-1] == "RunFinished"
        assert app.report is not None
        assert app.report["verdict"]["status"] in ("healthy", "problem")
        assert app.report["target"]["spec"] == "synthetic:16MiB"
        # The app's stacks (the harness's safetensors) reach the run: the other stacks'
        # routes are left out, and the report says which --stack times them.
        skipped = app.report["bench"]["skipped"]
        assert any("--stack safetensors leaves out" in why for why in skipped.values()), skipped
        advice = app.query_one(AdviceView)
        verdict = str(advice.query_one("#verdict").render())
        assert app.report["verdict"]["headline"][:40] in verdict
        assert app.query_one("#tabs").active == "advice"
        table = app.query_one(BenchView).query_one("#results")
        # Issue 40: a finished run's table is its medians, one row per strategy and
        # cache state (the Advice's figures), no longer one row per trial.
        assert table.row_count == len(app.report["bench"]["summary"])  # type: ignore[attr-defined]
        # Kept in the reports folder as a doctor run's is: `report --last` and `o` find it.
        assert app.kept_report is not None
        kept = Path(app.kept_report)
        assert kept.parent == reports_dir() and kept == last()
        assert json.loads(kept.read_text())["verdict"] == app.report["verdict"]
        await pilot.press("o")
        await pilot.pause()
        assert app.screen.query_one("#prompt").value == str(kept)  # type: ignore[attr-defined]
        await pilot.press("escape")

    drive(steps, size=(100, 30), settle=False, budget_s=15)
    assert _workers() == []


def test_onboarding_asks_for_ranks_and_the_bench_view_shows_them() -> None:
    """Two gloo ranks chosen in onboarding: the diagnosis runs them, the view shows them."""

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        screen = app.screen
        assert isinstance(screen, OnboardingScreen)
        screen.query_one("#synth-size").value = "8MiB"  # type: ignore[attr-defined]
        screen.query_one("#device").value = "cpu"  # type: ignore[attr-defined]
        screen.query_one("#ranks").value = "2"  # type: ignore[attr-defined]
        await _run_to_the_end(app, pilot)
        assert app.last_request is not None
        assert (app.last_request.device, app.last_request.ranks) == ("cpu", 2)
        assert app.report is not None and app.report["ranks"]["options"]["ranks"] == 2
        box = app.query_one(BenchView).query_one("#ranks-summary")
        assert box.display
        text = str(box.render())
        assert "2 ranks (gloo, cpu)" in text and "independent" in text

    drive(steps, size=(100, 30), settle=False, budget_s=30)
    assert _workers() == []


async def _run_to_the_end(app: LoadscopeApp, pilot: Any) -> None:
    """Ctrl+R from onboarding, and wait for the diagnosis to finish, without failing."""
    await pilot.press("ctrl+r")
    await _wait_for(
        pilot,
        lambda: "RunFinished" in app.messages_seen or "RunFailed" in app.messages_seen,
        240,
    )
    assert "RunFailed" not in app.messages_seen


def test_onboarding_refuses_zero_ranks() -> None:
    """The dialog's choices are the CLI's (issue 50): ranks checked as ``doctor --ranks``
    checks them, the device picker listing ``doctor --device``'s choices."""
    from textual.widgets import Select

    from loadscope.cli.common import DEVICE_CHOICES

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        picker = app.screen.query_one("#device", Select)
        assert [v for _, v in picker._options if v is not Select.BLANK] == [
            v for v, _ in DEVICE_CHOICES
        ]
        app.screen.query_one("#ranks").value = "0"  # type: ignore[attr-defined]
        assert "ranks: must be between 1 and 1024, not '0'" in await onboarding_error(app, pilot)
        app.screen.query_one("#ranks").value = "2000"  # type: ignore[attr-defined]
        assert "ranks: must be between 1 and 1024, not '2000'" in await onboarding_error(app, pilot)

    drive(steps, size=(100, 30), settle=False)


def test_stop_kills_the_running_worker() -> None:
    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        await _wait_for(pilot, lambda: app.query_one(BenchView).running_pid() is not None, 120)
        pid = app.query_one(BenchView).running_pid()
        assert pid is not None  # a trial was running (trials last ~0.1 s: it may be done)
        await pilot.press("s")
        await _wait_for(pilot, lambda: "RunCancelled" in app.messages_seen, 30)
        assert "RunFinished" not in app.messages_seen  # stopped mid-run
        assert not app.running
        # The engine child reports the stop, then exits; its fork server goes with it.
        await _wait_for(pilot, lambda: _workers() == [], 10)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
        assert app.report is None

    drive(steps, settle=False, target="synthetic:256MiB", budget_s=60)


def test_a_saved_report_fills_every_view() -> None:
    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        doc = json.loads(GOLDEN.read_text())
        advice = app.query_one(AdviceView)
        assert [r["id"] for r in advice.recommendations] == [
            r["id"] for r in doc["recommendations"]
        ]
        bench = app.query_one(BenchView)
        n = sum(1 for t in doc["bench"]["trials"] if not t["warmup"])
        assert bench.query_one("#results").row_count == n  # type: ignore[attr-defined]
        assert set(bench.chart_of) == {t["strategy"] for t in doc["bench"]["trials"]}
        await pilot.press("1")
        assert app.query_one("#tabs").active == "probes"

    drive(steps, report=str(GOLDEN))


def test_the_probes_view_says_what_is_probed_until_the_figures_come() -> None:
    """At 80x24 the Probes tab read "The probes have not run yet." while they ran."""

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        view = app.query_one(ProbesView)
        summary = view.query_one("#probe-summary")
        view.clear()
        app.post_message(StepStarted("throughput"))
        await pilot.pause()
        assert "Probing the storage: throughput" in str(summary.render())
        view.show(json.loads(GOLDEN.read_text())["probe"])
        app.post_message(StepStarted("local disks"))  # a late step: the figures stay
        await pilot.pause()
        assert "Probing" not in str(summary.render())
        view.clear()  # a new run: the last run's figures go
        await pilot.pause()
        assert "have not run yet" in str(summary.render())
        view.show(json.loads(GOLDEN.read_text())["probe"])
        view.show(None)  # a report opened without probes: neither are the last one's
        await pilot.pause()
        assert "have not run yet" in str(summary.render())

    drive(steps, report=str(GOLDEN))


def test_export_writes_each_format(tmp_path: Path) -> None:
    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        for name in ("r.json", "r.md", "r.html"):
            assert app.export(str(tmp_path / name)) == tmp_path / name
        assert app.export(str(tmp_path / "r.txt")) is None
        await pilot.press("e")
        prompt = app.screen.query_one("#prompt")
        prompt.value = str(tmp_path / "via-key.md")  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()

    drive(steps, report=str(GOLDEN))
    assert json.loads((tmp_path / "r.json").read_text())["verdict"]
    assert (tmp_path / "r.md").read_text().startswith("#")
    assert "<svg" in (tmp_path / "r.html").read_text()
    assert (tmp_path / "via-key.md").exists()
    assert not (tmp_path / "r.txt").exists()


def test_bad_report_is_one_clear_notice(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        notes = notices(app)
        assert any("not a loadscope doctor report" in m for m in notes), notes
        assert app.report is None

    drive(steps, report=str(bad))


def test_copy_sends_the_snippets_to_the_clipboard() -> None:
    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        await pilot.press("c")
        # Several stacks: the user picks the one they run (issue 16).
        assert isinstance(app.screen, SnippetPickScreen)
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, SnippetPickScreen)
        rec = app.query_one(AdviceView).highlighted()
        assert rec is not None
        first, *rest = snippets_of(rec)
        assert app.clipboard == f"# {snippet_heading(first)}\n{first['code']}"
        await pilot.press("c")
        await pilot.press("end", "enter")  # the last row: all of them
        await pilot.pause()
        assert rest and all(s["code"] in app.clipboard for s in [first, *rest])

    drive(steps, report=str(GOLDEN))


def test_onboarding_refuses_an_empty_path() -> None:
    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        await pilot.click("#src-path")
        assert "type a path" in await onboarding_error(app, pilot)

    drive(steps, settle=False)


def test_compare_shows_reports_side_by_side() -> None:
    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        app.compare([str(GOLDEN), str(REPO_ROOT / "tests" / "golden" / "doctor_report.json")])
        await pilot.pause()
        table = app.screen.query_one("#compare")
        assert table.row_count == 7 and len(table.columns) == 3  # type: ignore[attr-defined]

    drive(steps, size=(120, 40), report=str(GOLDEN))


@pytest.mark.parametrize("missing", ["/nonexistent/r.json"])
def test_open_missing_report(missing: str) -> None:
    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        assert any("no such file" in m for m in notices(app))

    drive(steps, report=missing)


def test_brackets_in_paths_and_reasons_are_text_not_markup(tmp_path: Path) -> None:
    doc = json.loads(GOLDEN.read_text())
    doc["probe"]["files"][0]["path"] = "/models/[b]odd[/b]/model.safetensors"
    doc["probe"]["files"][0]["mount"]["reason"] = "a reason with [/] and [red"
    doc["probe"]["notes"] = ["note [/bold]"]
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(doc))

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        await pilot.press("1")
        await pilot.pause()
        text = str(app.query_one("#probe-cache").render())
        assert "[b]odd[/b]" in text
        assert "note [/bold]" in str(app.query_one("#probe-registered").render())
        assert "a reason with [/] and [red" in str(app.query_one("#probe-summary").render())

    drive(steps, size=(100, 30), settle=False, report=str(odd))


def _report_with_fixes(model: Path, total: int) -> Path:
    """The golden report, pointed at a real model, with the two fixes the app applies
    (as the advice engine words them for facts where they fire)."""
    from loadscope.advice.rules import LocalDiskFacts, advice_dict, advise_facts
    from loadscope.probes.localdisk import DiskSpeed, LocalDisk
    from loadscope.probes.result import to_jsonable
    from tests.unit.test_advice import facts

    f = facts({"mmap": 10.0}, {"mmap": 0.5}, read_ahead_kb=8192)
    f.local_disk = LocalDiskFacts(str(model.parent / "local"), 100 << 30, 1e9, 2e9, True)
    f.model_root = f.model_path = str(model)  # as the doctor fills them for this model
    doc = json.loads(GOLDEN.read_text())
    doc["recommendations"] = advice_dict(advise_facts(f))["recommendations"]
    doc["target"] = {**doc["target"], "spec": str(model), "total_bytes": total}
    local = str(model.parent / "local")
    speed = DiskSpeed(local, 100 << 30, 64 << 20, 1e9, 2e9, True)
    disk = LocalDisk(local, "/", "local-block", 100 << 30, speed)
    doc["probe"]["local_disks"] = {"status": "ok", "reason": None, "disks": [to_jsonable(disk)]}
    path = model.parent / "with-fixes.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_advice_view_applies_warm_and_copy_after_a_confirmation(tmp_path: Path) -> None:
    from loadscope.tools.synth import synthesize
    from loadscope.tui.screens import ConfirmScreen

    model = tmp_path / "model"
    synthesize(model, 8 << 20, seed=21, shards=2)
    total = sum(p.stat().st_size for p in model.glob("*.safetensors"))
    report = _report_with_fixes(model, total)
    before = {p.name: p.read_bytes() for p in model.iterdir()}

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        advice = app.query_one(AdviceView)
        ids = [r["id"] for r in advice.recommendations]
        # copy first: the highlighted one; its confirmation shows the destination.
        assert advice.highlighted()["id"] == ids[0] == "copy-to-local-disk"  # type: ignore[index]
        await pilot.press("a")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")  # cancelled: nothing happens
        assert not app.running and not (tmp_path / "local").exists()
        await pilot.press("a")
        dest = app.screen.query_one("#confirm-value")
        assert dest.value == str(tmp_path / "local" / "loadscope-copies" / "model")  # type: ignore[attr-defined]
        await pilot.press("enter")
        await _wait_for(pilot, lambda: "ApplyFinished" in app.messages_seen, 120)
        status = str(advice.query_one("#apply-status").render())
        assert "copied" in status and "verified" in status
        copied = tmp_path / "local" / "loadscope-copies" / "model"
        assert {p.name: p.read_bytes() for p in copied.iterdir()} == before
        # then warm the page cache, from the second recommendation
        advice.query_one("#recs").highlighted = ids.index("prewarm")  # type: ignore[attr-defined]
        await pilot.press("a")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("enter")
        await _wait_for(pilot, lambda: app.messages_seen.count("ApplyFinished") == 2, 120)
        assert "warmed" in str(advice.query_one("#apply-status").render())

    drive(steps, size=(100, 30), report=str(report))
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before
    assert _workers() == []


def test_apply_is_greyed_for_a_synthetic_model() -> None:
    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        assert app.check_action("apply", ()) is None
        app.action_apply()
        await pilot.pause()
        assert not app.running

    drive(steps, report=str(GOLDEN))


#: (key, action, what its toast says, whether it needs "nothing yet": no request to re-run,
#: no report, no recommendation highlighted). Issue 21: a, f, s when they cannot run gave
#: no feedback at all; issue 22: every action that cannot run says why (r, c, e too).
GREYED_KEYS = (
    ("s", "stop", "nothing is running", False),
    ("f", "profile", "no trial is running", False),
    ("a", "apply", "not one loadscope applies", False),
    ("r", "rerun", "nothing to re-run yet", True),
    ("c", "copy", "no recommendation is highlighted", True),
    ("e", "export", "no report yet", True),
)


@pytest.mark.parametrize(
    ("nothing_yet", "cases"),
    [
        pytest.param(when, tuple(k[:3] for k in GREYED_KEYS if k[3] is when), id=name)
        for when, name in ((False, "s-f-a"), (True, "r-c-e"))
    ],
)
def test_a_greyed_key_says_why_it_cannot_run(
    nothing_yet: bool, cases: tuple[tuple[str, str, str], ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each key whose action cannot run says why in a toast (with ``nothing_yet``: no
    request to re-run, no report, no recommendation highlighted)."""

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        if nothing_yet:
            app.last_request, app.report = None, None
            monkeypatch.setattr(AdviceView, "highlighted", lambda self: None)
        for key, action, says in cases:
            assert app.check_action(action, ()) is None, key
            await pilot.press(key)
            await pilot.pause()
            assert any(says in t for t in notices(app)), (key, notices(app))
        assert not app.running

    drive(steps, report=str(GOLDEN))


def test_question_mark_and_escape_close_the_keys_panel() -> None:
    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        for key, shown in (
            ("question_mark", True),
            ("question_mark", False),
            ("question_mark", True),
            ("escape", False),
        ):
            await pilot.press(key)
            await pilot.pause()
            assert bool(app.screen.query("HelpPanel")) is shown, key

    drive(steps, report=str(GOLDEN))


def test_an_onboarding_error_is_in_view_at_80x24() -> None:
    """An invalid size showed its error below the fold: ctrl+r seemed to do nothing."""

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        screen = app.screen
        assert isinstance(screen, OnboardingScreen)
        size = screen.query_one("#synth-size")
        size.value = "lots"  # type: ignore[attr-defined]
        await pilot.press("ctrl+r")
        await pilot.pause(0.3)
        error = screen.query_one("#onboarding-error")
        assert "lots" in str(error.render()) or "size" in str(error.render()).lower()
        region = error.region
        assert region.height > 0 and 0 <= region.y < 24, region
        assert notices(app), "the problem is also a toast"
        assert isinstance(app.screen, OnboardingScreen)

    drive(steps)


def test_a_finished_run_keeps_its_charts() -> None:
    """Issue 19: at the end of a live run the bench view is rebuilt from the report; the
    charts drawn into the widgets being removed were lost and the chart area went blank."""
    from loadscope.tui.charts import RateChart

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        doc = json.loads(GOLDEN.read_text())
        bench = app.query_one(BenchView)
        bench.show(doc["bench"])  # what the end of a live run does, over live charts
        await pilot.pause(0.3)
        charts = list(bench.query(RateChart))
        strategies = {t["strategy"] for t in doc["bench"]["trials"]}
        assert len(charts) == len(strategies), [c.id for c in charts]
        assert all(c.series is not None and c.series.points for c in charts)

    drive(steps, report=str(GOLDEN))


def test_r_after_opening_a_report_reruns_its_model(tmp_path: Path) -> None:
    doc = json.loads(GOLDEN.read_text())
    doc["target"] = {**doc["target"], "spec": str(tmp_path / "the model")}
    path = tmp_path / "other.json"
    path.write_text(json.dumps(doc))

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        app.open_report(str(path))
        assert app.last_request is not None
        assert app.last_request.spec == str(tmp_path / "the model")
        started: list[Any] = []
        app.start = started.append  # type: ignore[method-assign]
        await pilot.press("r")  # the key itself, as a user presses it
        await pilot.pause()
        assert [r.spec for r in started] == [str(tmp_path / "the model")]

    drive(steps, report=str(GOLDEN))


def test_screenshot_says_where_it_went_or_why_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "no-downloads-here"))
    monkeypatch.chdir(tmp_path)

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        saved = app.deliver_screenshot()
        assert saved is not None and Path(saved).parent == tmp_path
        assert "<svg" in Path(saved).read_text()
        assert app.deliver_screenshot(path=str(tmp_path / "missing")) is None
        await pilot.pause()
        notes = notices(app)
        assert any(f"saved the screenshot to {saved}" in m for m in notes), notes
        assert any("cannot save the screenshot" in m for m in notes), notes

    drive(steps, report=str(GOLDEN))


def test_copy_says_when_tmux_drops_the_clipboard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "tmux").write_text("#!/bin/sh\necho off\n")
    (fake / "tmux").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    monkeypatch.setenv("TMUX", "/tmp/tmux-0/default,1,0")

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        await pilot.press("c", "enter")
        await pilot.pause()
        notes = notices(app)
        assert any("was not copied" in m and "set-clipboard" in m for m in notes), notes
        # Issue 22: the text itself is on screen, to select by hand.
        from textual.widgets import TextArea

        from loadscope.tui.screens import TextScreen

        assert isinstance(app.screen, TextScreen)
        shown = app.screen.query_one(TextArea).text
        assert shown == app.clipboard and shown.strip(), shown
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TextScreen)

    drive(steps, report=str(GOLDEN))


def test_t_times_the_users_command_and_the_table_goes_into_the_report(tmp_path: Path) -> None:
    """Issue 42: the app's "time my command": the command typed, run cold as it is and
    after each no-code fix in the engine's process, the table shown, kept for export."""
    import sys

    from loadscope.tools.synth import synthesize
    from loadscope.tui.screens import TextScreen

    model = tmp_path / "model"
    synthesize(model, 4 << 20, seed=42)
    total = sum(p.stat().st_size for p in model.glob("*.safetensors"))
    report = _report_with_fixes(model, total)
    script = tmp_path / "load me.py"
    script.write_text(
        "import sys, glob\nfrom safetensors.torch import load_file\n"
        "[load_file(f) for f in glob.glob(sys.argv[1] + '/*.safetensors')]\n"
    )

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        assert app.check_action("time_command", ()) is True
        await pilot.press("t")
        assert isinstance(app.screen, PromptScreen)
        field = app.screen.query_one("#prompt")
        field.value = f"{sys.executable} '{script}' {{model}}"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await _wait_for(pilot, lambda: "TimeFinished" in app.messages_seen, 120)
        assert isinstance(app.screen, TextScreen)
        assert "as is, cold" in app.screen.text and "loadscope warm first" in app.screen.text
        # Profiled too: the start-up by phase, in the text and in the Benchmark view.
        assert "where the time goes" in app.screen.text
        assert app.report is not None
        user = app.report["user_command"]
        box = app.query_one(BenchView).query_one("#user-command")
        assert box.display and "Where the time goes" in str(box.render())
        (base,) = [v for v in user["variants"] if v["name"] == "as-is"]
        assert base["median_seconds"] > 0 and user["argv"][1] == str(script)
        await pilot.press("escape")
        assert "your command:" in str(app.query_one(AdviceView).query_one("#apply-status").render())

    drive(steps, size=(100, 30), report=str(report))
    assert _workers() == []


@pytest.mark.parametrize(
    ("spec", "words"),
    [("synthetic:64MiB", "synthetic model is gone"), ("<model>", "not on this machine")],
)
def test_t_is_refused_where_the_model_is_not_here(tmp_path: Path, spec: str, words: str) -> None:
    doc = json.loads(GOLDEN.read_text())
    doc["target"] = {**doc["target"], "spec": spec}
    report = tmp_path / "report.json"
    report.write_text(json.dumps(doc))

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        await pilot.press("t")
        await pilot.pause()
        assert not app.running and not isinstance(app.screen, PromptScreen)
        assert any(words in n for n in notices(app)), notices(app)

    drive(steps, report=str(report))


def test_onboarding_down_then_enter_lands_where_the_highlight_says() -> None:
    """Issue 40: at 80x24, Down then Enter on the first screen started a synthetic run
    when the user meant "A path on this machine"; the emulate box's mark was the same on
    and off (colour alone told them apart)."""
    from textual.widgets import ContentSwitcher

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        screen = app.screen
        assert isinstance(screen, OnboardingScreen)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert not app.running and isinstance(app.screen, OnboardingScreen)
        assert screen.query_one("#panes", ContentSwitcher).current == "pane-path"
        assert app.focused is screen.query_one("#path-input")
        box = screen.query_one("#emulate")
        marks = [box.BUTTON_INNER]  # type: ignore[attr-defined]
        box.value = not box.value  # type: ignore[attr-defined]
        await pilot.pause()
        marks.append(box.BUTTON_INNER)  # type: ignore[attr-defined]
        assert sorted(marks) == [" ", "X"]
        radios = {b.id: b.BUTTON_INNER for b in screen.query("#source RadioButton")}  # type: ignore[attr-defined]
        assert radios == {"src-synth": " ", "src-path": "●", "src-hf": " "}

    drive(steps)


def test_the_tab_keys_switch_tabs_from_inside_a_pane() -> None:
    """1, 2, 3 after Tab into a pane (to scroll the charts) stayed on that pane: the focus
    left behind in the hidden pane moved to its neighbour there, which took the tab back."""

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        tabs = app.query_one("#tabs")
        for keys, shown in ((("2", "tab", "3"), "advice"), (("tab", "tab", "1"), "probes")):
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
            assert tabs.active == shown, (keys, app.focused)  # type: ignore[attr-defined]
        await pilot.press("3", "tab", "2")
        await pilot.pause()
        assert tabs.active == "bench"  # type: ignore[attr-defined]

    drive(steps, report=str(GOLDEN))
