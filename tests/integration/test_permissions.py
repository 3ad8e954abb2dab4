"""Files this user may not read get exit code 6 and one line (run as nobody: root ignores modes)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadscope.base.errors import ExitCode
from tests.as_nobody import NOBODY, SETPRIV, reachable_dir
from tests.conftest import REPO_ROOT, run_here
from tests.malformed_cases import good_st

pytestmark = pytest.mark.integration


def _as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    assert SETPRIV is not None
    return run_here([SETPRIV, *NOBODY, sys.executable, "-m", "loadscope", *args], timeout=60)


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A directory that user nobody can traverse (pytest's tmp_path is private to root)."""
    if os.geteuid() != 0 or SETPRIV is None:
        pytest.skip("needs root and setpriv to run loadscope as an unprivileged user")
    probe = subprocess.run(
        [SETPRIV, *NOBODY, sys.executable, "-c", "import loadscope"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip("user nobody cannot run this Python or read the checkout")
    with reachable_dir("loadscope-perm-", 0o755) as path:
        yield path


def test_unreadable_file(public_dir: Path) -> None:
    path = good_st(public_dir / "model.safetensors")
    path.chmod(0o000)
    result = _as_nobody("inspect", str(path))
    assert result.returncode == ExitCode.PERMISSION, result.stderr
    assert result.stderr.count("\n") == 1 and "permission denied" in result.stderr
    assert str(path) in result.stderr


def test_unreadable_directory(public_dir: Path) -> None:
    model = public_dir / "model"
    model.mkdir()
    good_st(model / "model.safetensors")
    model.chmod(0o000)
    result = _as_nobody("inspect", str(model))
    assert result.returncode == ExitCode.PERMISSION, result.stderr
    assert "Traceback" not in result.stderr and "permission denied" in result.stderr


def test_readable_file_as_nobody(public_dir: Path) -> None:
    path = good_st(public_dir / "model.safetensors")
    path.chmod(0o444)
    result = _as_nobody("inspect", str(path), "--json")
    assert result.returncode == 0, result.stderr


def test_probe_as_nobody_says_residency_unknown(public_dir: Path) -> None:
    """mincore hides other users' page cache since Linux 5.2: "unknown", never a false 0%."""
    import json

    path = good_st(public_dir / "model.safetensors")
    path.chmod(0o444)  # readable, owned by root, not writable by nobody
    result = _as_nobody("probe", str(path), "--budget", "2", "--json", "-")
    assert result.returncode == 0, result.stderr
    from loadscope.report.schema import check

    check(json.loads(result.stdout), "probe")  # of the published shape
    residency = json.loads(result.stdout)["files"][0]["residency"]
    assert residency["fraction"] is None
    assert "unknown" in residency["note"]
