"""Every malformed or hostile file at every entry point: probe, bench, doctor, warm, copy, the
app's model picker (``inspect`` has its own table in tests/unit/test_malformed.py).

Each must give one line naming the file, the exit code its error documents, no traceback, no
hang, and must fail *first*: before any probe, worker, fork server or write. Nothing under the
case's directory changes, a copy's DEST stays empty, and a pickle that would run code never
runs (its marker file never appears). The in-process runner checks every case; real
processes check a few per entry point, for a real exit code and no hang.

A model folder with a stray symlink cycle beside valid weights (``loop -> ..``) is not a
hostile case: listing a folder is never recursive, so it still works (tested below).
"""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import CliResult, CliRunner, no_workers, run_loadscope
from tests.malformed_cases import CASES, MARKER, Case, RunsCode, good_st, torch_zip

pytestmark = [pytest.mark.integration, pytest.mark.hardening("hostile-files")]

#: Generous: a hang, not a slow refusal, is what this catches (each refusal takes ms).
HANG_S = 20.0

Args = Callable[[str, Path], list[str]]

#: Each entry point's command line for a target; the trial options only bound a run that
#: should never start.
ENTRY_POINTS: dict[str, Args] = {
    "probe": lambda target, _: ["probe", target, "--budget", "3"],
    "bench": lambda target, _: ["bench", target, "--repeats", "1", "--no-warmup"],
    "doctor": lambda target, _: ["doctor", target, "--budget", "10", "--device", "cpu"],
    "warm": lambda target, _: ["warm", target, "--stall-timeout", "5"],
    "copy": lambda target, dest: ["copy", target, str(dest), "--stall-timeout", "5"],
}
#: The ones every entry point also meets in a real process.
REAL = ("fifo", "symlink-to-dev-zero", "git-lfs-pointer", "torch-pickle-runs-code")


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = tmp_path / "empty-hub"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))


def _children() -> set[int]:
    """Live child processes of this one (a zombie has exited and waits to be reaped)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            continue
    return out


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``root`` (symlinks not followed): type and size bits, size, mtime."""
    out = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            st = os.lstat(os.path.join(folder, name))
            out[os.path.relpath(os.path.join(folder, name), root)] = (
                st.st_mode,
                st.st_size,
                st.st_mtime_ns,
            )
    return out


def _one_clear_line(result: CliResult, case: Case, target: str) -> str:
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    line = lines[0]
    assert line.startswith("loadscope: "), line
    assert "Traceback" not in result.err
    assert Path(target).name in line or target in line, line
    assert case.says.lower() in line.lower(), line
    return line


@pytest.fixture
def built(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(the case's own folder, a DEST that does not exist yet); the marker is checked after."""
    home = tmp_path / "case"
    home.mkdir()
    yield home, tmp_path / "dest"
    assert not list(tmp_path.rglob(MARKER)), "a pickle ran code"


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_case_at_every_entry_point(
    case: Case, entry: str, built: tuple[Path, Path], cli: CliRunner
) -> None:
    home, dest = built
    target = case.build(home)
    before, children = _tree(home), _children()
    t0 = time.monotonic()
    result = cli(*ENTRY_POINTS[entry](target, dest))
    elapsed = time.monotonic() - t0
    assert elapsed < HANG_S
    assert result.code == int(case.error.exit_code), result.err
    assert result.out == ""
    _one_clear_line(result, case, target)
    # It failed first: nothing started, nothing written, the model untouched.
    assert _children() <= children, "a worker or fork server was started"
    assert not dest.exists()
    assert _tree(home) == before


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("case", [c for c in CASES if c.id in REAL], ids=lambda c: c.id)
def test_real_process_exit_code_no_hang(case: Case, entry: str, built: tuple[Path, Path]) -> None:
    home, dest = built
    target = case.build(home)
    t0 = time.monotonic()
    result = run_loadscope(*ENTRY_POINTS[entry](target, dest), timeout=HANG_S + 10)
    assert time.monotonic() - t0 < HANG_S
    assert result.code == int(case.error.exit_code), result.err
    assert result.out == ""
    _one_clear_line(result, case, target)
    assert not dest.exists()
    assert no_workers()


CLAIMS = ("length-2**63", "length-over-limit", "length-just-under-limit-tiny-file")


@pytest.mark.parametrize("case", [c for c in CASES if c.id in CLAIMS], ids=lambda c: c.id)
def test_no_allocation_sized_by_the_claim(
    case: Case, built: tuple[Path, Path], cli: CliRunner
) -> None:
    """A header length of up to 2**63 on a 10-byte file costs kilobytes, at every entry point."""
    home, dest = built
    target = case.build(home)
    for entry, args in ENTRY_POINTS.items():
        cli(*args(target, dest))  # imports and caches first: they are not the file's doing
        tracemalloc.start()
        try:
            result = cli(*args(target, dest))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert result.code == int(case.error.exit_code), (entry, result.err)
        assert peak < 4 << 20, f"{entry}: {peak} bytes at the peak"


# -- pickles that would run code ----------------------------------------------------------------


def test_torch_refuses_the_pickle_too_and_nothing_runs(built: tuple[Path, Path]) -> None:
    """The case's archive is what torch.save writes: torch's weights-only load (the worker's
    backstop) refuses it as well, and the run through bench's worker maps that to one line."""
    import pickle

    import torch

    from loadscope.engine.bench import BenchOptions, run_bench
    from loadscope.model.targets import resolve

    home, _ = built
    path = torch_zip(
        home / "pytorch_model.bin", {"w": RunsCode(os.system, f"touch {home / MARKER}")}
    )
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    # Past the parent's check (the API has none): the worker's torch.load refuses it.
    report = run_bench(
        resolve(str(path)),
        BenchOptions(strategies=("pickle",), repeats=1, warmup=False, trial_timeout_s=60),
    )
    (trial,) = report.trials
    assert trial.status == "failed"
    assert "weights_only=True" in (trial.reason or "") and "posix.system" in (trial.reason or "")
    assert "\n" not in (trial.reason or "")
    assert no_workers()


@pytest.fixture(scope="module")
def torch_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from loadscope.tools.synth import synthesize

    root = tmp_path_factory.mktemp("torch-model")
    synthesize(root, 1 << 20, fmt="torch", seed=5)
    return root


@pytest.mark.parametrize("entry", ["bench", "doctor"])
def test_old_torch_refuses_pickles_up_front(
    entry: str,
    torch_model: Path,
    tmp_path: Path,
    cli: CliRunner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent reads the installed torch's version (no import) before it plans a load."""
    from loadscope.loaders import torch_safety

    monkeypatch.setattr(torch_safety, "installed_torch_version", lambda: "2.5.1+cpu")
    children = _children()
    result = cli(*ENTRY_POINTS[entry](str(torch_model), tmp_path / "dest"))
    assert result.code == 4, result.err
    (line,) = result.err.splitlines()
    assert line.startswith("loadscope: torch 2.5.1+cpu is older than 2.6")
    assert "CVE-2025-32434" in line and "torch>=2.6" in line
    assert _children() <= children
    # What never loads a pickle is not refused: inspect reads the opcodes only.
    assert cli("inspect", str(torch_model)).code == 0


def test_old_torch_in_a_real_process(torch_model: Path, tmp_path: Path) -> None:
    """A torch 2.5.1 package (its metadata only, first on the path) in a real ``bench``."""
    fake = tmp_path / "site"
    info = fake / "torch-2.5.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.5.1\n")
    env_path = os.pathsep.join([str(fake), *filter(None, [os.environ.get("PYTHONPATH")])])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env_path
    try:
        result = run_loadscope("bench", str(torch_model), "--repeats", "1", timeout=60)
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    assert result.code == 4, result.err
    assert result.err.startswith("loadscope: torch 2.5.1 is older than 2.6"), result.err
    assert len(result.err.splitlines()) == 1
    assert no_workers()


# -- a stray symlink cycle beside valid weights still works -------------------------------------


def test_a_symlink_cycle_beside_valid_weights_is_ignored(tmp_path: Path, cli: CliRunner) -> None:
    model = tmp_path / "model"
    model.mkdir()
    good_st(model / "model.safetensors", ("a", "b"))
    (model / "config.json").write_text("{}")
    (model / "loop").symlink_to("..")
    (model / "self").symlink_to(".")
    (model / "sub").mkdir()
    (model / "sub" / "up").symlink_to("../..")
    dest = tmp_path / "dest"
    t0 = time.monotonic()
    for args in (
        ["inspect", str(model)],
        ["probe", str(model), "--budget", "2"],
        ["warm", str(model)],
        ["copy", str(model), str(dest)],
    ):
        result = cli(*args)
        assert result.code == 0, (args, result.err)
        assert "Traceback" not in result.err
    assert time.monotonic() - t0 < 60
    # The copy took the weights and the config beside them, and no link of the cycle.
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "model.safetensors"]


# -- the app's model picker ---------------------------------------------------------------------

PICKER = (
    "fifo",
    "symlink-to-dev-zero",
    "git-lfs-pointer",
    "html-page",
    "torch-pickle-runs-code",
    "dir-only-symlink-cycles",
    "dir-cycle-named-like-shard",
    "index-path-traversal",
    "length-2**63",
    "hf-id-not-in-cache",
)


def test_the_model_picker_says_what_is_wrong(tmp_path: Path) -> None:
    """Typed into the onboarding's path box, each hostile target is one message on the
    screen; no run starts, nothing crashes or hangs, the picker stays open for another try.
    One app for all of them (the picker is reused exactly as a user retrying would)."""
    import asyncio

    from loadscope.tui.app import LoadscopeApp
    from loadscope.tui.screens import OnboardingScreen

    cases = [c for c in CASES if c.id in PICKER]
    assert len(cases) == len(PICKER)
    targets = {}
    for case in cases:
        home = tmp_path / case.id
        home.mkdir()
        targets[case.id] = case.build(home)
    children = _children()

    async def go() -> None:
        app = LoadscopeApp(
            browse_root=tmp_path, hf_cache=str(tmp_path / "empty-hub"), fuse_reason="not in tests"
        )
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.click("#src-path")
            for case in cases:
                screen = app.screen
                assert isinstance(screen, OnboardingScreen)
                box = screen.query_one("#path-input")
                box.value = targets[case.id]  # type: ignore[attr-defined]
                t0 = time.monotonic()
                await pilot.press("ctrl+r")
                error = screen.query_one("#onboarding-error")
                while True:
                    shown = str(error.render())
                    if shown and not shown.startswith("checking"):
                        break
                    assert time.monotonic() - t0 < HANG_S, f"{case.id}: still {shown!r}"
                    await pilot.pause(0.05)
                assert app.screen is screen, f"{case.id}: the picker closed"
                assert not app.running, f"{case.id}: a run started"
                flat = " ".join(shown.split())
                assert case.says.lower() in flat.lower(), (case.id, flat)
                assert Path(targets[case.id]).name in flat, (case.id, flat)
                assert "Traceback" not in flat and "internal error" not in flat
            assert not [n for n in app._notifications if n.severity == "error"]

    asyncio.run(go())
    assert _children() <= children
    assert not list(tmp_path.rglob(MARKER))


def test_the_model_picker_starts_a_sound_model(tmp_path: Path) -> None:
    """The check passes a sound model through: the picker closes and the run starts."""
    import asyncio

    from loadscope.tui.app import LoadscopeApp
    from loadscope.tui.screens import OnboardingScreen

    model = tmp_path / "model"
    model.mkdir()
    good_st(model / "model.safetensors")
    (model / "loop").symlink_to("..")
    started: list[object] = []

    async def go() -> None:
        app = LoadscopeApp(
            browse_root=tmp_path, hf_cache=str(tmp_path / "none"), fuse_reason="not in tests"
        )
        app.start = started.append  # type: ignore[method-assign]
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.click("#src-path")
            app.screen.query_one("#path-input").value = str(model)  # type: ignore[attr-defined]
            await pilot.press("ctrl+r")
            t0 = time.monotonic()
            while isinstance(app.screen, OnboardingScreen):
                assert time.monotonic() - t0 < HANG_S
                await pilot.pause(0.05)
        assert [getattr(r, "spec", None) for r in started] == [str(model)]

    asyncio.run(go())
