"""``loadscope time --profile`` (issue 52): one more cold run of the command sampled by py-spy,
its wall time split into phases by the declared rules (``loadscope/engine/phases.py``).

The script has known phases, each timed by its own clock: a heavy import (torch), a cold
``load_file`` of 64 MiB from the emulated disk (a network block volume at 64 MiB/s) and
its copy into a module (``load_state_dict``: the mapped pages are read there), a real
``torch.compile`` of a small module on the CPU, and a download from a local HTTP server
that waits before it answers. The rules name none of the script's own functions; the
seconds of "reading weights" are checked against the model's bytes that reached the page
cache while they ran."""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from loadscope.engine.phases import PHASES, attribute, phase_of, stretches
from loadscope.engine.profiler import ptrace_blocked_reason, py_spy
from loadscope.report.schema import check as check_schema
from loadscope.tools.blockemu import block_unavailable_reason, emulated_block_disk
from loadscope.tools.emulator import EmulatorSettings
from loadscope.tools.synth import synthesize
from tests.conftest import run_loadscope

pytestmark = pytest.mark.integration

SCRIPT = """\
import json, sys, time
clock = {}
t = time.perf_counter()
import torch
from safetensors.torch import load_file
import urllib.request
clock["imports"] = time.perf_counter() - t
t = time.perf_counter()
state = load_file(sys.argv[1])
clock["reading weights"] = time.perf_counter() - t
module = torch.nn.Module()
for i, tensor in enumerate(state.values()):
    module.register_buffer(f"w{i}", torch.empty_like(tensor))
t = time.perf_counter()
module.load_state_dict({f"w{i}": v for i, v in enumerate(state.values())})
clock["converting and copying tensors"] = time.perf_counter() - t
t = time.perf_counter()
model = torch.compile(torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU()))
model(torch.randn(4, 32))
clock["compilation"] = time.perf_counter() - t
t = time.perf_counter()
urllib.request.urlopen(sys.argv[2]).read()
clock["network downloads"] = time.perf_counter() - t
print(json.dumps(clock), file=sys.stderr)
"""
#: How long the local server waits before it answers: the download's time.
DOWNLOAD_S = 1.5


@pytest.fixture
def slow_server() -> Iterator[str]:
    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(DOWNLOAD_S)
            body = b"x" * 1024
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/weights.bin"
    finally:
        server.shutdown()
        server.server_close()


def _can_profile() -> str | None:
    if py_spy() is None:
        return "py-spy is not installed"
    return ptrace_blocked_reason() or block_unavailable_reason()


@pytest.mark.skipif(_can_profile() is not None, reason=f"cannot profile here: {_can_profile()}")
def test_profile_splits_a_start_into_the_phases_the_script_timed(
    tmp_path: Path, slow_server: str
) -> None:
    source = synthesize(tmp_path / "m", 64 << 20, seed=3).root
    script = tmp_path / "start.py"
    script.write_text(SCRIPT)
    log = tmp_path / "out.log"
    slow = EmulatorSettings(latency_s=0.001, jitter_s=0, bandwidth_bytes_per_s=64 << 20)
    with emulated_block_disk(source, tmp_path / "mnt", slow) as disk:
        model = disk.path / "model.safetensors"
        result = run_loadscope(
            "time", "--profile", "--rounds", "1", "--fixes", "none", "--model", str(model),
            "--output", str(log), "--json", str(tmp_path / "t.json"),
            "--flamegraph", str(tmp_path / "flame graph.svg"),
            "--", sys.executable, str(script), "{model}", slow_server,
            timeout=300,
        )  # fmt: skip
    assert result.code == 0, result.err
    doc = json.loads((tmp_path / "t.json").read_text())
    check_schema(doc, "time")
    table = doc["phases"]
    assert not table["reason"], table
    # The profiled run's own clock, the last JSON line it wrote.
    clocks = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    clock = clocks[-1]
    got = {p["name"]: p["seconds"] for p in table["phases"]}
    for name, want in clock.items():
        assert abs(got.get(name, 0.0) - want) <= max(0.2, 0.15 * want), (name, want, got)
    assert sum(got.values()) == pytest.approx(table["wall_s"], rel=1e-6)
    # The phases agree with the bytes: load_file maps the model, and its pages reach the
    # page cache as load_state_dict copies them in; both count with the load.
    model_size = (source / "model.safetensors").stat().st_size
    assert table["arrived_by"] == "page cache", table
    assert table["arrived_bytes"] >= 0.9 * model_size, (table, model_size)
    arrived = {p["name"]: p["arrived_bytes"] or 0.0 for p in table["phases"]}
    loading = arrived["reading weights"] + arrived["converting and copying tensors"]
    assert loading >= 0.85 * table["arrived_bytes"], arrived
    assert arrived["converting and copying tensors"] >= 0.5 * table["arrived_bytes"], arrived
    text = result.out
    assert "reading weights and converting and copying tensors (where the model's" in text
    # The flame graph: the same stretches, so its legend gives the table's seconds.
    svg = (tmp_path / "flame graph.svg").read_text()
    ElementTree.fromstring(svg)
    for name in ("reading weights", "compilation", "converting and copying tensors"):
        assert f"{name} {got[name]:.2f} s" in svg, name
    assert f"flame graph: {tmp_path / 'flame graph.svg'}" in text
    assert "where the time goes" in text and "a load fix saves at most" in text, text
    for name in clock:
        assert name in text


def test_the_rules_put_each_frame_in_its_phase() -> None:
    """The declared table, frame by frame: an import under torch.compile is compilation;
    a safetensors read under from_pretrained is reading weights; a module's top level
    run by an import is an import."""
    imp = ("_find_and_load", "<frozen importlib._bootstrap>")
    dynamo = ("_fn", "/x/torch/_dynamo/eval_frame.py")
    compile_ = ("compile", "/x/torch/__init__.py")
    st = ("load_file", "/x/safetensors/torch.py")
    hf = ("from_pretrained", "/x/transformers/modeling_utils.py")
    top = ("<module>", "/x/transformers/modeling_utils.py")
    script = ("<module>", "/y/start.py")
    assert phase_of([script, imp, ("<module>", "/x/torch/__init__.py")]) == "imports"
    assert phase_of([script, dynamo, imp]) == "compilation"
    assert phase_of([script, compile_, imp, ("<module>", "/x/torch/_dynamo/__init__.py")]) == (
        "compilation"
    )
    assert phase_of([script, hf, st]) == "reading weights"
    assert phase_of([script, hf]) == "model construction"
    assert phase_of([script, imp, top]) == "imports"
    assert phase_of([script, ("sleep_a_while", "/y/start.py")]) == "other"
    names = [p.name for p in PHASES]
    assert names.index("compilation") < names.index("imports")


def _b(tid: int, ts: float, name: str, path: str = "") -> dict[str, Any]:
    return {"ph": "B", "tid": tid, "ts": ts, "name": name, "args": {"filename": path}}


def _e(tid: int, ts: float, name: str) -> dict[str, Any]:
    return {"ph": "E", "tid": tid, "ts": ts, "name": name, "args": {}}


def test_each_stretch_between_samples_goes_to_the_stack_it_began_with() -> None:
    """py-spy's chrometrace: the main thread of the first Python process, its stretches
    timed by the trace's own clock (a late tick covers its time); another thread and a
    child process do not count; what lies outside the samples is said as not sampled."""
    main, other_thread, child = 1, 2, 3
    trace = [
        _b(main, 0, "thread (10): MainThread"),
        _b(main, 0, "<module>", "/y/s.py"),
        _b(main, 0, "load_file", "/x/safetensors/torch.py"),
        _b(other_thread, 0, "thread (11): Thread-1"),
        _b(other_thread, 0, "run", "/x/safetensors/torch.py"),
        _b(child, 0, "thread (12): MainThread"),
        _b(child, 0, "<module>", "/y/w.py"),
        _e(main, 1_500_000, "load_file"),
        _b(main, 1_500_000, "sleepy", "/y/s.py"),
        _e(main, 2_000_000, "sleepy"),
        _e(main, 2_000_000, "<module>"),
        _e(main, 2_000_000, "thread (10): MainThread"),
    ]
    table = attribute(trace, 2.25)
    got = {p.name: p.seconds for p in table.phases}
    assert got == pytest.approx(
        {"reading weights": 1.5, "other": 0.5, "not sampled (start, exit)": 0.25}
    )
    assert next(p for p in table.phases if p.name == "other").frames == ["sleepy (s.py)"]
    assert table.wall_s == pytest.approx(2.25)


def test_every_view_of_a_report_shows_the_same_phases() -> None:
    """``doctor --cmd ... --profile``: the phases sit in the report's user-command section,
    and the text, the Markdown, the HTML and the app (one content model) show the same
    seconds and the same sentence on what a load fix can save; ``time``'s own text too."""
    import html as html_lib

    from textual.widgets import Static

    from loadscope.diagnosis.doctor_report import report_text
    from loadscope.diagnosis.timing import TimeReport, Variant
    from loadscope.diagnosis.timing_text import to_text
    from loadscope.engine.phases import PhaseTable, PhaseTime
    from loadscope.engine.usercmd import RunResult
    from loadscope.report.html import to_html
    from loadscope.report.markdown import to_markdown
    from loadscope.tui.views import BenchView
    from tests.conftest import REPO_ROOT
    from tests.tui.harness import in_a_view

    table = PhaseTable(
        10.0,
        250,
        [
            PhaseTime("compilation", 6.0, 0.6, arrived_bytes=0.0),
            PhaseTime("reading weights", 1.25, 0.125, arrived_bytes=float(3 << 20)),
            PhaseTime("imports", 1.75, 0.175, arrived_bytes=0.0),
            PhaseTime("other", 1.0, 0.1, ["_del_library (library.py)"], 0.4 * (1 << 20)),
        ],
        arrived_bytes=float(4 << 20),
        arrived_by="page cache",
    )
    run = RunResult("ok", 9.5, "exit", 0)
    as_is = Variant("as-is", "nothing", runs=[run], cold=[True])
    timed = TimeReport(["python", "s.py"], ["/m/a.safetensors"], 1 << 20, 1, [as_is], phases=table)
    doc = json.loads((REPO_ROOT / "tests" / "golden" / "doctor_emulated.json").read_text())
    doc["user_command"] = timed.to_dict()
    check_schema(doc, "doctor")
    check_schema(timed.to_dict(), "time")

    async def steps(app: Any, pilot: Any) -> str:
        app.query_one(BenchView).show_user_command(doc)
        await pilot.pause()
        return str(app.query_one("#user-command", Static).render())

    views = {
        "app": " ".join(in_a_view(BenchView(), steps).split()),
        "text": " ".join(report_text(doc).split()),
        "markdown": " ".join(to_markdown(doc).split()),
        "html": " ".join(html_lib.unescape(to_html(doc)).split()),
        "time": " ".join(to_text(timed).split()),
    }
    for name, text in views.items():
        for figure in ("6.00 s", "1.25 s", "1.75 s", "1.00 s"):
            assert figure in text, (name, figure)
        assert "reading weights: 1.25 s of 10 s (12%): a load fix saves at most" in text, name
        assert "60% in compilation: a persistent compile cache" in text, name
        assert "3 MiB arrived" in text, name
        assert "page cache: 4 MiB in the run, 75% while reading weights, 10% while other" in text


def test_a_run_py_spy_lost_early_is_no_profile() -> None:
    """py-spy attached, took the first samples, then was shut out (a command that made
    itself non-dumpable after it started): most of the run unsampled is said as no
    profile, with why, not a table whose biggest row is "not sampled"."""
    from loadscope.engine.phase_recorder import Recorder

    trace = [
        _b(1, 0, "thread (10): MainThread"),
        _b(1, 0, "<module>", "/y/s.py"),
        _b(1, 0, "_find_and_load", "<frozen importlib._bootstrap>"),
        _e(1, 70_000, "_find_and_load"),
        _e(1, 70_000, "<module>"),
        _e(1, 70_000, "thread (10): MainThread"),
    ]
    recorder = Recorder()
    recorder._out.write_text(json.dumps(trace))
    table = recorder.table(0.6)
    assert table.reason.startswith("py-spy sampled 0.07 s of the 0.6 s run: "), table.reason


def test_the_bytes_that_arrived_are_split_by_the_phases_they_arrived_in() -> None:
    """The check of the phases against the bytes: a counter sampled over the run (the
    model's residency) split by when each phase ran, on the run's clock (the trace's
    plus py-spy's start); a mapped model read as it is copied in counts that phase with
    the load; a run that brought nothing in says so."""
    from loadscope.engine.phases import answer, arrivals, cross_check, table_of
    from loadscope.engine.usercmd import TreeSample

    counter = [(0.0, 0.0), (1.0, 0.0), (1.5, 50.0), (2.0, 100.0), (3.0, 100.0)]
    assert arrivals([(1.25, 2.0)], counter) == (75, 100, 50)  # for sure: (1.5, 2.0) only
    weights = [("load_file", "/x/safetensors/torch.py")]
    copying = [("load_state_dict", "/x/torch/nn/modules/module.py")]
    parts = [(0.0, 0.5, weights), (0.5, 2.0, copying), (2.5, 1.0, [("main", "/y/s.py")])]
    model = 100 << 20
    samples = [
        TreeSample(t / 10, 0, 0, 0, min(1.0, max(0.0, (t / 10 - 1.0) / 2.0))) for t in range(0, 41)
    ]  # the model arrives from 1.0 s to 3.0 s of the run: while it was copied in
    table = table_of(parts, 4.0)
    cross_check(table, parts, 0.5, samples, model)
    rows = {p.name: p.arrived_bytes for p in table.phases}
    assert rows["converting and copying tensors"] == pytest.approx(model, rel=0.01)
    assert rows["reading weights"] == pytest.approx(0, abs=1 << 20)
    said = " ".join(answer(table))
    assert "reading weights and converting and copying tensors (where the model's bytes" in said
    assert "2.50 s of 4 s" in said and "the model is mapped" in said, said
    cached = [TreeSample(t / 10, 0, 0, 0, 1.0) for t in range(0, 41)]
    table = table_of(parts, 4.0)
    cross_check(table, parts, 0.5, cached, model)
    said = " ".join(answer(table))
    assert "almost none during the run" in said and said.startswith("reading weights: 0.50 s")
    # The whole model within one sample interval that spans two phases: not placed (a
    # fast disk and a small model), so no phase is counted with the load for it.
    coarse = [TreeSample(0.0, 0, 0, 0, 0.0), TreeSample(1.2, 0, 0, 0, 0.0)]
    coarse += [TreeSample(1.4, 0, 0, 0, 1.0), TreeSample(4.0, 0, 0, 0, 1.0)]
    parts = [(0.0, 1.25, [("f", "<frozen importlib._bootstrap>")]), (1.25, 2.0, [("main", "/y")])]
    table = table_of(parts, 4.0)
    cross_check(table, parts, 0.0, coarse, model)
    assert not table.arrived_placed and table.load_phases == []
    assert all(p.arrived_bytes is None for p in table.phases)
    said = " ".join(answer(table))
    assert said.startswith("reading weights: 0.00 s") and "too quickly to place by phase" in said


def test_the_flame_graph_is_the_stretches_drawn() -> None:
    """Each frame as wide as its stacks' seconds, coloured by its stack's phase; the
    legend gives each phase's seconds; labels are escaped."""
    from loadscope.report.flamegraph import WIDTH, flame_svg

    top = ("<module>", "/y/s.py")
    parts = [
        (0.0, 3.0, [top, ("load_file", "/x/safetensors/torch.py")]),
        (3.0, 1.0, [top, ("a<b>&c", "/y/s.py")]),
    ]
    svg = flame_svg(parts, 'python "s.py" <x>')
    root = ElementTree.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    tips = {g.find(f"{ns}title").text: g.find(f"{ns}rect") for g in root.iter(f"{ns}g")}
    frame = tips["load_file (torch.py): 3.00 s (75.0%), reading weights"]
    assert float(frame.get("width")) == pytest.approx(0.75 * WIDTH, abs=0.1)
    assert "a<b>&c (s.py): 1.00 s (25.0%), other" in tips
    assert tips["<module> (s.py): 4.00 s (100.0%), other"].get("width") == f"{WIDTH:.1f}"
    assert "reading weights 3.00 s (75%)" in svg and "other 1.00 s (25%)" in svg


def test_yamas_scope_one_lets_a_user_profile_a_command_that_names_its_tracer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scope 1 limits ptrace to a process's ancestors and the tracer it declared: the
    profiled command declares loadscope (its parent) before its program runs, so
    py-spy, loadscope's child, may attach. Scope 2 (root only) and 3 (none) refuse up
    front, with why. This kernel has no Yama: the check and the declaration's call in
    the child are tested; Yama's answer to it is not."""
    import subprocess

    from loadscope.engine import profiler

    yama = tmp_path / "ptrace_scope"
    monkeypatch.setattr(profiler, "_YAMA", yama)
    monkeypatch.setattr(profiler.os, "geteuid", lambda: 1000)
    yama.write_text("1\n")
    assert "scope is 1" in (profiler.ptrace_blocked_reason() or "")
    assert profiler.ptrace_blocked_reason(declared=True) is None
    declare = profiler.tracer_declaration()
    assert declare is not None
    # In the child, between fork and exec: it must not stop the command (without Yama the
    # kernel answers EINVAL, which is ignored).
    done = subprocess.run([sys.executable, "-c", "print('ran')"], preexec_fn=declare,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout == "ran\n"
    for scope, words in (("2", "only root may attach"), ("3", "disabled until reboot")):
        yama.write_text(scope)
        assert words in (profiler.ptrace_blocked_reason(declared=True) or "")
        assert profiler.tracer_declaration() is None
    monkeypatch.setattr(profiler.os, "geteuid", lambda: 0)
    yama.write_text("1")
    assert profiler.ptrace_blocked_reason() is None and profiler.tracer_declaration() is None


def test_a_first_process_that_waits_on_its_child_takes_the_childs_phases() -> None:
    """A server whose engine process loads the weights (vLLM's): while the first
    process's main thread waits (``poll``), its time goes to what the child's main
    thread did, under a frame naming the child; its own work stays its own. The two
    processes' threads share one thread id (pthread ids repeat across processes)."""

    def ev(ph: str, pid: int, ts: float, name: str, path: str = "") -> dict[str, Any]:
        return {"ph": ph, "pid": pid, "tid": 7, "ts": ts * 1e6, "name": name,
                "args": {"filename": path}}  # fmt: skip

    trace = [
        ev("B", 10, 0, "thread (10): MainThread"),
        ev("B", 10, 0, "<module>", "/y/serve.py"),
        ev("B", 10, 0, "poll", "/x/multiprocessing/popen_fork.py"),
        ev("B", 11, 0, "thread (11): MainThread"),
        ev("B", 11, 0, "spawn_main", "/x/multiprocessing/spawn.py"),
        ev("B", 11, 0.5, "load_file", "/x/safetensors/torch.py"),
        ev("E", 11, 1.5, "load_file"),
        ev("E", 10, 2.0, "poll"),
        ev("B", 10, 2.0, "tokenize_all", "/y/serve.py"),
        ev("E", 11, 2.0, "spawn_main"),
        ev("E", 11, 2.0, "thread (11): MainThread"),
        ev("E", 10, 3.0, "tokenize_all"),
        ev("E", 10, 3.0, "<module>"),
        ev("E", 10, 3.0, "thread (10): MainThread"),
    ]
    table = attribute(trace, 3.0)
    got = {p.name: p.seconds for p in table.phases}
    assert got == pytest.approx({"reading weights": 1.0, "other": 2.0}), got
    named = [f for _s, _span, frames in stretches(trace) for f in frames]
    assert ("(waiting on process 11)", "") in named
