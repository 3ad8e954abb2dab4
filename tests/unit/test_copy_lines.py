"""What ``copy`` prints for the user to paste: quoted paths, and no copy to stdout."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

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


@pytest.mark.parametrize(
    ("weights", "said"),
    [
        # It named DEST/model.safetensors whatever was copied: absent for shards and for
        # torch checkpoints.
        (["model.safetensors"], "safetensors: load_file('/d/model.safetensors')"),
        (["a.safetensors", "b.safetensors"], "safetensors: loadscope.load_model('/d')  # its 2"),
        (["pytorch_model.bin"], "torch: torch.load('/d/pytorch_model.bin', weights_only=True)"),
        (["a.bin", "b.bin"], "torch: loadscope.load_model('/d')  # its 2 shards"),
    ],
)
def test_the_library_line_names_what_was_copied(weights: list[str], said: str) -> None:
    assert any(line.startswith(said) for line in pointer_lines("/d", weights))


@pytest.mark.integration
def test_a_copy_of_one_format_leaves_the_other_formats_index_behind(tmp_path: Path) -> None:
    # A folder with both formats: the copy of its safetensors took pytorch_model.bin.index.json
    # too, an index of shards that were not copied.
    from loadscope.tools.synth import synthesize

    src = synthesize(tmp_path / "m", 2 << 20, shards=2, fmt="both").root
    result = run_loadscope("copy", str(src), str(tmp_path / "d"), "--quiet")
    assert result.code == 0, result.err
    names = {p.name for p in (tmp_path / "d").iterdir()}
    assert "model.safetensors.index.json" in names and "config.json" in names
    assert not any(n.startswith("pytorch_model") for n in names), names


@pytest.mark.integration
def test_a_copy_of_one_shard_leaves_the_index_of_the_others_behind(tmp_path: Path) -> None:
    from loadscope.tools.synth import synthesize

    src = synthesize(tmp_path / "m", 2 << 20, shards=2).root
    one = sorted(src.glob("*.safetensors"))[0]
    result = run_loadscope("copy", str(one), str(tmp_path / "d"), "--quiet")
    assert result.code == 0, result.err
    names = {p.name for p in (tmp_path / "d").iterdir()}
    assert one.name in names and "config.json" in names
    assert "model.safetensors.index.json" not in names, names
