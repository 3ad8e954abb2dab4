"""Issue 22: N ``loadscope copy SRC DEST`` started at once into a DEST that does not exist.

The loser of the lock removed the directory it had "created" (each saw DEST missing), the
winner's still-empty DEST with it: the winner then failed ("cannot write into DEST"), or
recreated DEST unlocked for a third copy to collide with. Now exactly one copies and every
other is refused with one line, the winner's work left alone.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loadscope.actions.localcopy import PARTIAL_SUFFIX
from loadscope.tools.synth import synthesize
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.integration

COPIES = 3
ROUNDS = 5

#: Loaded by each copy before ``-m loadscope`` runs (PYTHONPATH), to make the race happen
#: every time rather than once in a while: the copies wait for each other at their first
#: ``mkdir`` of DEST, so that each has looked at DEST (missing) before any makes it; and the
#: copy that gets the lock on DEST says so and holds it until the test releases it, once
#: every other copy has ended, so that none can come after the winner and find its files.
_HARNESS = """
import fcntl, os, stat, time
_dir = os.environ["LOADSCOPE_TEST_BARRIER"]
_dest = os.path.abspath(os.environ["LOADSCOPE_TEST_DEST"])
_copies = int(os.environ["LOADSCOPE_TEST_COPIES"])
_me = os.environ.setdefault("LOADSCOPE_TEST_COPY", str(os.getpid()))  # a child: its copy's
def _mark(what):
    open(os.path.join(_dir, what + "-" + _me), "w").close()
def _wait(until):
    deadline = time.monotonic() + 30
    while not until() and time.monotonic() < deadline:
        time.sleep(0.0005)
_mkdir = os.mkdir
def _meeting_mkdir(path, *args, **kwargs):
    first = not os.path.exists(os.path.join(_dir, "at-mkdir-" + _me))
    if first and os.path.abspath(os.fspath(path)) == _dest:
        _mark("at-mkdir")
        _wait(lambda: sum(n.startswith("at-mkdir-") for n in os.listdir(_dir)) >= _copies)
    return _mkdir(path, *args, **kwargs)
os.mkdir = _meeting_mkdir
_flock = fcntl.flock
def _holding_flock(fd, op):
    _flock(fd, op)
    if op & fcntl.LOCK_EX and stat.S_ISDIR(os.fstat(fd).st_mode):
        _mark("locked")
        _wait(lambda: os.path.exists(os.path.join(_dir, "release")))
fcntl.flock = _holding_flock
"""


def _wait(until: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, what
        time.sleep(0.002)


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _race(model: Path, dest: Path, barrier: Path, site: Path) -> tuple[list[Any], set[int]]:
    """COPIES ``loadscope copy model dest`` at once: their (code, out, err), the lockers."""
    barrier.mkdir()
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore",
        "PYTHONPATH": os.pathsep.join(
            [str(site), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
        ),
        "LOADSCOPE_TEST_BARRIER": str(barrier),
        "LOADSCOPE_TEST_DEST": str(dest),
        "LOADSCOPE_TEST_COPIES": str(COPIES),
    }
    env.pop("LOADSCOPE_DEBUG", None)
    cmd = [sys.executable, "-m", "loadscope", "copy", str(model), str(dest), "--quiet"]
    procs = [
        subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT, env=env
        )
        for _ in range(COPIES)
    ]

    def holders() -> set[int]:
        return {int(p.name.split("-")[1]) for p in barrier.glob("locked-*")}

    def ended(skip: set[int] = set()) -> bool:  # noqa: B006  (never mutated)
        return all(p.poll() is not None for p in procs if p.pid not in skip)

    try:
        # One copy holds the lock (or every copy ended without it: a failure the caller
        # sees); the others run into it and end before it goes on (or one of them locks
        # a DEST made again after a loser removed it: two holders, the caller's failure).
        _wait(lambda: bool(holders()) or ended(), "no copy locked DEST")
        first = holders()
        _wait(
            lambda: ended(first) or len(holders()) > 1,
            "the other copies did not end while DEST was locked",
        )
        (barrier / "release").touch()
        return [(p.wait(timeout=60), *p.communicate(timeout=60)) for p in procs], holders()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_concurrent_copies_into_a_missing_dest_one_wins_the_others_are_refused(
    tmp_path: Path,
) -> None:
    model = synthesize(tmp_path / "model", 4 << 20, seed=22, shards=2).root
    source = _digests(model)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_HARNESS)
    for round_ in range(ROUNDS):
        dest = tmp_path / f"dest-{round_}" / "copy"  # neither it nor its parent exists
        results, holders = _race(model, dest, tmp_path / f"barrier-{round_}", site)
        assert len(holders) == 1, (round_, holders, results)
        won = [r for r in results if r[0] == 0]
        assert len(won) == 1, (round_, results)
        for code, _, err in (r for r in results if r[0] != 0):
            assert code == 2, (round_, results)
            assert "another loadscope copy is writing into it" in err, (round_, results)
            assert err.count("\n") == 1 and "Traceback" not in err, (round_, results)
        assert _digests(dest) == source, round_
        assert not list(dest.parent.rglob(f"*{PARTIAL_SUFFIX}")), round_
        assert [p.name for p in dest.parent.iterdir()] == ["copy"], round_
