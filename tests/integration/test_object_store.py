"""Models in an object store (issue 51): ``s3://`` on the test bed, an S3-compatible store
on 127.0.0.1 (``loadscope/tools/objstore.py``) that waits before each first byte and caps
each connection's bandwidth and the total, with a request log.

The bed is checked first (what it serves, its caps, a key it does not know); then the
probe's figures against its settings, the strategies' tensors against safetensors on the
same files, ``loadscope doctor s3://...`` as a user runs it (its credentials never in
any output or report), and every bad input as one line."""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadscope.advice.objstore_rules import load_model_code
from loadscope.diagnosis.doctor_report import load_report
from loadscope.loaders.strategies import STRATEGIES
from loadscope.loaders.strategy import FileRequest, LoadContext
from loadscope.probes import objclient
from loadscope.probes.sources import SourceError
from loadscope.tools.objstore import ObjectStore, StoreSettings
from loadscope.tools.synth import synthesize
from tests.conftest import run_here

pytest.importorskip("obstore", reason="obstore is not installed (pip install -e '.[dev]')")

FIRST_BYTE_S = 0.02
PER_CONNECTION = 50e6
TOTAL = 400e6
KEY_ID = "loadscope-test-key"
#: The secret no output, report or log may hold.
SECRET = "Sup3r-s3cret-value-for-the-bed"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ObjectStore, Path]]:
    """The store serving bucket ``models`` with a sharded model under ``llm/``."""
    root = tmp_path_factory.mktemp("store root")
    synthesize(root / "models" / "llm", 64 << 20, seed=5, shards=2)
    settings = StoreSettings(FIRST_BYTE_S, PER_CONNECTION, TOTAL, access_key=KEY_ID)
    with ObjectStore(root, settings) as store:
        yield store, root / "models" / "llm"


def _has_runai() -> bool:
    import importlib.util

    return importlib.util.find_spec("runai_model_streamer_s3") is not None


def _env(store: ObjectStore, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LOADSCOPE_"))}
    env.update(
        AWS_ENDPOINT_URL=store.url,
        AWS_ACCESS_KEY_ID=KEY_ID,
        AWS_SECRET_ACCESS_KEY=SECRET,
        AWS_EC2_METADATA_DISABLED="true",
    )
    env.update(extra)
    return {k: v for k, v in env.items() if v}


def _loadscope(*args: str, env: dict[str, str], timeout: float = 240) -> Any:
    return run_here([sys.executable, "-m", "loadscope", *args], env=env, timeout=timeout)


@pytest.fixture
def in_env(bed: tuple[ObjectStore, Path], monkeypatch: pytest.MonkeyPatch) -> ObjectStore:
    """This process's environment pointed at the bed (its stores built afresh)."""
    store = bed[0]
    for name, value in _env(store).items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    objclient.store.cache_clear()
    yield store
    objclient.store.cache_clear()


def test_the_bed_serves_what_s3_clients_read_and_refuses_a_key_it_does_not_know(
    bed: tuple[ObjectStore, Path], in_env: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import obstore

    _store, folder = bed
    names = [o.name for o in objclient.listing("s3://models/llm")]
    assert names == sorted(p.name for p in folder.glob("*.safetensors"))
    st, key = objclient.object_key(f"s3://models/llm/{names[0]}")
    data = (folder / names[0]).read_bytes()
    assert bytes(obstore.get_range(st, key, start=100, length=5000)) == data[100:5100]
    assert bytes(obstore.get(st, key).bytes()) == data
    assert int(obstore.head(st, key)["size"]) == len(data)
    # The one object by its own address; the index's shards in its order.
    assert [o.name for o in objclient.listing(f"s3://models/llm/{names[1]}")] == [names[1]]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "another-key")
    objclient.store.cache_clear()
    with pytest.raises(SourceError, match="access denied"):
        objclient.listing("s3://models/llm")


def test_the_bed_keeps_to_its_caps(bed: tuple[ObjectStore, Path], in_env: ObjectStore) -> None:
    """One connection is held to its cap, and its first byte waits as set: what the
    probe's figures are checked against (the bed is not what bounds them)."""
    import obstore

    store, folder = bed
    name = next(folder.glob("*.safetensors")).name
    st, key = objclient.object_key(f"s3://models/llm/{name}")
    started = time.perf_counter()
    obstore.get_range(st, key, start=0, length=1)
    first = time.perf_counter() - started
    started = time.perf_counter()
    got = len(obstore.get_range(st, key, start=0, length=8 << 20))
    rate = got / (time.perf_counter() - started - FIRST_BYTE_S)
    assert FIRST_BYTE_S <= first < FIRST_BYTE_S + 0.5, first
    assert rate <= 1.15 * PER_CONNECTION, rate
    # The store logs a GET once its body is sent, which may be just after the client
    # has it all.
    for _ in range(100):
        if any(g["end"] == 8 << 20 for g in store.gets()):
            break
        time.sleep(0.02)
    got_it = [g for g in store.gets() if g["start"] == 0 and g["end"] == 8 << 20]
    assert got_it and got_it[-1]["status"] == 206 and got_it[-1]["bytes"] == 8 << 20


def test_each_strategy_loads_the_tensors_safetensors_reads_from_the_files(
    bed: tuple[ObjectStore, Path], in_env: ObjectStore
) -> None:
    from safetensors.torch import load_file

    _store, folder = bed
    requests = [
        FileRequest(f"s3://models/llm/{p.name}", p.stat().st_size, "safetensors")
        for p in sorted(folder.glob("*.safetensors"))
    ]
    want = {}
    for p in sorted(folder.glob("*.safetensors")):
        want.update(load_file(p))
    for name in ("store-ranged", "store-get"):
        got = dict(STRATEGIES[name].load(requests, LoadContext()))
        assert got.keys() == want.keys(), name
        assert all(got[k].dtype == want[k].dtype and got[k].equal(want[k]) for k in want), name
    # A sample: only the tensors asked for, from ranged GETs of their spans alone.
    first = next(iter(want))
    sample = [FileRequest(requests[0].path, requests[0].size_bytes, "safetensors", (first,))]
    got = dict(STRATEGIES["store-ranged"].load(sample, LoadContext()))
    assert list(got) == [first] and got[first].equal(want[first])


@pytest.fixture(scope="module")
def doctored(bed: tuple[ObjectStore, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    store, _folder = bed
    out = tmp_path_factory.mktemp("doctor out") / "doctor.json"
    # The local disk the copy trial and the printed copy command write to: the test's own.
    local = out.parent / "local disk"
    local.mkdir()
    env = _env(store, XDG_STATE_HOME=str(out.parent / "state"), LOADSCOPE_LOCAL_DIRS=str(local))
    done = _loadscope("doctor", "s3://models/llm", "--budget", "16", "--json", str(out), env=env)
    assert done.returncode in (0, 10), done.stderr[-3000:]  # 10: a problem found
    return out, done


def test_the_doctor_probes_the_store_and_times_its_strategies(doctored: Any) -> None:
    out, done = doctored
    doc = load_report(str(out))  # schema-valid, or this raises
    target = doc["probe"]["target"]
    assert target["source_kind"] == "s3" and target["source_title"] == "an S3 bucket"
    block = doc["probe"]["object_store"]
    assert block["status"] == "ok" and block["objects"] == 2
    # The probe's figures against the bed's settings (loose here: the suite loads this
    # machine; benchmarks/RESULTS.md holds the 15% check on a quiet one).
    assert FIRST_BYTE_S <= block["first_byte_p50_s"] < 4 * FIRST_BYTE_S
    assert 0.3 * PER_CONNECTION < block["per_connection"][-1]["bytes_per_s"] < 1.15 * PER_CONNECTION
    assert block["ceiling_bytes_per_s"] < 1.15 * TOTAL
    assert block["bound"] in ("link", "per-connection bandwidth", "request latency")
    ran = {t["strategy"] for t in doc["bench"]["trials"] if t["status"] == "ok"}
    runai = {"runai-store", "runai-store-tuned"} if _has_runai() else set()
    assert ran == {"store-ranged", "store-get", *runai}
    assert "the object store" in done.stdout or "an S3 bucket" in done.stdout


def test_the_copy_to_a_local_disk_is_measured_and_its_command_runs_as_printed(
    bed: tuple[ObjectStore, Path], doctored: Any
) -> None:
    """The download-then-load route: the doctor copies the model to the local disk with
    ``loadscope copy``'s code and loads it cold there; the fix carries that per-start
    ratio and what the copy costs, and its command, run as printed, copies the model."""
    store, folder = bed
    out, _done = doctored
    doc = load_report(str(out))
    local = out.parent / "local disk"
    assert not [p for p in local.iterdir() if p.name.startswith("loadscope-store-copy-")]
    rec = next((r for r in doc["recommendations"] if r["id"] == "copy-to-local-disk"), None)
    if rec is None:  # measured under 1.2x per start, or not run: said, with no number
        said = doc["notes"] + doc["failures"]
        assert any(
            x.startswith(("copy to a local disk: measured", "copy trial: not run")) for x in said
        ), said
        return
    assert rec["measured"] and rec["expected_speedup"] >= 1.2
    assert "fetched and verified in" in rec["action"] and "repaid after" in rec["action"]
    assert rec["apply"] == {
        "kind": "copy",
        "source": "s3://models/llm",
        "dest": rec["apply"]["dest"],
    }
    dest = Path(rec["apply"]["dest"])
    assert dest.parent.parent == local
    shell = next(s for s in rec["snippets"] if s["stack"] == "shell")
    assert shell["speedup"] == rec["expected_speedup"] and "aws s3 cp" in shell["code"]
    command = shell["code"].split("   #")[0]
    assert command == f"loadscope copy s3://models/llm {shlex.quote(str(dest))}"
    ran = run_here(
        ["bash", "-c", command], env=_env(store, PATH=_path_with_loadscope()), timeout=120
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    for shard in folder.glob("*.safetensors"):
        assert (dest / shard.name).read_bytes() == shard.read_bytes()


def _path_with_loadscope() -> str:
    """PATH with this interpreter's folder first: the ``loadscope`` the printed line runs."""
    return f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def test_no_secret_in_any_output_report_or_log(doctored: Any) -> None:
    out, done = doctored
    texts = [done.stdout, done.stderr]
    for path in out.parent.rglob("*"):
        if path.is_file():
            texts.append(path.read_text(errors="replace"))
    assert len(texts) > 2
    assert not [t[:200] for t in texts if SECRET in t]


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("address", "env_change", "said"),
    [
        ("s3://no-such-bucket/llm", {}, "no such bucket"),
        ("s3://models/nothing-here", {}, "no .safetensors objects there"),
        ("s3://models/llm", {"AWS_ACCESS_KEY_ID": "not-the-key"}, "access denied"),
        ("s3://models/llm", {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}, "credentials"),
        ("s3://models/llm", {"AWS_ENDPOINT_URL": "dead"}, "does not answer"),
        ("s3://", {}, "no bucket named"),
    ],
    ids=["no-bucket", "no-safetensors", "denied", "no-credentials", "no-answer", "no-bucket-named"],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    bed: tuple[ObjectStore, Path], address: str, env_change: dict[str, str], said: str
) -> None:
    store, _folder = bed
    if env_change.get("AWS_ENDPOINT_URL") == "dead":
        env_change = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{_dead_port()}"}
    env = _env(store)
    env.update(env_change)
    env = {k: v for k, v in env.items() if v}
    started = time.monotonic()
    done = _loadscope("doctor", address, "--budget", "5", env=env, timeout=60)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and SECRET not in done.stderr + done.stdout
    assert time.monotonic() - started < 30


def test_the_commands_that_read_files_refuse_a_bucket_in_one_line(
    bed: tuple[ObjectStore, Path],
) -> None:
    done = _loadscope("warm", "s3://models/llm", env=_env(bed[0]), timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "loadscope: s3://models/llm: loadscope warm reads files, and this model is in an S3"
        " bucket (loadscope doctor, probe and bench measure it there)"
    ]


def test_the_store_log_holds_every_get(bed: tuple[ObjectStore, Path]) -> None:
    store, _folder = bed
    gets = store.gets()
    assert gets and all(g["bytes"] == g["end"] - g["start"] for g in gets)
    assert json.dumps(gets[0])  # a plain record, as the log file's lines are


def _most_at_once(gets: list[dict[str, Any]]) -> int:
    """The most GETs the store was serving at one moment (from its log's times)."""
    edges = sorted([(g["t0"], 1) for g in gets] + [(g["t1"], -1) for g in gets])
    most = now = 0
    for _t, step in edges:
        now += step
        most = max(most, now)
    return most


def test_loadscopes_setting_is_what_the_store_sees(
    bed: tuple[ObjectStore, Path], tmp_path: Path
) -> None:
    """The GETs in flight ``store-ranged`` (``loadscope.load_model``) is timed at are the
    ones the store served at once (its request log): not more, and not far fewer."""
    store, _folder = bed
    before = len(store.requests)
    env = _env(store, XDG_STATE_HOME=str(tmp_path))
    done = _loadscope(
        "bench", "s3://models/llm", "--strategies", "store-ranged",
        "--knob", "store-ranged.concurrency=4", "--repeats", "1", "--quiet", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    gets = [r for r in store.requests[before:] if r["op"] == "get" and r["bytes"] > 1 << 16]
    assert 2 < _most_at_once(gets) <= 4, _most_at_once(gets)


def test_runai_runs_with_the_settings_its_route_prints(
    bed: tuple[ObjectStore, Path], tmp_path: Path
) -> None:
    """Run:ai's trial at a concurrency runs with the variables its flag sets (and a
    compatible endpoint's); its GETs reach the store. (Its concurrency is no cap on the
    GETs in flight: 14 to 18 at 4 to 10 here, so the log cannot check it as it does
    loadscope's own.)"""
    if not _has_runai():
        pytest.skip("runai-model-streamer[s3] is not installed")
    store, _folder = bed
    before = len(store.requests)
    out = tmp_path / "bench.json"
    env = _env(store, XDG_STATE_HOME=str(tmp_path))
    done = _loadscope(
        "bench", "s3://models/llm", "--strategies", "runai-store-tuned",
        "--knob", "runai-store-tuned.concurrency=10", "--repeats", "1", "--quiet",
        "--json", str(out), env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    trial = next(t for t in json.loads(out.read_text())["trials"] if t["status"] == "ok")
    # (AWS_EC2_METADATA_DISABLED is the user's own here: not set again.)
    assert trial["detail"]["env"] == {
        "RUNAI_STREAMER_CONCURRENCY": "10",
        "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
    }
    assert sum(r["bytes"] for r in store.requests[before:] if r["op"] == "get") >= 64 << 20


def test_the_printed_code_runs_as_printed_and_loads_the_files_tensors(
    bed: tuple[ObjectStore, Path], doctored: Any, tmp_path: Path
) -> None:
    """The snippet under the fix, run as a user runs it (a fresh interpreter, their
    environment), returns the tensors safetensors reads from the same files."""
    from safetensors.torch import load_file

    store, folder = bed
    out, _done = doctored
    doc = load_report(str(out))
    code = load_model_code("s3://models/llm")
    snippets = [
        s for r in doc["recommendations"] for s in r["snippets"]
        if s["stack"] == "safetensors"
    ]  # fmt: skip
    # Printed where it measured faster than Run:ai at its defaults (at least 1.2x): then
    # with that trial's number, and this code.
    for snippet in snippets:
        assert snippet["strategy"] == "store-ranged" and snippet["speedup"] >= 1.2
        assert snippet["code"] == code
    script = tmp_path / "load.py"
    script.write_text(code + "\nimport torch\ntorch.save(state, __import__('sys').argv[1])\n")
    saved = tmp_path / "state.pt"
    done = run_here([sys.executable, str(script), str(saved)], env=_env(store), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    import torch

    got = torch.load(saved, weights_only=True)
    want: dict[str, Any] = {}
    for p in sorted(folder.glob("*.safetensors")):
        want.update(load_file(p))
    assert got.keys() == want.keys()
    assert all(got[k].equal(want[k]) for k in want)


def test_emulate_object_store_serves_a_folder_until_sigterm(
    bed: tuple[ObjectStore, Path], tmp_path: Path
) -> None:
    """``loadscope emulate --object-store SRC``: what to export and run, a store that
    serves the bed's folder, gone on SIGTERM with exit 0."""
    import signal
    import subprocess

    root = bed[1].parent.parent
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadscope", "emulate", "--object-store", str(root),
         "--first-byte", "5ms", "--log-requests", str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        head = proc.stdout.readline()
        assert "as an S3-compatible store at http://127.0.0.1:" in head, head
        url = head.split(" at ", 1)[1].split(" ", 1)[0]
        assert proc.stdout.readline().strip().startswith(f"export AWS_ENDPOINT_URL={url}")
        env = {**_env(bed[0]), "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "emulated"}
        done = _loadscope("probe", "s3://models/llm", env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "first byte" in done.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert any(json.loads(line)["op"] == "get" for line in log.read_text().splitlines())


def test_copy_from_a_bucket_is_verified_and_resumable(
    bed: tuple[ObjectStore, Path], tmp_path: Path
) -> None:
    """``loadscope copy s3://... DEST``: the same bytes as the bucket's objects, the small
    files beside them; a rerun keeps what is verified, a damaged copy is refused, and
    ``--force`` replaces it."""
    store, folder = bed
    dest = tmp_path / "local copy"
    env = _env(store)
    done = _loadscope("copy", "s3://models/llm", str(dest), "--quiet", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("copied 4 object(s)"), done.stdout
    for name in ("config.json", "model.safetensors.index.json"):
        assert (dest / name).read_bytes() == (folder / name).read_bytes()
    for shard in folder.glob("*.safetensors"):
        assert (dest / shard.name).read_bytes() == shard.read_bytes()
    assert not list(dest.glob("*.loadscope-partial"))
    again = _loadscope("copy", "s3://models/llm", str(dest), "--quiet", env=env)
    assert again.returncode == 0 and "0 object(s)" in again.stdout and "4 already" in again.stdout
    # A copy damaged since (same size): not taken for the store's; refused, then replaced.
    shard = sorted(dest.glob("*.safetensors"))[0]
    with open(shard, "r+b") as fh:
        fh.seek(1000)
        fh.write(b"\xff" * 16)
    refused = _loadscope("copy", "s3://models/llm", str(dest), "--quiet", env=env)
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
    assert "refusing to overwrite" in refused.stderr
    forced = _loadscope("copy", "s3://models/llm", str(dest), "--force", "--quiet", env=env)
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert shard.read_bytes() == (folder / shard.name).read_bytes()


def test_the_apps_copy_fix_on_a_bucket_runs_loadscope_copys_code(
    bed: tuple[ObjectStore, Path], in_env: ObjectStore, tmp_path: Path
) -> None:
    """The app applies the copy fix of a bucket's model (its ``apply``: the address and a
    folder) in its engine child: the same verified copy ``loadscope copy s3://...`` makes
    (it ran the file copier on the address, which reads no bucket)."""
    from loadscope.diagnosis.engine_process import EngineProcess, copy_job

    _store, folder = bed
    dest = tmp_path / "copy"
    events = list(EngineProcess(copy_job("s3://models/llm", str(dest))).events())
    assert events[-1]["event"] == "finished", events[-1]
    assert events[-1]["report"]["apply"]["kind"] == "copy"
    for shard in folder.glob("*.safetensors"):
        assert (dest / shard.name).read_bytes() == shard.read_bytes()


def test_a_bucket_is_taken_for_the_mounts_model_only_when_its_weights_match(
    bed: tuple[ObjectStore, Path], in_env: ObjectStore, tmp_path: Path
) -> None:
    """``doctor MNT/model --bucket s3://...`` times the bucket against the mount only when
    it holds the same weight files (name and size); otherwise one line says which."""
    from loadscope.diagnosis.bucket_trial import same_model
    from loadscope.model.targets import resolve

    _store, folder = bed
    bucket = resolve("s3://models/llm")
    assert same_model(resolve(str(folder)), bucket) is None
    other = synthesize(tmp_path / "other", 32 << 20, seed=5, shards=2).root
    why = same_model(resolve(str(other)), bucket)
    assert why is not None and "differs from the one here" in why, why
    single = synthesize(tmp_path / "single", 1 << 20, seed=5).root
    assert same_model(resolve(str(single)), bucket) == "it has no model.safetensors"


@pytest.mark.parametrize("value", ["http://models/llm", "s3://", "models/llm"])
def test_bucket_refuses_what_is_not_a_buckets_address(value: str) -> None:
    done = _loadscope("doctor", "synthetic:1MiB", "--bucket", value, env=dict(os.environ))
    assert done.returncode == 2
    assert "is not a bucket's address" in done.stderr and "Traceback" not in done.stderr


def test_the_doctor_says_how_many_times_a_node_of_ranks_fetches_the_model(
    bed: tuple[ObjectStore, Path], tmp_path: Path
) -> None:
    """``doctor s3://... --ranks 2``: the round runs in the budget's share kept for it,
    and the report says, per route, how many times the node fetched the model."""
    store, _folder = bed
    out = tmp_path / "doctor.json"
    env = _env(store, XDG_STATE_HOME=str(tmp_path / "state"), LOADSCOPE_LOCAL_DIRS=str(tmp_path))
    started = time.monotonic()
    done = _loadscope(
        "doctor", "s3://models/llm", "--ranks", "2", "--budget", "24", "--stack", "safetensors",
        "--json", str(out), env=env,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode in (0, 10), done.stderr[-3000:]
    doc = load_report(str(out))
    counted = {t["mode"]: t["storage_amplification"] for t in doc["ranks"]["trials"]}
    assert counted == {"independent": 2.0, "broadcast-async": 1.0, "sharded": 1.0}, counted
    note = next(n for n in doc["notes"] if n.startswith("with 2 ranks on this node"))
    assert "2.00x with every rank fetching it" in note and "1.00x with rank 0 fetching" in note
    assert took < 24 * 1.5, took
    assert SECRET not in out.read_text() + done.stdout + done.stderr


def test_ranks_on_a_bucket_fetch_the_model_once_each_or_once_for_the_node(
    bed: tuple[ObjectStore, Path], in_env: ObjectStore
) -> None:
    """``loadscope bench s3://... --ranks 2`` (the store's modes by default, cold only): every
    rank fetching the model (what Run:ai's streamer and ``load_model`` do in each rank)
    fetches it once per rank; rank 0 fetching and broadcasting, or each object's owner,
    once for the node. The ranks' own count is what the store's request log served, and
    every rank's tensors agree. A mode that reads files is refused on a bucket."""
    from loadscope.engine.broadcast import BroadcastError, BroadcastOptions, run_broadcast
    from loadscope.model.targets import resolve

    store, _folder = bed
    # The GETs this run made: begun after it started (an earlier test's GET cut off
    # mid-body is logged when its connection ends, maybe during this run).
    started = time.monotonic()
    done = _loadscope(
        "bench", "s3://models/llm", "--ranks", "2", "--repeats", "1", "--no-warmup",
        "--json", "-", env=_env(store),
    )  # fmt: skip
    served = sum(g["bytes"] for g in store.gets() if g["t0"] >= started)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    ran = {(t["mode"], t["cache"]): t["storage_amplification"] for t in doc["trials"]}
    assert ran == {
        ("independent", "cold"): 2.0,
        ("broadcast", "cold"): 1.0,
        ("broadcast-async", "cold"): 1.0,
        ("sharded", "cold"): 1.0,
    }, ran
    assert all(t["verified"] and t["storage_counter"] == "object store" for t in doc["trials"])
    # The store served what the ranks counted (2 + 1 + 1 + 1 models), and more only by a
    # GET the client retried after a reset (its first try's bytes logged too): under 1%.
    model = doc["model_bytes"]
    assert 5 * model <= served <= 5.05 * model, (served, model)
    with pytest.raises(BroadcastError, match="reads files"):
        target = resolve("s3://models/llm")
        run_broadcast(target, BroadcastOptions(ranks=2, modes=("mmap",), cache=("cold",)))
