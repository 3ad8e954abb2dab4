"""The documented exit-code table is the code's: every documented code, one case each.

The table is read from the documentation (``docs/troubleshooting.md``): its codes and
names must be exactly :class:`ExitCode`'s, and every row has a case here that produces
that code (run in-process through the real parser and entry points), or names the test that
produces it where a case needs a slow or privileged setup (an emulated failing
disk, an unprivileged user, a full diagnosis).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

import loadscope.model.inspection
from loadscope.base.errors import ExitCode
from loadscope.cli.common import Terminated
from loadscope.tools.synth import synthesize
from tests.conftest import CliRunner

ROOT = Path(__file__).resolve().parents[2]


def documented_table() -> dict[int, str]:
    text = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    section = text.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| ([a-z-]+) \|", section, flags=re.MULTILINE)
    return {int(code): name for code, name in rows}


def test_the_documented_table_is_the_exit_code_enum() -> None:
    table = documented_table()
    assert table == {int(c): c.name.lower().replace("_", "-") for c in ExitCode}


def _model(tmp: Path) -> Path:
    return synthesize(tmp / "m", 1 << 20, seed=3).root


def _corrupt(tmp: Path) -> Path:
    bad = tmp / "bad.safetensors"
    bad.write_bytes((10**12).to_bytes(8, "little") + b"{}")
    return bad


def _fifo(tmp: Path) -> Path:
    path = tmp / "model.safetensors"
    os.mkfifo(path)
    return path


def _raise(exc: BaseException) -> Callable[..., object]:
    def run(*_a: object) -> object:
        raise exc

    return run


# code -> (argv builder, what must be patched to raise, stderr fragment)
Case = tuple[Callable[[Path], list[str]], BaseException | None, str]
CASES: dict[int, Case] = {
    0: (lambda t: ["inspect", str(_model(t))], None, ""),
    1: (lambda t: ["cluster", str(_model(t))], None, "torchrun"),
    2: (lambda t: ["bench", str(_model(t)), "--budget", "0"], None, "--budget"),
    3: (lambda t: ["inspect", str(t / "nothing-here")], None, "no such"),
    4: (lambda t: ["inspect", str(_fifo(t))], None, "FIFO"),
    5: (lambda t: ["inspect", str(_corrupt(t))], None, "header"),
    8: (lambda t: ["synth", str(t / "huge"), "--size", "1000TiB"], None, "free in"),
    70: (lambda t: ["inspect", str(_model(t))], RuntimeError("boom"), "internal error"),
    130: (lambda t: ["inspect", str(_model(t))], KeyboardInterrupt(), "interrupted"),
    143: (lambda t: ["inspect", str(_model(t))], Terminated(), "terminated"),
}
#: Codes whose case lives in a test with the setup it needs (file, test name).
ELSEWHERE = {
    6: ("test_unprivileged.py", "test_a_report_path_nobody_cannot_write_is_refused_first"),
    7: ("test_faults.py", "test_eio_is_one_clear_error_per_command"),
    10: ("test_doctor.py", "test_doctor_on_the_emulated_disk_recommends_what_the_trials_show"),
}


def test_every_documented_code_has_a_case() -> None:
    assert set(documented_table()) == set(CASES) | set(ELSEWHERE)
    for code, (file, name) in ELSEWHERE.items():
        body = (ROOT / "tests" / "integration" / file).read_text(encoding="utf-8")
        assert f"def {name}(" in body, (code, file, name)


@pytest.mark.parametrize("code", sorted(CASES))
def test_each_documented_code_is_what_the_command_returns(
    code: int, cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv_of, raises, says = CASES[code]
    argv = argv_of(tmp_path)
    if raises is not None:
        monkeypatch.setattr(loadscope.model.inspection, "inspect_target", _raise(raises))
    result = cli(*argv)
    assert result.code == code, result
    assert says in result.err, result.err
    if code != 2:  # argparse's usage lines come before its one error line
        assert result.err.count("\n") <= 1, result.err
