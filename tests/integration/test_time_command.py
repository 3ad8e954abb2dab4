"""``loadscope time -- CMD`` (issue 42) on real commands: a safetensors script, a
``torch.load`` script, a transformers script; ready by a regex and by a local HTTP server;
a failing command; Ctrl-C mid-run leaving no process and no changed setting behind."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadscope.base.units import format_bytes
from loadscope.tools.synth import synthesize
from tests.conftest import REPO_ROOT, run_loadscope, slow_synthetic

pytestmark = pytest.mark.integration

PY = sys.executable


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def _timed(*args: str, timeout: float = 120) -> tuple[int, dict[str, Any], str]:
    result = run_loadscope("time", "--json", "-", "--quiet", *args, timeout=timeout)
    doc = json.loads(result.out) if result.out.strip() else {}
    return result.code, doc, result.err


def _variant(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in doc["variants"] if v["name"] == name)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesize(tmp_path_factory.mktemp("time-model"), 8 << 20, shards=2, seed=42).root


def test_a_safetensors_script_is_timed_cold_and_after_warm(model: Path, tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "load.py",
        """
        import glob, sys
        from safetensors.torch import load_file
        n = 0
        for f in sorted(glob.glob(sys.argv[1] + "/*.safetensors")):
            n += sum(t.numel() * t.element_size() for t in load_file(f).values())
        print("loaded", n)
        """,
    )
    code, doc, err = _timed(
        "--model", str(model), "--fixes", "warm", "--rounds", "2", "--", PY, str(script), "{model}"
    )
    assert code == 0, err
    base, warm = _variant(doc, "as-is"), _variant(doc, "warm")
    assert base["median_seconds"] > 0 and warm["median_seconds"] > 0
    assert len(base["runs"]) == 2 and all(base["cold"]), doc["notes"]
    assert all(r["exit_code"] == 0 and r["status"] == "ok" for r in base["runs"])
    # The command's own reads: at least the model's bytes through read calls, and the
    # residency of the model followed while it ran.
    run = base["runs"][0]
    assert run["read_call_bytes"] >= 0.9 * doc["total_bytes"]
    assert any(s["resident"] is not None for s in run["samples"])
    assert warm["before_seconds"] and warm["speedup"] is not None


def test_a_torch_load_script(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    root = synthesize(tmp_path_factory.mktemp("time-torch"), 4 << 20, fmt="torch", seed=7).root
    (weights,) = [p for p in root.iterdir() if p.suffix in (".bin", ".pt", ".pth")]
    script = _script(
        tmp_path,
        "load_torch.py",
        """
        import sys, torch
        state = torch.load(sys.argv[1], weights_only=True, map_location="cpu")
        print("tensors", len(state))
        """,
    )
    code, doc, err = _timed(
        "--model", str(weights), "--fixes", "none", "--rounds", "1", "--", PY, str(script),
        str(weights),
    )  # fmt: skip
    assert code == 0, err
    assert _variant(doc, "as-is")["median_seconds"] > 0
    assert doc["files"] == [str(weights)]


def test_a_transformers_script_on_a_tied_model(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    import torch

    config = transformers.LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "llama")
    script = _script(
        tmp_path,
        "hf.py",
        """
        import sys
        from transformers import AutoModelForCausalLM
        m = AutoModelForCausalLM.from_pretrained(sys.argv[1])
        assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()
        print("Loading weights took 0.0 s")
        """,
    )
    folder = str(tmp_path / "llama")
    code, doc, err = _timed(
        "--model", folder, "--fixes", "none", "--rounds", "1", "--until", "Loading weights took",
        "--", PY, str(script), "{model}",
    )  # fmt: skip
    assert code == 0, err
    run = _variant(doc, "as-is")["runs"][0]
    assert run["ready_by"] == "until" and "Loading weights took" in run["matched"]


def _marker_alive(marker: str, within_s: float = 3.0) -> bool:
    """Whether a process carrying ``marker`` is still alive ``within_s`` after the command
    returned (a process SIGKILLed a moment before may still be leaving the table on a
    loaded machine)."""
    end = time.monotonic() + within_s
    while True:
        out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
        if not out.stdout.strip() or time.monotonic() >= end:
            return bool(out.stdout.strip())
        time.sleep(0.1)


def test_ready_by_a_regex_stops_the_command_at_its_line(model: Path, tmp_path: Path) -> None:
    marker = f"loadscope-time-test-{os.getpid()}-regex"
    script = _script(
        tmp_path,
        "server.py",
        f"""
        import time
        print("Loading weights took 0.01 seconds", flush=True)
        time.sleep(120)  # {marker}
        """,
    )
    t0 = time.monotonic()
    code, doc, err = _timed(
        "--model", str(model), "--fixes", "none", "--rounds", "1", "--until",
        r"Loading weights took [\d.]+ seconds", "--", PY, str(script), marker,
    )  # fmt: skip
    assert code == 0, err
    assert time.monotonic() - t0 < 60
    assert _variant(doc, "as-is")["median_seconds"] < 30
    assert not _marker_alive(marker)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ready_when_a_local_http_server_answers(model: Path, tmp_path: Path) -> None:
    port = _free_port()
    marker = f"loadscope-time-test-{os.getpid()}-http"
    script = _script(
        tmp_path,
        "serve.py",
        f"""
        import http.server, time
        time.sleep(0.5)  # loading, then serving  {marker}
        http.server.HTTPServer(("127.0.0.1", {port}), http.server.SimpleHTTPRequestHandler
                               ).serve_forever()
        """,
    )
    code, doc, err = _timed(
        "--model", str(model), "--fixes", "none", "--rounds", "1", "--ready",
        f"http://127.0.0.1:{port}/", "--", PY, str(script), marker,
    )  # fmt: skip
    assert code == 0, err
    run = _variant(doc, "as-is")["runs"][0]
    assert run["ready_by"] == "url" and 0.5 <= run["seconds"] < 30
    assert not _marker_alive(marker)


def test_a_failing_command_is_reported_failed_not_timed(model: Path) -> None:
    result = run_loadscope(
        "time", "--model", str(model), "--fixes", "none", "--rounds", "2", "--quiet", "--",
        PY, "-c", "import sys; print('boom'); sys.exit(3)",
    )  # fmt: skip
    assert result.code == 1, result.err
    assert "the command failed (exit 3): not timed" in result.out
    assert "boom" in result.out  # its output went through
    assert "median" not in result.out


def test_bad_usage_is_one_line() -> None:
    for args, words in (
        ((), "no command to time"),
        (("--until", "(", "--", PY, "-V"), "not a regular expression"),
        (("--ready", "localhost:1", "--", PY, "-V"), "http:// or https://"),
        (("--fixes", "nope", "--", PY, "-V"), "unknown nope"),
        (("--", PY, "{model}"), "{model} in the command needs --model"),
    ):
        result = run_loadscope("time", *args)
        assert result.code == 2, (args, result.err)
        assert words in result.err and result.err.count("\n") == 1, result.err


@pytest.fixture
def slow_model(tmp_path: Path) -> Iterator[Path]:
    with slow_synthetic(tmp_path, 8 << 20, seed=5, latency_s=0.005) as path:
        yield path


@pytest.mark.skipif(os.geteuid() != 0, reason="the readahead fix writes sysfs (root)")
def test_ctrl_c_mid_run_leaves_no_process_and_no_changed_setting(
    slow_model: Path, tmp_path: Path
) -> None:
    from loadscope.tools.emulator import fuse_connection_settings

    dev = os.stat(slow_model).st_dev
    before = fuse_connection_settings(os.major(dev), os.minor(dev))
    marker = f"loadscope-time-test-{os.getpid()}-sigint"
    flag = tmp_path / "second-run"
    # The first run (as is) ends at once; the second (readahead raised) is stopped mid-run.
    script = _script(
        tmp_path,
        "slow.py",
        f"""
        import os, time
        if os.path.exists({str(flag)!r}):
            time.sleep(120)  # {marker}
        open({str(flag)!r}, "w").close()
        """,
    )
    env = {**os.environ, "LOADSCOPE_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadscope", "time", "--model", str(slow_model), "--fixes",
         "readahead", "--rounds", "1", "--", PY, str(script), marker],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    # Wait for the readahead run: the raised setting is what must come back.
    while fuse_connection_settings(os.major(dev), os.minor(dev))["read_ahead_kb"] != 8192:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the readahead run never started"
        time.sleep(0.02)
    import psutil

    # The command itself running (the marker is in loadscope's own argv too).
    while not any(marker in " ".join(c.cmdline()) for c in psutil.Process(proc.pid).children()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert fuse_connection_settings(os.major(dev), os.minor(dev)) == before
    assert not _marker_alive(marker)
    assert not list((tmp_path / "state").glob("settings-*.json"))


def test_doctor_cmd_times_the_users_command_in_every_report(model: Path, tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "load.py",
        """
        import glob, sys
        from safetensors.torch import load_file
        for f in sorted(glob.glob(sys.argv[1] + "/*.safetensors")):
            load_file(f)
        """,
    )
    out = {ext: tmp_path / f"report.{ext}" for ext in ("json", "md", "html")}
    result = run_loadscope(
        "doctor", str(model), "--budget", "15", "--quiet", "--details", "--stack", "safetensors",
        "--cmd", f"{PY} {script} {{model}}", "--json", str(out["json"]), "--md", str(out["md"]),
        "--html", str(out["html"]), "--flamegraph", str(tmp_path / "flame graph.svg"),
        timeout=180,
    )  # fmt: skip
    assert result.code in (0, 10), result.err
    assert "your command, cold, one run each" in result.out
    # --flamegraph: the profiled run's phases in the report, its SVG beside it.
    assert f"flame graph: {tmp_path / 'flame graph.svg'}" in result.err
    assert "<svg" in (tmp_path / "flame graph.svg").read_text()
    # Its runs are rows of the trial table too, beside the strategies.
    table = result.out.split("trials (median seconds):", 1)[1].split("x mmap: speed-up", 1)[0]
    assert "your command: as is, cold" in table
    assert "your command: loadscope warm first" in table
    assert f"html: {out['html']}" in result.out  # every written report's path is said
    doc = json.loads(out["json"].read_text())
    assert doc["user_command"]["phases"]["phases"], doc["user_command"]["phases"]
    base = _variant(doc["user_command"], "as-is")
    assert base["median_seconds"] > 0 and base["runs"][0]["exit_code"] == 0
    # The command as given; {model} stood for the model, whose files were the ones watched.
    assert doc["user_command"]["argv"][-1] == "{model}"
    assert all(f.startswith(str(model)) for f in doc["user_command"]["files"])
    for ext in ("md", "html"):
        text = out[ext].read_text()
        assert "your command" in text and str(script) in text, ext
    assert "| your command: as is, cold | cold |" in out["md"].read_text()
    # The HTML draws the model's residency over each run (the samples taken as it ran).
    assert "page cache while your command ran" in out["html"].read_text()
    from loadscope.report.schema import check

    check(doc, "doctor")


def test_doctor_cmd_usage_is_checked_before_any_work(model: Path) -> None:
    for args, words in (
        (("--cmd", ""), "--cmd is empty"),
        (("--cmd", "python 'unclosed"), "No closing quotation"),
        (("--cmd-until", "x"), "go with --cmd"),
        (("--flamegraph", "f.svg"), "go with --cmd"),
        (("--cmd", "true", "--flamegraph", "-"), "the flame graph is an SVG file"),
        (("--cmd", "true", "--cmd-ready", "localhost"), "http:// or https://"),
    ):
        result = run_loadscope("doctor", str(model), "--budget", "15", *args)
        assert result.code == 2 and words in result.err, (args, result.err)


def test_without_a_model_the_files_the_command_opened_are_found_and_evicted(
    model: Path, tmp_path: Path
) -> None:
    script = _script(
        tmp_path,
        "open.py",
        """
        import glob, sys
        from safetensors import safe_open
        import time
        # As a loader holds its files: open (mapped) while it builds the model.
        handles = [safe_open(f, "pt") for f in sorted(glob.glob(sys.argv[1] + "/*.safetensors"))]
        state = {k: h.get_tensor(k) for h in handles for k in h.keys()}
        time.sleep(0.5)
        """,
    )
    code, doc, err = _timed("--fixes", "none", "--rounds", "1", "--", PY, str(script), str(model))
    assert code == 0, err
    want = sorted(str(p) for p in model.glob("*.safetensors"))
    assert doc["discovered"] == want and doc["files"] == want
    assert all(_variant(doc, "as-is")["cold"])  # the next run evicted what was found


def test_sighup_stops_the_command_group(model: Path, tmp_path: Path) -> None:
    """The terminal closing (SIGHUP) stops the command's whole group, as SIGTERM does."""
    marker = f"loadscope-time-test-{os.getpid()}-hup"
    script = _script(tmp_path, "hup.py", "import time\ntime.sleep(120)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadscope", "time", "--model", str(model), "--fixes", "none",
         "--", PY, str(script), marker],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    import psutil

    def command_running() -> bool:
        for child in psutil.Process(proc.pid).children():
            try:
                if marker in " ".join(child.cmdline()):
                    return True
            except psutil.NoSuchProcess:  # a zombie or gone: another of its children
                continue
        return False

    try:
        deadline = time.monotonic() + 60
        # The command itself running (the marker is in loadscope's own argv too).
        while not command_running():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGHUP)
        _out, err = proc.communicate(timeout=30)
        left = _marker_alive(marker)  # read before the clean-up below
    finally:
        # A failed wait must not leave the run holding the mount's lock (every later
        # measuring test on this mount would wait behind it).
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        subprocess.run(["pkill", "-KILL", "-f", marker], check=False)
    assert proc.returncode == 143 and "terminated" in err and "Traceback" not in err, err
    assert not left


def test_a_stop_right_after_the_spawn_still_stops_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ctrl-C landing between the spawn and the watch left the command running (it is in
    its own session: the terminal's signal never reaches it)."""
    from loadscope.engine import usercmd

    marker = f"loadscope-time-test-{os.getpid()}-spawn"

    def interrupted(*_a: Any, **_k: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(usercmd, "_Output", interrupted)
    spec = usercmd.RunSpec((PY, "-c", "import time; time.sleep(60)", marker))
    with pytest.raises(KeyboardInterrupt):
        usercmd.run_once(spec)
    assert not _marker_alive(marker)


def test_output_to_a_full_disk_is_said_not_a_crash(model: Path) -> None:
    result = run_loadscope(
        "time", "--model", str(model), "--fixes", "none", "--rounds", "1", "--quiet",
        "--output", "/dev/full", "--", PY, "-c", "print('x' * 100000)",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "output could not all be written: No space left on device" in result.out


_PART = """
import glob, os, sys
files = sorted(glob.glob(sys.argv[1] + "/*.safetensors"))
for f in files:
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: what it asks for
    size = os.fstat(fd).st_size
    left = int(size * float(sys.argv[2]))
    at = 0
    while left > 0 and (chunk := os.pread(fd, min(left, 1 << 20), at)):
        at += len(chunk)
        left -= len(chunk)
    os.close(fd)
"""


@pytest.mark.parametrize(("share", "lazy"), [(0.0, True), (0.3, True), (1.0, False)])
def test_a_command_that_did_not_read_the_model_claims_no_gain(
    model: Path, tmp_path: Path, share: float, lazy: bool
) -> None:
    """``sleep 1`` (nothing read) and a command that reads 30% of the model say so above
    the table and print no fix's ratio (a lazy from_pretrained read 7 KiB and was given
    "warm first 0.40x"); one that reads all of it prints the table with its ratios. The
    saved JSON renders again with ``loadscope report`` as ``time`` printed it."""
    script = _script(tmp_path, "part.py", _PART)
    argv = ["sleep", "1"] if share == 0.0 else [PY, str(script), "{model}", str(share)]
    saved = tmp_path / "time result.json"
    result = run_loadscope(
        "time", "--model", str(model), "--fixes", "warm", "--rounds", "1", "--quiet",
        "--json", str(saved), "--", *argv, timeout=120,
    )  # fmt: skip
    assert result.code == 0, result.err
    text = result.out
    doc = json.loads(saved.read_text())
    assert doc["schema_version"] == 1 and doc["kind"] == "time"
    read = doc["variants"][0]["runs"][0]["resident_after"]
    rows = [line for line in text.splitlines() if line.startswith(("  as is", "  loadscope warm"))]
    if lazy:
        assert read < 0.5, read
        assert f"your command read {format_bytes(int(read * doc['total_bytes']))} of the" in text
        assert "No fix's gain is claimed" in " ".join(text.split())
        assert not any(re.search(r"\d\.\d\dx", row) for row in rows), rows
        assert all(v["speedup"] is None for v in doc["variants"])
        if share:
            assert 0.2 <= read <= 0.45, read
    else:
        assert read > 0.95 and "your command read" not in text
        assert re.search(r"loadscope warm first .* \d+\.\d\dx", text), text
    again = run_loadscope("report", str(saved), "--text")
    assert again.code == 0, again.err
    printed = text.split("\nfull result:")[0].rstrip()
    assert again.out.rstrip() == printed
