"""Every malformed or hostile input gets its exact error, its exit code and one clean line."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadscope.model.inspection import inspect_target
from loadscope.model.targets import resolve
from tests.conftest import CliRunner, run_loadscope
from tests.malformed_cases import CASES, Case

pytestmark = pytest.mark.hardening("hostile-files")


@pytest.fixture(autouse=True)
def empty_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = tmp_path / "empty-hub"
    hub.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))


def test_there_are_at_least_twenty_cases() -> None:
    assert len(CASES) >= 20
    assert len({c.id for c in CASES}) == len(CASES)
    assert {c.id for c in CASES} >= REAL_PROCESS


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_exact_error_class(case: Case, tmp_path: Path) -> None:
    target = case.build(tmp_path)
    with pytest.raises(case.error) as info:
        inspect_target(resolve(target))
    assert type(info.value) is case.error, f"{type(info.value).__name__}: {info.value}"
    assert case.says.lower() in str(info.value).lower()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_cli_one_line_and_exit_code(case: Case, tmp_path: Path, cli: CliRunner) -> None:
    target = case.build(tmp_path)
    result = cli("inspect", target)
    assert result.code == int(case.error.exit_code)
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("loadscope: ")
    assert Path(target).name in lines[0] or target in lines[0]
    assert "Traceback" not in result.err


#: What a real process adds over the in-process runs: a FIFO or device that would block
#: or never end, a loop, a pickle, a huge claim (the rest differ only in their message).
REAL_PROCESS = {
    "fifo",
    "socket",
    "symlink-to-dev-zero",
    "symlink-loop",
    "dir-fifo-shard",
    "length-2**63",
    "header-nested-too-deep",
    "git-lfs-pointer",
    "html-page",
    "torch-garbage",
    "index-path-traversal",
    "missing-path",
}


@pytest.mark.integration
@pytest.mark.parametrize("case", [c for c in CASES if c.id in REAL_PROCESS], ids=lambda c: c.id)
def test_real_process_no_traceback_no_hang(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = case.build(tmp_path)
    # A FIFO or /dev/zero must be refused at once: a hang would hit this timeout.
    result = run_loadscope("inspect", target, timeout=30)
    assert result.code == int(case.error.exit_code), result.err
    assert "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1, result.err


def test_a_deep_header_is_refused_before_the_json_parser_recurses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A header nested 100,000 deep made the JSON parser recurse to the interpreter's
    limit; a finalizer that ran there printed its own error beside the one line (CI,
    once). It is refused by its brackets first; strings holding brackets are not
    counted, and a real header's three levels pass."""
    import json as json_mod

    from loadscope.loaders import safetensors_format as fmt

    def never(*_a: object, **_k: object) -> None:
        raise AssertionError("the JSON parser ran")

    deep = b'{"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    monkeypatch.setattr(fmt.json, "loads", never)
    with pytest.raises(fmt.HeaderNotJson, match="nested too deeply"):
        fmt.parse_header(deep, file_size=len(deep) + 8, path="m.safetensors")
    monkeypatch.setattr(fmt.json, "loads", json_mod.loads)
    assert not fmt._deeper_than(b'{"a":"' + b"[" * 500 + b'"}', fmt.MAX_DEPTH)
    real = b'{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{}}'
    assert not fmt._deeper_than(real, 3) and fmt._deeper_than(real, 2)
