"""A probe and a strategy from one module each (issue 39): declared once, found in every
output. ``tests/plugins/toy_probe.py`` and ``toy_strategy.py`` are named in
``$LOADSCOPE_PROBE_MODULES`` / ``$LOADSCOPE_STRATEGY_MODULES`` (``base/plugins.py``), as a
user would, and run in a fresh interpreter (the registries read them on import; the
trials' workers inherit the environment)."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadscope.probes import registry
from tests.conftest import run_here

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "doctor_emulated.json"


def _env(**names: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), env.get("PYTHONPATH", "")]).rstrip(":")
    env.update(names)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = run_here(args, cwd=cwd, env=env, timeout=240)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return done


#: In the plugin's environment: the schema generated from the registry, the probe
#: report validated against it, and a doctor report carrying that probe rendered as
#: Markdown and HTML, with the facts the advice would read.
_RENDER = """
import json, sys
import jsonschema
from loadscope.report.schema import generate
from loadscope.report.markdown import to_markdown
from loadscope.report.html import to_html
from loadscope.probes.registry import contributed_facts
probe = json.load(open(sys.argv[1]))
schema = generate()
jsonschema.validate(probe, {**schema, "$ref": "#/$defs/probe_report"})
doc = json.load(open(sys.argv[2]))
doc["probe"] = probe
print(json.dumps({
    "defs": sorted(schema["$defs"]),
    "toy_schema": schema["$defs"]["probe_report"]["properties"]["toy_files"],
    "markdown": to_markdown(doc),
    "html": to_html(doc),
    "facts": contributed_facts(probe),
}))
"""


def test_a_probe_from_one_module_reaches_every_output(tmp_path: Path) -> None:
    env = _env(LOADSCOPE_PROBE_MODULES="toy_probe")
    out = tmp_path / "probe.json"
    text = _run(
        [
            sys.executable,
            "-m",
            "loadscope",
            "probe",
            "synthetic:8MiB",
            "--quiet",
            "--budget",
            "4",
            "--synth-dir",
            str(tmp_path),
            "--json",
            str(out),
        ],
        env,
        tmp_path,
    ).stdout
    probe = json.loads(out.read_text())
    block = probe["toy_files"]
    assert block["status"] == "ok" and block["files"] == 1 and block["bytes_on_disk"] > 0
    # Its share of the measured budget (5%) was given to it, not more.
    assert 0 < block["given_s"] <= 0.05 * 4
    line = f"toy probe saw 1 file(s), {block['bytes_on_disk']} bytes"
    assert line in " ".join(text.split())
    got = json.loads(
        _run([sys.executable, "-c", _RENDER, str(out), str(GOLDEN)], env, tmp_path).stdout
    )
    assert "FilesSeen" in got["defs"]  # its record's schema
    assert {"files", "bytes_on_disk", "given_s"} <= set(got["toy_schema"]["properties"])
    # Under the probes' figures, with its label, as the terminal shows it (issue 50).
    assert f"toy        {line}" in got["markdown"]
    assert line in got["html"]
    assert got["facts"]["toy_bytes_on_disk"] == block["bytes_on_disk"]


def test_without_the_module_the_committed_schema_holds_no_toy(tmp_path: Path) -> None:
    """The registry adds the block only where the module is named: the committed schema
    (regenerated and diffed in ``tests/unit/test_schema.py``) is the built-ins'."""
    committed = json.loads(
        (Path(__file__).resolve().parents[2] / "loadscope/report/report.schema.json").read_text()
    )
    blocks = committed["$defs"]["probe_report"]["properties"]
    assert "toy_files" not in blocks and "FilesSeen" not in committed["$defs"]
    assert "gpus" in blocks and "GpuFacts" in committed["$defs"]


def test_the_apps_probe_view_shows_a_probe_from_one_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "PROBES", dict(registry.PROBES))
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.delitem(sys.modules, "toy_probe", raising=False)
    importlib.import_module("toy_probe")
    monkeypatch.delitem(sys.modules, "toy_probe")
    from loadscope.tui.probes_view import ProbesView, probe_content

    doc: dict[str, Any] = {
        "toy_files": {"status": "ok", "files": 3, "bytes_on_disk": 4096, "given_s": 0.1},
        "gpus": {"status": "unavailable", "reason": "no NVIDIA GPU found"},
    }
    shown = [row for row in probe_content(doc).rest if row[0] != "took"]
    assert shown == [
        ("gpus", "unavailable: no NVIDIA GPU found"),
        ("toy", "toy probe saw 3 file(s), 4096 bytes"),
    ]

    from textual.widgets import Static

    from tests.tui.harness import in_a_view

    async def steps(app: Any, pilot: Any) -> str:
        app.query_one(ProbesView).show(doc)
        await pilot.pause()
        return str(app.query_one("#probe-registered", Static).render())

    shown = in_a_view(ProbesView(id="probes"), steps, size=(80, 40))
    assert "toy probe saw 3 file(s), 4096 bytes" in shown


#: In the strategy's environment: its place in the doctor's plan (on a probe of the
#: model), and its stack route in the parallel-reads fix with its own trial's number.
_PLAN = """
import json, sys
from loadscope.model.targets import resolve
from loadscope.engine.probing import run_probes
from loadscope.diagnosis.trial_plan import choose_strategies, plan_doctor
from loadscope.advice.snippets import load_snippets

class Trials:
    layout = ""
    def speedup(self, strategy, cache="cold", base_name="mmap"):
        return 1.7 if strategy == "toy-read" else None
    def cold_trial_ids(self, strategy):
        return [4]
    def why_not_measured(self, strategy):
        return None
    def how_obtained(self, strategy, base_name="mmap"):
        return "measured"
    def speedup_range(self, strategy, base_name="mmap"):
        return None
    def ranks_note(self, mode):
        return ""

target = resolve(sys.argv[1])
probe = run_probes(target, budget_s=2.0, local_disks=False)
plan = plan_doctor(target, probe, 30.0, "cpu", None, [])
from dataclasses import asdict
snips = [asdict(s) for s in load_snippets("parallel-reads", Trials(), "/m/x")]
print(json.dumps({"chosen": choose_strategies(probe), "plan": plan.strategies,
                  "snippets": [s for s in snips if s["strategy"] == "toy-read"]}))
"""


def test_a_strategy_from_one_module_runs_in_the_bench_the_plan_and_a_snippet(
    tmp_path: Path,
) -> None:
    env = _env(LOADSCOPE_STRATEGY_MODULES="toy_strategy")
    model = tmp_path / "m"
    _run([sys.executable, "-m", "loadscope", "synth", str(model), "--size", "8MiB"], env, tmp_path)
    table = _run(
        [
            sys.executable,
            "-m",
            "loadscope",
            "bench",
            str(model),
            "--quiet",
            "--repeats",
            "1",
            "--no-warmup",
            "--strategies",
            "mmap,toy-read",
        ],
        env,
        tmp_path,
    ).stdout
    row = next(line for line in table.splitlines() if line.lstrip().startswith("toy-read"))
    assert re.match(r"toy-read\s+cold\s+[\d.]+s\s+[\d.]+ [kMG]B/s\s+[\d.]+x", row.strip()), table
    got = json.loads(_run([sys.executable, "-c", _PLAN, str(model)], env, tmp_path).stdout)
    chosen = got["chosen"]
    # doctor_order 95: after the folklore fix (90), before prefetch (100).
    assert chosen.index("fullread") < chosen.index("toy-read") < chosen.index("prefetch")
    assert "toy-read" in got["plan"]
    (snip,) = got["snippets"]
    assert (
        snip["code"]
        == "import toyload  # the toy plugin's loader\nstate = toyload.read_all('/m/x')"
    )
    assert snip["speedup"] == 1.7 and snip["trial_ids"] == [4]
