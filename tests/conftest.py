"""Shared fixtures: small synthetic checkpoints (built once per session) and a CLI runner."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadscope.cli import main
from loadscope.tools.synth import SyntheticCheckpoint, synthesize

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True, scope="session")
def _reports_kept_in_a_temp_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """doctor and demo keep every report in a per-user folder: the tests' go to a
    temporary one (inherited by the commands they run), never the user's."""
    before = os.environ.get("LOADSCOPE_REPORTS")
    os.environ["LOADSCOPE_REPORTS"] = str(tmp_path_factory.mktemp("reports"))
    yield
    if before is None:
        os.environ.pop("LOADSCOPE_REPORTS", None)
    else:
        os.environ["LOADSCOPE_REPORTS"] = before


#: The test worker that made a private shared-memory folder (its pid, in the folder).
OWNER_FILE = ".owner"


def _remove_dead_workers_folders(base: Path) -> None:
    """A worker killed outright (SIGKILL, a CI job cancelled) cannot remove its folder:
    the next session removes those whose worker is gone, and empty ones of no owner."""
    import shutil

    for folder in base.glob("loadscope-tests-*"):
        owner = folder / OWNER_FILE
        try:
            pid = int(owner.read_text())
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                folder.rmdir()  # no owner said: removed only when empty
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # another user's worker, alive


@pytest.fixture(autouse=True, scope="session")
def _shared_memory_in_a_private_folder() -> Iterator[None]:
    """Node-shared loads keep their files in /dev/shm, and every command removes what dead
    ranks left there (saying so on stderr): each test worker's go to a private folder
    of /dev/shm (inherited by what it runs), so that a rank test killed in one worker never
    adds a line to another worker's command. A test of the real folder pops it."""
    import shutil
    import tempfile

    before = os.environ.get("LOADSCOPE_SHM_DIR")
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    _remove_dead_workers_folders(Path(base or tempfile.gettempdir()))
    folder = tempfile.mkdtemp(prefix="loadscope-tests-", dir=base)
    (Path(folder) / OWNER_FILE).write_text(f"{os.getpid()}\n")
    os.environ["LOADSCOPE_SHM_DIR"] = folder
    yield
    shutil.rmtree(folder, ignore_errors=True)
    if before is None:
        os.environ.pop("LOADSCOPE_SHM_DIR", None)
    else:
        os.environ["LOADSCOPE_SHM_DIR"] = before


@dataclass
class CliResult:
    code: int
    out: str
    err: str


CliRunner = Callable[..., CliResult]


@pytest.fixture
def cli() -> CliRunner:
    """Run ``loadscope`` in-process; returns exit code, stdout and stderr."""

    def run(*args: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse (--help, --version, usage errors)
                code = int(exc.code or 0)
        return CliResult(code, out.getvalue(), err.getvalue())

    return run


@contextmanager
def slow_synthetic(
    root: Path, size: int, *, seed: int, latency_s: float, why: str = "emulated slow disk"
) -> Iterator[Path]:
    """A synthetic model of ``size`` bytes under ``root``, served by the emulated slow disk
    at ``latency_s`` per request (readahead 128 KiB); skips, saying ``why`` it is needed,
    where FUSE is unavailable."""
    from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason

    if (reason := fuse_unavailable_reason()) is not None:
        pytest.skip(f"needs the {why}: {reason}")
    src = synthesize(root / "src", size, seed=seed)
    settings = EmulatorSettings(latency_s=latency_s, jitter_s=0.0, readahead_kb=128)
    with emulated_disk(src.root, root / "mnt", settings) as disk:
        yield disk.path


def run_here(
    argv: list[str],
    *,
    timeout: float = 120,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` from the repository root (or ``cwd``), its output captured as text."""
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or REPO_ROOT,
        env=env,
        check=check,
    )


def run_script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``scripts/NAME`` run as a maintainer would, without a user's plugin modules (what it
    writes documents loadscope itself)."""
    plugins = ("LOADSCOPE_STRATEGY_MODULES", "LOADSCOPE_PROBE_MODULES")
    env = {k: v for k, v in os.environ.items() if k not in plugins}
    return run_here([sys.executable, str(REPO_ROOT / "scripts" / name), *args], env=env)


def run_loadscope(
    *args: str, timeout: float = 60, cwd: Path | None = None, env: dict[str, str] | None = None
) -> CliResult:
    """Run ``python -m loadscope`` in a child process (a real exit code and real stderr)."""
    env = {**(os.environ if env is None else env), "PYTHONWARNINGS": "ignore"}
    env.pop("LOADSCOPE_DEBUG", None)
    proc = run_here([sys.executable, "-m", "loadscope", *args], timeout=timeout, cwd=cwd, env=env)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="session")
def synth_single(tmp_path_factory: pytest.TempPathFactory) -> SyntheticCheckpoint:
    return synthesize(tmp_path_factory.mktemp("single"), 2 << 20, seed=1)


@pytest.fixture(scope="session")
def synth_sharded(tmp_path_factory: pytest.TempPathFactory) -> SyntheticCheckpoint:
    return synthesize(tmp_path_factory.mktemp("sharded"), 3 << 20, shards=3, seed=2)


@pytest.fixture(scope="session")
def synth_both(tmp_path_factory: pytest.TempPathFactory) -> SyntheticCheckpoint:
    return synthesize(tmp_path_factory.mktemp("both"), 1 << 20, shards=2, fmt="both", seed=3)


@contextmanager
def foreign_tmpfs_at(path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted at ``path`` that loadscope did not make (a user's own mount),
    lazily unmounted afterwards; the test is skipped where mounting is refused."""
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def no_workers(timeout_s: float = 10) -> bool:
    """True once no trial worker (forked or spawned) is left under this process."""
    import time

    import psutil

    from loadscope.loaders.forkserver import WORKER_NAME

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not [p for p in psutil.Process().children(recursive=True) if p.name() == WORKER_NAME]:
            return True
        time.sleep(0.1)
    return False


def tagged_processes(tag: str) -> list[Any]:
    """Live loadscope processes (command, fork server, workers, engine, FUSE server) whose
    environment carries ``LOADSCOPE_TEST_TAG=tag``: what a test's run left running."""
    import psutil

    from loadscope.loaders.forkserver import WORKER_NAME

    found = []
    for proc in psutil.process_iter():
        try:
            ours = proc.name() == WORKER_NAME or "loadscope" in " ".join(proc.cmdline())
            if (
                ours
                and not proc.name().startswith("tmux")
                and proc.environ().get("LOADSCOPE_TEST_TAG") == tag
                and proc.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def cmdline_of(proc: Any) -> list[str]:
    """A process's command line, or [] once it has ended (a zombie or gone: psutil raises)."""
    import psutil

    try:
        return list(proc.cmdline())
    except (psutil.Error, OSError):
        return []


# --- The hardening tally (issue 10): how many hostile cases were tried and how they went. ---
#
# A test joins the tally with ``@pytest.mark.hardening("category")`` (or a module-level
# ``pytestmark``); the end of the run prints one line per category. Fuzz tests add the
# number of generated inputs they tried through the ``hardening_examples`` fixture.

_TALLY: dict[str, dict[str, int]] = {}


def _category(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("hardening")
    if mark is None:
        return None
    return str(mark.args[0]) if mark.args else "other"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    category = getattr(report, "hardening_category", None)
    if category is None:
        return
    row = _TALLY.setdefault(category, {"tried": 0, "passed": 0, "skipped": 0, "failed": 0})
    if report.when == "call":
        row["tried"] += 1
        row["passed" if report.passed else "failed"] += 1
    elif report.when == "setup" and not report.passed:
        row["tried"] += 1
        row["skipped" if report.skipped else "failed"] += 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    category = _category(item)
    if category is not None:
        report.hardening_category = category
        if report.skipped and report.when == "call":
            # A skip from inside the test body: count it as skipped, not passed.
            report.hardening_category = None
            row = _TALLY.setdefault(category, {"tried": 0, "passed": 0, "skipped": 0, "failed": 0})
            row["tried"] += 1
            row["skipped"] += 1


_EXAMPLES: dict[str, int] = {}


@pytest.fixture
def hardening_examples(request: pytest.FixtureRequest) -> Callable[[int], None]:
    """Fuzz tests call this with how many generated inputs they fed the code under test."""
    category = _category(request.node) or "fuzz"

    def add(n: int = 1) -> None:
        _EXAMPLES[category] = _EXAMPLES.get(category, 0) + n

    return add


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _TALLY:
        return
    tr = terminalreporter
    tr.section("hardening cases (issue 10)")
    total = {"tried": 0, "passed": 0, "skipped": 0, "failed": 0}
    for category in sorted(_TALLY):
        row = _TALLY[category]
        for k in total:
            total[k] += row[k]
        extra = f", {_EXAMPLES[category]} generated inputs" if category in _EXAMPLES else ""
        tr.write_line(
            f"{category:<22} {row['tried']:>4} tried  {row['passed']:>4} passed"
            f"  {row['skipped']:>3} skipped  {row['failed']:>3} failed{extra}"
        )
    tr.write_line(
        f"{'total':<22} {total['tried']:>4} tried  {total['passed']:>4} passed"
        f"  {total['skipped']:>3} skipped  {total['failed']:>3} failed"
    )
