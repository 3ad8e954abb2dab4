"""A source that is not a path (issue 50, item 5): a toy store that serves a model from
memory, declared by one probe module (``tests/plugins/toy_memory_probe.py``: the source
and its probe) and one strategy module (``toy_memory_strategy.py``: two ways to read it),
named in ``$LOADSCOPE_PROBE_MODULES`` / ``$LOADSCOPE_STRATEGY_MODULES`` as a user would.
``loadscope doctor memory:8MiB,shards=2`` probes it with the machine's probes and its own,
runs only its strategies (their tensors checked against each other), and the report
(schema-valid) shows it in the text, the Markdown, the HTML and the app."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from loadscope.diagnosis.doctor_report import load_report
from loadscope.probes import registry, sources
from loadscope.probes.sources import BadAddress, Source, SourceObject, register_source
from tests.conftest import run_here

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
MODEL = "memory:8MiB,shards=2"
#: How the reports name where the model is.
WHERE = "a toy store in memory: 2 object(s), 8 MiB"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), env.get("PYTHONPATH", "")]).rstrip(":")
    env["LOADSCOPE_PROBE_MODULES"] = "toy_memory_probe"
    env["LOADSCOPE_STRATEGY_MODULES"] = "toy_memory_strategy"
    return env


def _loadscope(*args: str, env: dict[str, str] | None = None) -> Any:
    return run_here([sys.executable, "-m", "loadscope", *args], env=env or _env(), timeout=240)


@pytest.fixture(scope="module")
def doctored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One doctor run on the toy source: its JSON report and its text."""
    out = tmp_path_factory.mktemp("toy source") / "doctor.json"
    done = _loadscope("doctor", MODEL, "--budget", "12", "--quiet", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    return out, done.stdout


def test_the_doctor_probes_and_times_only_what_reads_the_source(
    doctored: tuple[Path, str],
) -> None:
    path, text = doctored
    doc = load_report(str(path))  # schema-valid, or this raises
    target = doc["probe"]["target"]
    assert target["source_kind"] == "memory" and target["files"] == 2
    assert target["source_title"] == "a toy store in memory"
    probe = doc["probe"]
    # Its own probe ran, on its budget; the machine's too; the file probes said why not.
    store = probe["memory_store"]
    assert store["status"] == "ok" and store["objects"] == 2
    assert [p["block_bytes"] for p in store["points"]] == [64 << 10, 1 << 20, 16 << 20]
    assert all(p["bytes_per_s"] > 0 for p in store["points"])
    assert probe["system"]["status"] == "ok" and probe["files"] == []
    for name in ("latency", "throughput"):
        assert probe[name]["status"] == "skipped"
        assert "a toy store in memory" in probe[name]["reason"]
    # Only the source's strategies were considered: no file strategy listed as skipped.
    bench = doc["bench"]
    assert bench["skipped"] == {}
    ran = {t["strategy"] for t in bench["trials"] if t["status"] == "ok"}
    assert ran == {"memory-copy", "memory-tensors"}
    assert all(t["cache"] == "cold" for t in bench["trials"])
    # The first trial's tensors are the reference; every other matched them (status ok).
    assert sum(1 for t in bench["trials"] if t["detail"].get("reference")) == 1
    assert all(t["status"] == "ok" for t in bench["trials"])
    # The verdict names the faster of the two by their medians.
    medians = {s["strategy"]: s["median_seconds"] for s in bench["summary"]}
    faster = min(medians, key=lambda n: medians[n])
    assert doc["verdict"]["headline"].startswith(f"{faster} loads the 8 MiB")
    assert "evidence: the model is in a toy store in memory" in text


#: In the plugins' environment: the report in every medium.
_RENDER = """
import json, sys
from loadscope.diagnosis.doctor_report import load_report, report_text
from loadscope.report.markdown import to_markdown
from loadscope.report.html import to_html
doc = load_report(sys.argv[1])
print(json.dumps({"text": report_text(doc), "md": to_markdown(doc), "html": to_html(doc)}))
"""


def test_every_medium_shows_the_source_and_its_probe(doctored: tuple[Path, str]) -> None:
    path, _text = doctored
    done = run_here([sys.executable, "-c", _RENDER, str(path)], env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    shown = json.loads(done.stdout)
    doc = json.loads(path.read_text())
    rates = doc["probe"]["memory_store"]["points"]
    for medium, body in shown.items():
        flat = " ".join(body.split())
        assert WHERE in flat, medium
        assert "not probed: the model is in a toy store in memory" in flat, medium
        assert "objects 2 (8 MiB)" in flat, medium
        assert "copy rate by request size: 64 KiB" in flat, medium
        assert len(rates) == 3
        assert doc["verdict"]["headline"][:30] in flat, medium
        for name in ("memory-copy", "memory-tensors"):
            assert name in flat, medium


def test_the_app_shows_the_source_and_its_probe(
    doctored: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _text = doctored
    monkeypatch.setattr(registry, "PROBES", dict(registry.PROBES))
    monkeypatch.setattr(sources, "SOURCES", dict(sources.SOURCES))
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.delitem(sys.modules, "toy_memory_probe", raising=False)
    importlib.import_module("toy_memory_probe")
    monkeypatch.delitem(sys.modules, "toy_memory_probe")
    from textual.widgets import Static

    from loadscope.tui.app import LoadscopeApp
    from tests.tui.harness import drive

    seen: dict[str, str] = {}

    async def steps(app: LoadscopeApp, pilot: Any) -> None:
        await pilot.pause()
        for name in ("probe-summary", "probe-registered", "verdict"):
            seen[name] = " ".join(str(app.query_one(f"#{name}", Static).render()).split())
        # No file reads to chart: the file probes' charts are not drawn empty.
        for chart in ("latency", "by-block", "by-readers"):
            seen[chart] = str(app.query_one(f"#{chart}").display)

    drive(steps, report=str(path), size=(100, 40))
    assert WHERE in seen["probe-summary"]
    assert [seen[c] for c in ("latency", "by-block", "by-readers")] == ["False"] * 3
    assert "objects 2 (8 MiB)" in seen["probe-registered"]
    assert json.loads(path.read_text())["verdict"]["headline"][:30] in seen["verdict"]


def test_a_bad_address_is_one_line_and_without_the_module_it_is_a_path() -> None:
    bad = _loadscope("probe", "memory:lots", "--quiet")
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.count("\n") == 1 and "bad memory address 'memory:lots'" in bad.stderr
    bare = dict(os.environ)
    bare.pop("LOADSCOPE_PROBE_MODULES", None)
    gone = _loadscope("probe", MODEL, "--quiet", env=bare)
    assert gone.returncode == 3 and "no such file or directory" in gone.stderr
    assert "Traceback" not in bad.stderr + gone.stderr


@pytest.mark.parametrize(
    ("command", "what"),
    [
        (["warm", MODEL], "loadscope warm"),
        (["copy", MODEL, "/nonexistent/dest"], "loadscope copy"),
        (["inspect", MODEL], "loadscope inspect"),
        (["bench", MODEL, "--ranks", "2"], "bench --ranks"),
    ],
)
def test_a_command_that_reads_files_says_so_in_one_line(command: list[str], what: str) -> None:
    done = _loadscope(*command)
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip() == (
        f"loadscope: {MODEL}: {what} reads files, and this model is in a toy store in memory"
        " (loadscope doctor, probe and bench measure it there)"
    )


def _listing(address: str) -> tuple[SourceObject, ...]:
    return (SourceObject("model.safetensors", 1),)


def test_a_source_is_refused_a_taken_name_or_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "SOURCES", {})
    register_source(Source("one", "store one", ("one://",), _listing))
    for clash in (
        Source("files", "files", ("f://",), _listing),
        Source("one", "again", ("two://",), _listing),
        Source("two", "nested", ("one://deeper",), _listing),
        Source("three", "none", (), _listing),
    ):
        with pytest.raises(ValueError):
            register_source(clash)
    assert list(sources.SOURCES) == ["one"]
    assert isinstance(BadAddress("x"), sources.SourceError)


def test_a_probe_module_that_cannot_be_imported_is_said_once() -> None:
    """The targets' source lookup and the probes' registry both import the modules
    ``$LOADSCOPE_PROBE_MODULES`` names: one that fails is one line, not one per import,
    and the command goes on without it."""
    env = _env()
    env["LOADSCOPE_PROBE_MODULES"] = "no_such_probe_module"
    env.pop("LOADSCOPE_STRATEGY_MODULES")
    done = _loadscope("probe", "synthetic:1MiB", "--quiet", "--budget", "2", env=env)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "no_such_probe_module" in line]
    assert said == [
        "loadscope: $LOADSCOPE_PROBE_MODULES: no_such_probe_module: ModuleNotFoundError:"
        " No module named 'no_such_probe_module'"
    ]
