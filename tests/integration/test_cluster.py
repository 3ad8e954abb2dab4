"""Cluster mode for real: two torchrun launchers (two "nodes") on this machine."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: What each node is told of the fleet's stack (see :func:`_launch`).
ONE_STACK = ("--stack", "safetensors")


def _launch(node: int, port: int, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=1",
            f"--node-rank={node}",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            "-m",
            "loadscope",
            "cluster",
            "synthetic:16MiB",
            "--out",
            str(out),
            "--budget",
            "6",
            # A node killed with SIGKILL cannot remove its synthetic checkpoint: keep it
            # under the test's own directory, not the system temp dir.
            "--synth-dir",
            str(out.parent),
            # The fleet's stack: each node times its routes only (the nodes' reports, not
            # which stack's code wins, are these tests' subject).
            "--stack",
            "safetensors",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _node_process(launcher: subprocess.Popen[str], timeout: float = 60) -> psutil.Process:
    """The ``loadscope cluster`` process torchrun started under ``launcher``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in psutil.Process(launcher.pid).children(recursive=True):
            try:
                cmd = p.cmdline()
            except psutil.NoSuchProcess:
                continue
            if "cluster" in cmd and "loadscope" in cmd and "torch.distributed.run" not in cmd:
                return p
        time.sleep(0.1)
    raise AssertionError("torchrun never started the node's process")


def _wait_for_trials(node: psutil.Process, timeout: float = 90) -> None:
    """Until the node's fork server (started with its first trial) exists."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in node.children(recursive=True):
            try:
                if "loadscope.loaders.forkserver" in " ".join(p.cmdline()):
                    return
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.1)
    raise AssertionError("the node never started a trial")


def test_two_nodes_write_two_reports_and_the_fleet(tmp_path: Path) -> None:
    port, out = _free_port(), tmp_path / "fleet"
    nodes = [_launch(i, port, out) for i in (0, 1)]
    logs = [n.communicate(timeout=180)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], logs
    assert "node-1: report sent to rank 0" in logs[1]
    assert sorted(p.name for p in out.iterdir()) == [
        "fleet.html",
        "fleet.json",
        "fleet.md",
        "node-0.json",
        "node-1.json",
    ]
    for i in (0, 1):
        report = json.loads((out / f"node-{i}.json").read_text())
        assert report["schema_version"] == 1 and report["verdict"]["status"]
    summary = json.loads((out / "fleet.json").read_text())
    assert [n["status"] for n in summary["nodes"]] == ["ok", "ok"]
    assert "2 of 2 nodes reported" in (out / "fleet.md").read_text()


def test_a_killed_node_is_named_failed_and_the_other_still_reports(tmp_path: Path) -> None:
    port, out = _free_port(), tmp_path / "fleet"
    nodes = [_launch(i, port, out, "--heartbeat-timeout", "3") for i in (0, 1)]
    victim = _node_process(nodes[1])
    _wait_for_trials(victim)  # joined (it beats before it probes) and running trials
    victim.send_signal(signal.SIGKILL)
    log0 = nodes[0].communicate(timeout=180)[0]
    nodes[1].communicate(timeout=60)
    assert nodes[0].returncode != 0 and nodes[1].returncode != 0
    assert "node-1: failed: stopped answering" in log0
    summary = json.loads((out / "fleet.json").read_text())
    assert [n["status"] for n in summary["nodes"]] == ["ok", "failed"]
    assert (out / "node-0.json").exists() and not (out / "node-1.json").exists()
    md = (out / "fleet.md").read_text()
    assert "1 of 2 nodes reported" in md and "node-1: failed" in md


def _node(env: dict[str, str], out: Path, *args: str) -> subprocess.Popen[str]:
    """One node as srun or the Job controller starts it: `loadscope cluster` with their env."""
    import os

    torchrun = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE")
    base = {k: v for k, v in os.environ.items() if k not in torchrun and not k.startswith("SLURM")}
    return subprocess.Popen(
        [sys.executable, "-m", "loadscope", "cluster", *args, "--out", str(out), *ONE_STACK],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**base, **env},
    )


def test_two_nodes_under_slurm_need_no_other_setup(tmp_path: Path) -> None:
    """Issue 19: `srun --nodes=2 --ntasks-per-node=1 loadscope cluster TARGET --out DIR`:
    rank, world size and the master (the first node of the compressed node list) come
    from SLURM's environment."""
    port, out = _free_port(), tmp_path / "fleet"
    slurm = {"SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "localhost,127.0.0.1"}
    slurm["MASTER_PORT"] = str(port)
    args = ("synthetic:8MiB", "--budget", "4", "--synth-dir", str(tmp_path))
    nodes = [_node({**slurm, "SLURM_PROCID": str(i)}, out, *args) for i in (0, 1)]
    logs = [n.communicate(timeout=180)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], logs
    summary = json.loads((out / "fleet.json").read_text())
    assert [n["status"] for n in summary["nodes"]] == ["ok", "ok"]
    assert "2 of 2 nodes reported" in (out / "fleet.md").read_text()


def _slurm_env(rank: int, port: int) -> dict[str, str]:
    """What srun gives task ``rank`` of two (plus the port; the master is the list's first)."""
    nodes = "localhost,127.0.0.1"
    return {"SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": nodes, "SLURM_PROCID": str(rank)} | {
        "MASTER_PORT": str(port)
    }


def _k8s_env(rank: int, port: int) -> dict[str, str]:
    """What pod ``rank`` of `cluster --k8s 2`'s Indexed Job gets: the manifest's fixed
    env, its completion index as RANK, pod 0 (here 127.0.0.1) as the master."""
    command = ["cluster", "--k8s", "2", "synthetic:8MiB", "--image", "registry.example/train:1"]
    r = subprocess.run(
        [sys.executable, "-m", "loadscope", *command],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    job = next(d for d in _yaml_docs(r.stdout) if d["kind"] == "Job")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    fixed = {e["name"]: e["value"] for e in env if "value" in e}
    assert fixed["WORLD_SIZE"] == "2", fixed
    fixed.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return fixed | {"RANK": str(rank), "JOB_COMPLETION_INDEX": str(rank)}


def _yaml_docs(text: str) -> list[dict[str, object]]:
    import pytest

    yaml = pytest.importorskip("yaml")
    return list(yaml.safe_load_all(text))


@pytest.mark.parametrize("launcher", ["slurm", "k8s"])
def test_a_killed_node_under_slurm_or_k8s_is_named_failed(tmp_path: Path, launcher: str) -> None:
    """Issue 19: the same rendezvous under srun's and the Job's environment names a node
    killed mid-trials as failed, and the other node still reports."""
    port, out = _free_port(), tmp_path / "fleet"
    envs = _slurm_env if launcher == "slurm" else _k8s_env
    args = ("synthetic:16MiB", "--budget", "6", "--synth-dir", str(tmp_path))
    args += ("--heartbeat-timeout", "3")
    nodes = [_node(envs(i, port), out, *args) for i in (0, 1)]
    victim = psutil.Process(nodes[1].pid)
    _wait_for_trials(victim)  # joined (it beats before it probes) and running trials
    victim.send_signal(signal.SIGKILL)
    log0 = nodes[0].communicate(timeout=180)[0]
    nodes[1].communicate(timeout=60)
    assert nodes[0].returncode != 0 and nodes[1].returncode != 0, log0
    assert "node-1: failed: stopped answering" in log0
    summary = json.loads((out / "fleet.json").read_text())
    assert [n["status"] for n in summary["nodes"]] == ["ok", "failed"]
    assert (out / "node-0.json").exists() and not (out / "node-1.json").exists()
    assert "1 of 2 nodes reported" in (out / "fleet.md").read_text()


def test_the_k8s_manifest_is_valid_and_its_env_onboards_two_nodes(tmp_path: Path) -> None:
    """`cluster --k8s N` prints an Indexed Job and a headless Service the Kubernetes API's
    models accept as they are; two processes given the env a pod of it gets (its index
    as RANK, pod 0 as the master: here 127.0.0.1) write a fleet report with both."""
    import pytest

    yaml = pytest.importorskip("yaml")
    client = pytest.importorskip("kubernetes.client")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadscope",
            "cluster",
            "--k8s",
            "2",
            "synthetic:8MiB",
            "--image",
            "registry.example/train:1",
            "--budget",
            "4",
            "--out-pvc",
            "fleet",
            "--synth-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    service, job = list(yaml.safe_load_all(r.stdout))
    api = client.ApiClient()

    for obj, kind in ((service, "V1Service"), (job, "V1Job")):
        model = api.deserialize(json.dumps(obj), kind, "application/json")
        # Nothing dropped or misspelled: the model serializes back to the same object.
        assert api.sanitize_for_serialization(model) == obj, kind
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 2
    pod = spec["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    container = pod["containers"][0]
    env = container["env"]
    assert env[0]["valueFrom"]["fieldRef"]["fieldPath"].endswith("job-completion-index']")
    # Run the container's command with the env each pod gets (DNS is 127.0.0.1 here).
    port, out = _free_port(), tmp_path / "fleet"
    fixed = {e["name"]: e["value"] for e in env if "value" in e}
    fixed.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    args = [a for a in container["args"][1:] if a != "--out"]
    args = [a for a in args if a != "/loadscope-fleet"]
    nodes = [
        _node({**fixed, "RANK": str(i), "JOB_COMPLETION_INDEX": str(i)}, out, *args) for i in (0, 1)
    ]
    logs = [n.communicate(timeout=180)[0] for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], logs
    summary = json.loads((out / "fleet.json").read_text())
    assert [n["status"] for n in summary["nodes"]] == ["ok", "ok"]


def test_an_unwritable_out_stops_every_node_before_any_work(tmp_path: Path) -> None:
    """Issue 22: with --out unwritable the whole fleet ran, then rank 0 crashed and every
    report was lost. Now rank 0 refuses at once and tells the other nodes, which stop
    before their diagnosis (no fork server, no trial) instead of working for nothing."""
    port = _free_port()
    (tmp_path / "afile").write_text("not a folder")
    out = tmp_path / "afile" / "out"
    args = ("synthetic:8MiB", "--budget", "4", "--synth-dir", str(tmp_path))
    start = time.monotonic()
    nodes = [_node(_slurm_env(i, port), out, *args) for i in (0, 1)]
    logs = [n.communicate(timeout=90)[0] for n in nodes]
    took = time.monotonic() - start
    assert nodes[0].returncode != 0 and nodes[1].returncode != 0, logs
    assert f"--out {out}: cannot write the fleet report there" in logs[0], logs[0]
    assert "rank 0 stopped the fleet before any work: --out" in logs[1], logs[1]
    assert "Traceback" not in logs[0] + logs[1]
    assert took < 45, took  # not the 120 s join timeout, nor a whole diagnosis
    assert not any(p.name.startswith("node-") for p in tmp_path.rglob("*.json"))


def test_a_node_whose_storage_stalls_is_a_failed_node(tmp_path: Path) -> None:
    """Issue 22: a node whose storage stopped answering was counted as reported ("2 of 2
    nodes reported, no outliers, no failures", exit 0). Node 1's model sits on an emulated
    disk that stops answering after 1 MiB; the fleet counts it failed, with the reason."""
    from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
    from loadscope.tools.synth import synthesize

    if (why := fuse_unavailable_reason()) is not None:
        pytest.skip(f"emulated disk unavailable: {why}")
    src = synthesize(tmp_path / "src", 12 << 20, seed=31, shards=2).root
    settings = EmulatorSettings(
        latency_s=0.0005, jitter_s=0.0, readahead_kb=128, stall_after_bytes=1 << 20
    )
    port, out = _free_port(), tmp_path / "fleet"
    with emulated_disk(src, tmp_path / "mnt", settings) as disk:
        stall = {"LOADSCOPE_STALL_TIMEOUT": "2"}
        nodes = [
            _node(_slurm_env(0, port), out, str(src), "--budget", "6"),
            _node(_slurm_env(1, port) | stall, out, str(disk.path), "--budget", "6"),
        ]
        log0 = nodes[0].communicate(timeout=180)[0]
    log1 = nodes[1].communicate(timeout=60)[0]
    assert nodes[0].returncode != 0, log0  # a failed node fails the fleet's command
    summary = json.loads((out / "fleet.json").read_text())
    assert [n["status"] for n in summary["nodes"]] == ["ok", "failed"], (log0, log1)
    assert "stopped answering" in (summary["nodes"][1]["reason"] or ""), summary
    assert "1 of 2 nodes reported" in (out / "fleet.md").read_text()


def _watch_until(
    proc: subprocess.Popen[str], needle: str, timeout: float = 90
) -> tuple[list[str], threading.Thread]:
    """Read ``proc``'s output on a thread until a line holds ``needle``: the lines so far
    (the list keeps filling) and the reader, to join once the process ended."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(needle in x for x in lines):
        time.sleep(0.01)
    assert any(needle in x for x in lines), lines
    return lines, reader


def test_a_node_whose_rank_0_dies_never_says_sent(tmp_path: Path) -> None:
    """Issue 22: a node printed "report sent to rank 0" and exited 0 after the store was
    gone. Rank 0 (the rendezvous host under srun) is killed once node 1 has posted its
    report: node 1 says the report may be lost and fails."""
    port, out = _free_port(), tmp_path / "fleet"
    common = ("synthetic:8MiB", "--synth-dir", str(tmp_path), "--no-progress")
    nodes = [
        _node(_slurm_env(0, port), out, *common, "--budget", "30"),
        _node(_slurm_env(1, port), out, *common, "--budget", "3"),
    ]
    lines, reader = _watch_until(nodes[1], "waiting for rank 0")
    nodes[0].kill()
    nodes[0].wait(timeout=30)
    nodes[1].wait(timeout=60)
    reader.join(5)
    log1 = "".join(lines)
    assert nodes[1].returncode != 0, log1
    assert "report sent to rank 0" not in log1
    assert "rank 0 did not confirm it received this node's report" in log1, log1
    assert "it may be lost" in log1


def test_a_node_killed_as_it_joins_is_reported_within_the_heartbeat_timeout(
    tmp_path: Path,
) -> None:
    """Issue 22: a node stopped before its first heartbeat was reported only after the
    120 s join timeout. Killed at its first step (it has joined the store), with the join
    timeout left at its default: rank 0 names it failed once its own diagnosis is done."""
    port, out = _free_port(), tmp_path / "fleet"
    args = ("synthetic:8MiB", "--budget", "4", "--synth-dir", str(tmp_path), "--no-progress")
    args += ("--heartbeat-timeout", "3")
    start = time.monotonic()
    nodes = [_node(_slurm_env(i, port), out, *args) for i in (0, 1)]
    _watch_until(nodes[1], "node-1: system")
    nodes[1].kill()
    log0 = nodes[0].communicate(timeout=90)[0]
    took = time.monotonic() - start
    assert "node-1: failed: stopped answering" in log0, log0
    assert took < 60, took  # its budget and the heartbeat timeout, not the join timeout
    summary = json.loads((out / "fleet.json").read_text())
    assert [n["status"] for n in summary["nodes"]] == ["ok", "failed"]
