"""``loadscope inspect`` and ``synth`` in real processes, checked against safetensors itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from safetensors import safe_open

from loadscope import __version__
from loadscope.tools.synth import SyntheticCheckpoint
from tests.conftest import REPO_ROOT, CliRunner, run_here, run_loadscope

pytestmark = pytest.mark.integration

_BITS = {"BF16": 16, "F16": 16, "F32": 32}


def _truth(files: list[Path]) -> tuple[int, Counter[str], Counter[str]]:
    """Tensor count, dtype -> count and dtype -> bytes, as safetensors itself reports them."""
    count, dtype_n, dtype_b = 0, Counter[str](), Counter[str]()
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118
                sl = f.get_slice(key)
                numel = 1
                for d in sl.get_shape():
                    numel *= d
                count += 1
                dtype_n[sl.get_dtype()] += 1
                dtype_b[sl.get_dtype()] += numel * _BITS[sl.get_dtype()] // 8
    return count, dtype_n, dtype_b


@pytest.mark.parametrize("fixture", ["synth_single", "synth_sharded"])
def test_inspect_json_matches_safe_open(fixture: str, request: pytest.FixtureRequest) -> None:
    ckpt: SyntheticCheckpoint = request.getfixturevalue(fixture)
    result = run_loadscope("inspect", str(ckpt.root), "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    count, dtype_n, dtype_b = _truth(list(ckpt.files))
    totals = report["totals"]
    assert report["schema_version"] == 1
    assert totals["tensors"] == count
    assert totals["dtype_tensors"] == dict(dtype_n)
    assert totals["dtype_bytes"] == dict(dtype_b)
    assert totals["bytes"] == sum(f.stat().st_size for f in ckpt.files)
    assert totals["files"] == len(ckpt.files)
    assert sum(totals["size_histogram"].values()) == count
    assert totals["unaligned_tensors"] == 0


def test_inspect_torch_checkpoint(synth_both: SyntheticCheckpoint, tmp_path: Path) -> None:
    for f in synth_both.root.glob("pytorch_model*"):
        (tmp_path / f.name).symlink_to(f)
    result = run_loadscope("inspect", str(tmp_path), "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)
    safetensors_files = sorted(synth_both.root.glob("model-*.safetensors"))
    count, _, dtype_b = _truth(safetensors_files)
    assert {f["format"] for f in report["files"]} == {"torch-zip"}
    assert report["totals"]["tensors"] == count
    assert report["totals"]["dtype_bytes"] == dict(dtype_b)


def test_inspect_text_report(synth_sharded: SyntheticCheckpoint) -> None:
    result = run_loadscope("inspect", str(synth_sharded.root))
    assert result.code == 0, result.err
    for needle in (
        "dtype mix",
        "tensor sizes",
        "< 64 KiB",
        "BF16",
        "model-00002-of-00003.safetensors",
        "unaligned",
    ):
        assert needle in result.out
    # Every line fits 80 columns but those naming the checkpoint's own path, which is as
    # long as the user's folder name (and must stay whole to be copied).
    root = str(synth_sharded.root)
    assert max(len(line) for line in result.out.splitlines() if root not in line) <= 80


def test_inspect_synthetic_target_cleans_up(tmp_path: Path) -> None:
    result = run_loadscope(
        "inspect", "synthetic:2MiB,shards=2", "--synth-dir", str(tmp_path), "--json"
    )
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert report["target"]["kind"] == "synthetic"
    assert len(report["files"]) == 2
    assert list(tmp_path.iterdir()) == []


def test_sigterm_during_synthetic_build_leaves_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for _attempt in range(3):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadscope",
                "inspect",
                "synthetic:1GiB",
                "--synth-dir",
                str(tmp_path),
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 20
        # The file appears under its temporary name while it is written.
        while time.monotonic() < deadline and not any(tmp_path.glob("*/model.safetensors*")):
            time.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        if proc.returncode != 0:
            break
        # The build and the inspection ended between two polls, or between the last poll
        # and the signal (a fast disk): again.
    assert proc.returncode == 143, err
    assert "terminated" in err
    assert list(tmp_path.iterdir()) == []


def test_synth_command(tmp_path: Path) -> None:
    out = tmp_path / "m"
    result = run_loadscope("synth", str(out), "--size", "1MiB", "--shards", "2", "--format", "both")
    assert result.code == 0, result.err
    assert "wrote 4 file(s)" in result.out
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "pytorch_model-00001-of-00002.bin",
        "pytorch_model-00002-of-00002.bin",
        "pytorch_model.bin.index.json",
    ]
    again = run_loadscope("synth", str(out), "--size", "1MiB")
    assert again.code == 2 and "--force" in again.err


def test_synth_bad_size(cli: CliRunner) -> None:
    result = cli("synth", "/tmp/x", "--size", "huge")
    assert result.code == 2
    assert "not a size" in result.err


def test_version_and_help(cli: CliRunner) -> None:
    version = cli("--version")
    assert version.code == 0 and version.out.strip() == f"loadscope {__version__}"
    top = cli("--help")
    assert top.code == 0
    for needle in ("inspect", "synth", "synthetic:SIZE", "org/name", "exit codes", "corrupt"):
        assert needle in top.out
    sub = cli("inspect", "--help")
    assert sub.code == 0 and "--json" in sub.out


def test_no_command_prints_help(cli: CliRunner) -> None:
    result = cli()
    assert result.code == 0 and "usage:" in result.out


def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).with_name("loadscope")
    if not exe.exists():
        pytest.skip(
            "loadscope console script not installed in this environment (run scripts/setup)"
        )
    proc = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and __version__ in proc.stdout


def test_inspect_never_imports_torch(synth_single: SyntheticCheckpoint) -> None:
    code = (
        "import sys; from loadscope.cli import main; rc = main(['inspect', sys.argv[1]]);"
        "assert 'torch' not in sys.modules and 'safetensors' not in sys.modules, 'heavy import';"
        "raise SystemExit(rc)"
    )
    proc = run_here([sys.executable, "-c", code, str(synth_single.root)], timeout=None)
    assert proc.returncode == 0, proc.stderr


def test_the_command_line_starts_without_the_engine() -> None:
    """Every ``loadscope`` call builds the parser, which imports each command's module:
    those imported the doctor, the advice and the strategies at their top (0.49 s of
    imports, 0.45 s for ``--version``; the test suite makes hundreds of such calls). Each
    command imports what it runs when it runs."""
    code = (
        "import sys; from loadscope.cli import build_parser; build_parser();"
        "heavy = sorted(m for m in sys.modules if m.startswith(('loadscope.diagnosis',"
        " 'loadscope.advice', 'loadscope.loaders', 'loadscope.engine', 'loadscope.report',"
        " 'numpy', 'torch')));"
        "assert not heavy, heavy"
    )
    proc = run_here([sys.executable, "-c", code], timeout=None)
    assert proc.returncode == 0, proc.stderr


def test_no_arguments_without_a_terminal_prints_help_and_a_hint() -> None:
    result = run_loadscope()
    assert result.code == 0
    assert "usage:" in result.out and "doctor" in result.out
    assert "not a terminal" in result.err and "loadscope doctor" in result.err


def test_tui_without_a_terminal_refuses_with_the_headless_command() -> None:
    result = run_loadscope("tui", "synthetic:1MiB")
    assert result.code == 2 and "not a terminal" in result.err
    assert "Traceback" not in result.err
