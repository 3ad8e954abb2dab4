"""Shared fixtures: small synthetic checkpoints (built once per session) and a CLI runner."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadscope.cli import main
from loadscope.synth import SyntheticCheckpoint, synthesize

REPO_ROOT = Path(__file__).resolve().parent.parent


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


def run_loadscope(*args: str, timeout: float = 60, cwd: Path | None = None) -> CliResult:
    """Run ``python -m loadscope`` in a child process (a real exit code and real stderr)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("LOADSCOPE_DEBUG", None)
    proc = subprocess.run(
        [sys.executable, "-m", "loadscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or REPO_ROOT,
        env=env,
        check=False,
    )
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
