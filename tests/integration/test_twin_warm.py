"""The warm line a torch.load script is given runs as printed and warms the torch files."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadscope.advice.rules import advise_facts
from loadscope.tools.synth import synthesize
from tests.conftest import run_here
from tests.unit.test_advice import facts

pytestmark = pytest.mark.integration


def test_the_torch_load_warm_line_runs_as_printed(tmp_path: Path) -> None:
    ck = synthesize(tmp_path / "my model", 4 << 20, shards=2, fmt="both", seed=41)
    f = facts({"pickle": 6.0, "mmap": 2.0}, {"mmap": 0.2}, formats={"torch"})
    f.model_root = str(ck.root)
    f.safetensors_beside = sorted(p.name for p in ck.root.glob("*.safetensors"))
    f.model_path = str(ck.root / "model.safetensors.index.json")
    f.torch_files = sorted(p.name for p in ck.root.glob("*.bin"))
    f.torch_index = "pytorch_model.bin.index.json"
    rec = next(r for r in advise_facts(f).recommendations if r.id == "prewarm")
    line = next(s for s in rec.snippets if s.stack == "torch.load").code
    run = run_here(
        ["bash", "-c", line.replace("loadscope warm", "python -m loadscope warm", 1)], timeout=120
    )
    assert run.returncode == 0, run.stderr
    warmed = [ln for ln in run.stdout.splitlines() if "->" in ln and "/" in ln]
    assert warmed and all(ln.rstrip().endswith(".bin") for ln in warmed)
