"""What ``copy`` prints for the user to paste: quoted paths, and no copy to stdout."""

from __future__ import annotations

import ast
import shlex

import pytest

from loadscope.actions.localcopy import pointer_lines
from loadscope.tools.synth import SyntheticCheckpoint
from tests.conftest import run_loadscope


def test_pointer_lines_survive_a_space_and_a_quote() -> None:
    dest = "/data/my model's copy"
    lines = dict(line.split(": ", 1) for line in pointer_lines(dest))
    call = ast.parse(lines["transformers"]).body[0].value  # type: ignore[attr-defined]
    assert ast.literal_eval(call.args[0]) == dest
    assert shlex.split(lines["vLLM"].split("   ")[0]) == ["vllm", "serve", dest]
    assert shlex.split(lines["SGLang"])[-1] == dest


@pytest.mark.integration
def test_copy_to_dash_is_a_usage_error(synth_single: SyntheticCheckpoint) -> None:
    result = run_loadscope("copy", str(synth_single.root), "-")
    assert result.code == 2
    assert "cannot go to stdout" in result.err and "Traceback" not in result.err
