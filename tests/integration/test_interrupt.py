"""Ctrl-C (SIGINT), SIGTERM or SIGHUP at a random moment of any command leaves nothing.

Each run starts a real ``python -m loadscope`` with a private TMPDIR and a tag in
its environment, sends the signal after a random delay drawn over the command's
usual run time, and then checks: the exit code is 130/143 (SIGHUP: 143, as SIGTERM;
0 when the command had already finished), no process carrying the tag is alive
(workers, fork server, FUSE daemon, engine child), no mount is left under the run's
directory, TMPDIR is empty, and for ``copy`` no file under its final name differs from the source.

The delays are drawn from a seeded generator, printed in the test id and varied per
run: the default tries one moment per command (the signal drawn too);
``LOADSCOPE_INTERRUPT_RUNS=N`` (N >= 2) tries N - 1 moments per command and signal,
``LOADSCOPE_INTERRUPT_SEED`` picks another sequence.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadscope.actions.localcopy import PARTIAL_SUFFIX
from loadscope.tools.emulator import fuse_unavailable_reason
from loadscope.tools.synth import synthesize
from tests.conftest import REPO_ROOT, cmdline_of, tagged_processes

pytestmark = [pytest.mark.integration, pytest.mark.hardening("interruption")]

RUNS = int(os.environ.get("LOADSCOPE_INTERRUPT_RUNS", "1"))
SEED = int(os.environ.get("LOADSCOPE_INTERRUPT_SEED", "20261201"))
FUSE = fuse_unavailable_reason()
#: Before this, the interpreter itself is starting (site, encodings): not ours to handle.
START_S = 0.1


@dataclass(frozen=True)
class Command:
    name: str
    #: argv after ``loadscope``, given the model and a scratch directory.
    argv: Callable[[Path, Path], list[str]]
    #: The window (seconds after start) the signal is drawn from.
    window_s: float
    needs_fuse: bool = False


COMMANDS = [
    Command("inspect", lambda m, d: ["inspect", str(m)], 1.0),
    Command("probe", lambda m, d: ["probe", str(m), "--budget", "3"], 3.0),
    Command(
        "bench",
        lambda m, d: ["bench", str(m), "--strategies", "mmap,fullread,parallel", "--repeats", "2"],
        6.0,
    ),
    Command("doctor", lambda m, d: ["doctor", str(m), "--budget", "10"], 8.0),
    Command("doctor-synthetic", lambda m, d: ["doctor", "synthetic:16MiB", "--budget", "6"], 6.0),
    Command("warm", lambda m, d: ["warm", str(m)], 1.0),
    Command("copy", lambda m, d: ["copy", str(m), str(d / "dest")], 1.5),
    Command(
        "demo",
        lambda m, d: ["demo", "--size", "16MiB", "--budget", "8", "--work-dir", str(d)],
        10.0,
        True,
    ),
    Command("emulate", lambda m, d: ["emulate", str(m), _empty(d / "mnt")], 3.0, True),
]


def _empty(path: Path) -> str:
    path.mkdir()
    return str(path)


def _cases() -> list[object]:
    rng = random.Random(SEED)
    every = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    turn = rng.randrange(len(every))
    out = []
    for i, cmd in enumerate(COMMANDS):
        # One signal per command and run, in turn from a drawn start: every signal over
        # the commands, and every pair with LOADSCOPE_INTERRUPT_RUNS >= 2 (the suite's
        # time stays small).
        first = every[(turn + i) % len(every)]
        others = [s for s in every if s != first]
        signals, per_signal = ([first], 1) if RUNS <= 1 else ([first, *others], RUNS - 1)
        for sig in signals:
            for _ in range(per_signal):
                delay = round(rng.uniform(START_S, cmd.window_s), 2)
                marks = [pytest.mark.skipif(cmd.needs_fuse and FUSE is not None, reason=f"{FUSE}")]
                out.append(
                    pytest.param(cmd, sig, delay, id=f"{cmd.name}-{sig.name}-{delay}s", marks=marks)
                )
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("interrupt") / "model"
    synthesize(root, 48 << 20, seed=17, shards=3)
    return root


def _tree_digest(root: Path) -> dict[str, tuple[str, float]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = (
                hashlib.sha256(p.read_bytes()).hexdigest(),
                p.stat().st_mtime,
            )
    return out


def _mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mounts", encoding="utf-8") as fh:
        points = [line.split()[1] for line in fh]
    return [m for m in points if m.startswith(str(path))]


@pytest.mark.parametrize(("cmd", "sig", "delay"), _cases())
def test_a_signal_at_a_random_moment_leaves_nothing_behind(
    cmd: Command, sig: signal.Signals, delay: float, model: Path, tmp_path: Path
) -> None:
    before = _tree_digest(model)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    tag = uuid.uuid4().hex
    env = {
        **os.environ,
        "TMPDIR": str(tmpdir),
        "LOADSCOPE_TEST_TAG": tag,
        "PYTHONWARNINGS": "ignore",
    }
    env.pop("LOADSCOPE_DEBUG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadscope", *cmd.argv(model, scratch)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"{cmd.name} did not stop within 30 s of {sig.name}: {err[-2000:]}")
    expected = {0, 143 if sig == signal.SIGHUP else 128 + sig}
    if cmd.name == "doctor":
        expected.add(10)  # finished before the signal with a finding
    assert proc.returncode in expected, f"exit {proc.returncode}: {err[-2000:]}"
    assert "Traceback" not in err, err[-3000:]
    if proc.returncode not in {0, 10}:
        assert err.strip().splitlines()[-1].startswith("loadscope: "), err[-2000:]
    # Nothing the command started may outlive it: workers, fork server, FUSE daemon.
    deadline = time.monotonic() + 10
    while (left := tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    names = [f"{p.pid} {' '.join(cmdline_of(p))[:120]}" for p in left]
    for p in left:
        p.kill()
    assert not left, f"left running after {sig.name}: {names}"
    assert not _mounts_under(tmp_path), _mounts_under(tmp_path)
    assert not list(tmpdir.iterdir()), f"left in TMPDIR: {list(tmpdir.iterdir())}"
    assert _tree_digest(model) == before, "the source model changed"
    dest = scratch / "dest"
    if cmd.name == "copy" and dest.exists():
        for p in dest.rglob("*"):
            if p.is_file() and not p.name.endswith(PARTIAL_SUFFIX):
                src = model / p.relative_to(dest)
                assert p.read_bytes() == src.read_bytes(), f"{p} is partial under its final name"
    shutil.rmtree(scratch, ignore_errors=True)
