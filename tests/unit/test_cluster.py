"""Cluster mode's logic without a cluster: the wait for each node, and the fleet report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadscope.base.errors import LoadscopeError
from loadscope.diagnosis.cluster import (
    PREFIX,
    ClusterEnv,
    ClusterError,
    NodeResult,
    collect,
    torchrun_lines,
    write_fleet,
)


class FakeStore:
    """The part of c10d's TCPStore that ``collect`` uses, over a dict."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def check(self, keys: list[str]) -> bool:
        return all(k in self.data for k in keys)

    def get(self, key: str) -> bytes:
        return self.data[key]

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def add(self, key: str, n: int) -> int:
        value = int(self.data.get(key, b"0")) + n
        self.data[key] = str(value).encode()
        return value

    def wait(self, keys: list[str], timeout: object) -> None:
        if not self.check(keys):
            raise RuntimeError("Socket Timeout\nException raised from recvBytes")


class FakeClock:
    def __init__(self, store: FakeStore, script: dict[float, list[tuple[str, Any]]]) -> None:
        self.t = 0.0
        self.store, self.script = store, script

    def __call__(self) -> float:
        self.t += 1.0  # one second per poll
        for at in [a for a in self.script if a <= self.t]:
            for op, arg in self.script.pop(at):
                getattr(self.store, op)(*arg)
        return self.t


def _doc(p50_us: float, rate: float) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "tool": {"name": "loadscope", "version": "0.0.0"},
        "created": "2026-12-03T12:00:00+00:00",
        "host": {"hostname": "same-vm"},
        "target": {"spec": "/models/m", "files": 1, "total_bytes": 1 << 30},
        "verdict": {"status": "healthy", "headline": "nothing is wrong here"},
        "recommendations": [],
        "probe": {
            "latency": {"p50_us": p50_us},
            "files": [{"mount": {"storage_class": "network"}}],
        },
        "bench": {
            "summary": [
                {
                    "strategy": "mmap",
                    "cache": "cold",
                    "median_seconds": 1e9 / rate,
                    "median_bytes_per_s": rate,
                    "x_vs_mmap": 1.0,
                }
            ]
        },
    }


def _ok(rank: int, p50_us: float = 500.0, rate: float = 1e9) -> str:
    return NodeResult(rank, "same-vm", "ok", report=_doc(p50_us, rate)).to_json()


def test_collect_waits_for_every_node_and_names_the_silent_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("loadscope.diagnosis.cluster.time.sleep", lambda _s: None)
    store = FakeStore()
    store.set(f"{PREFIX}/result/0", _ok(0))
    store.add(f"{PREFIX}/beat/1", 1)  # node 1 joins, beats twice, then dies
    store.add(f"{PREFIX}/beat/2", 1)  # node 2 beats until it reports at t=20
    beat1, beat2 = f"{PREFIX}/beat/1", f"{PREFIX}/beat/2"
    script: dict[float, list[tuple[str, Any]]] = {
        2.0: [("add", (beat1, 1)), ("add", (beat2, 1))],
        3.0: [("add", (beat1, 1))],
        **{float(t): [("add", (beat2, 1))] for t in range(4, 20)},
        20.0: [("set", (f"{PREFIX}/result/2", _ok(2)))],
    }
    nodes = collect(
        store,
        4,  # node 3 never joins
        join_timeout_s=30,
        heartbeat_timeout_s=5,
        clock=FakeClock(store, script),
    )
    assert [n.rank for n in nodes] == [0, 1, 2, 3]
    assert [n.status for n in nodes] == ["ok", "failed", "ok", "failed"]
    assert "stopped answering" in (nodes[1].reason or "")
    assert "never joined within 30 s" in (nodes[3].reason or "")


def test_the_fleet_report_marks_outliers_and_failures(tmp_path: Path) -> None:
    nodes = [
        NodeResult.from_json(_ok(0, p50_us=500), 0),
        NodeResult.from_json(_ok(1, p50_us=550), 1),
        NodeResult.from_json(_ok(2, p50_us=4500, rate=1e8), 2),  # 9x the median, 10% the rate
        NodeResult(3, "?", "failed", reason="stopped answering (no heartbeat for 11 s)"),
    ]
    fleet = write_fleet(nodes, tmp_path / "fleet")
    names = sorted(p.name for p in fleet.written)
    assert names == [
        "fleet.html",
        "fleet.json",
        "fleet.md",
        "node-0.json",
        "node-1.json",
        "node-2.json",
    ]
    md = (tmp_path / "fleet" / "fleet.md").read_text()
    assert "3 of 4 nodes reported" in md
    assert (
        "node-2 (same-vm): cold throughput 10% of the median; 4 KiB latency 8.2x the median" in md
    )
    assert "node-3: failed: stopped answering" in md
    html = (tmp_path / "fleet" / "fleet.html").read_text()
    assert 'class="outlier"' in html and 'class="failed"' in html
    summary = json.loads((tmp_path / "fleet" / "fleet.json").read_text())
    assert [n["status"] for n in summary["nodes"]] == ["ok", "ok", "ok", "failed"]
    assert list(summary["outliers"]) == ["node-2 (same-vm)"]
    assert json.loads((tmp_path / "fleet" / "node-2.json").read_text()) == _doc(4500, 1e8)


def test_outside_torchrun_says_how_to_launch() -> None:
    with pytest.raises(ClusterError, match=r"not launched by torchrun.*--hosts"):
        ClusterEnv.from_environ({"RANK": "0"})
    env = ClusterEnv.from_environ(
        {
            "RANK": "1",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
            "TORCHELASTIC_USE_AGENT_STORE": "True",
        }
    )
    assert (env.rank, env.world_size, env.agent_store) == (1, 2, True)


def test_torchrun_lines_one_per_host_with_the_first_as_master() -> None:
    lines = torchrun_lines(["a", "b", "c"], "/models/x", out="/tmp/f", port=1234, budget_s=30)
    assert len(lines) == 3
    assert all("--nnodes=3 --nproc-per-node=1" in x and "--master-addr=a" in x for x in lines)
    assert [x.split("--node-rank=")[1].split()[0] for x in lines] == ["0", "1", "2"]
    assert lines[1].endswith("-m loadscope cluster /models/x --out /tmp/f --budget 30")


def test_two_nodes_an_outlier_is_flagged_against_the_better_one() -> None:
    """Issue 22: compare of an 84 us and a 3.33 ms report flagged nothing (median of two)."""
    from loadscope.report.compare import Row, compare

    def row(host: str, p50: float, rate: float) -> Row:
        return Row(host, host, "local-nvme", p50, "mmap", rate, "healthy", [])

    fast, slow = compare([row("a", 84.0, 2e9), row("b", 3330.0, 2e8)])
    assert fast.outlier == []
    assert slow.outlier == [
        "cold throughput 10% of the better node",
        "4 KiB latency 39.6x the better node",
    ]
    same = compare([row("a", 84.0, 2e9), row("b", 90.0, 1.9e9)])
    assert all(r.outlier == [] for r in same)


def test_a_node_that_measured_nothing_is_failed_and_old_reports_are_cleared(
    tmp_path: Path,
) -> None:
    """Issue 22: a stalled node counted as reported; a rerun kept last run's node files."""
    from loadscope.diagnosis.cluster import NodeResult, diagnose_node, write_fleet

    class Unmeasured:
        def to_json(self) -> str:
            return json.dumps(
                {"verdict": {"status": "unmeasured", "headline": "could not measure: stalled"}}
            )

    asked: list[object] = []

    def doctor(_target: object, options: object, **_watch: object) -> Unmeasured:
        asked.append(options)
        return Unmeasured()

    node = diagnose_node(1, "synthetic:1MiB", 5, str(tmp_path), doctor=doctor, stacks=("vllm",))
    assert node.status == "failed" and node.reason == "could not measure: stalled"
    assert [getattr(o, "stacks", None) for o in asked] == [("vllm",)]  # --stack reached it
    out = tmp_path / "fleet"
    ok = {"verdict": {"status": "healthy", "headline": "fine"}}
    write_fleet([NodeResult(0, "a", "ok", report=ok), NodeResult(1, "b", "ok", report=ok)], out)
    assert (out / "node-1.json").exists()
    (out / "notes.txt").write_text("mine")
    write_fleet([NodeResult(0, "a", "ok", report=ok), NodeResult(1, "?", "failed", "gone")], out)
    assert not (out / "node-1.json").exists(), "last run's report of a node that failed now"
    assert (out / "notes.txt").read_text() == "mine"
    assert "1 of 2 nodes reported" in (out / "fleet.md").read_text()


def test_fleet_json_is_of_the_published_schema_and_a_foreign_one_removes_nothing(
    tmp_path: Path,
) -> None:
    """Issue 20: fleet.json has a schema; a rerun trusts only a fleet.json of that shape."""
    from loadscope.diagnosis.cluster import NodeResult, write_fleet
    from loadscope.report.schema import SchemaError, check

    out = tmp_path / "fleet"
    write_fleet(
        [
            NodeResult(0, "a", "ok", report=json.loads(_ok(0))["report"]),
            NodeResult(1, "b", "ok", report=json.loads(_ok(1, p50_us=5000.0))["report"]),
            NodeResult(2, "?", "failed", "stopped answering"),
        ],
        out,
    )
    summary = json.loads((out / "fleet.json").read_text())
    check(summary, "fleet")
    assert [n["report"] for n in summary["nodes"]] == ["node-0.json", "node-1.json", None]
    assert summary["nodes"][2]["reason"] == "stopped answering"
    with pytest.raises(SchemaError, match="nodes: expected a list, got an object"):
        check({**summary, "nodes": {}}, "fleet")
    with pytest.raises(SchemaError, match="older loadscope"):
        check({**summary, "schema_version": 0}, "fleet")
    # A fleet.json of another shape in --out (not one loadscope wrote): nothing it names
    # is removed, though it names a node file (the old reader removed node-5.json).
    (out / "node-5.json").write_text("{}")
    (out / "fleet.json").write_text(
        json.dumps({"schema_version": 1, "nodes": [{"report": "node-5.json"}]})
    )
    write_fleet([NodeResult(0, "a", "ok", report=json.loads(_ok(0))["report"])], out)
    assert (out / "node-5.json").exists()


def test_a_fleet_json_naming_an_odd_node_file_does_not_stop_the_fleet_report(
    tmp_path: Path,
) -> None:
    """A schema-valid fleet.json whose node file name holds a NUL made unlink raise
    ValueError, and no fleet report was written: only node-N.json names are removed."""
    from loadscope.diagnosis.cluster import NodeResult, write_fleet

    out = tmp_path / "fleet"
    out.mkdir()
    odd = {"rank": 0, "name": "a", "status": "ok", "reason": None, "report": "node-\u0000"}
    other = {**odd, "rank": 1, "report": "node-1.json.bak"}
    (out / "node-1.json.bak").write_text("{}")
    (out / "fleet.json").write_text(json.dumps({"schema_version": 1, "nodes": [odd, other]}))
    write_fleet([NodeResult(0, "a", "ok", report=json.loads(_ok(0))["report"])], out)
    assert (out / "fleet.md").exists() and (out / "node-1.json.bak").exists()


def test_an_unwritable_out_is_refused_before_any_node_works(tmp_path: Path) -> None:
    from loadscope.diagnosis.cluster import check_out_dir

    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(LoadscopeError, match="cannot write the fleet report there"):
        check_out_dir(afile / "out")
    check_out_dir(tmp_path / "new" / "out")
    assert list((tmp_path / "new" / "out").iterdir()) == []


def test_the_rendezvous_comes_from_slurm_when_torchrun_is_not_there() -> None:
    from loadscope.diagnosis.cluster import ClusterEnv, ClusterError

    env = ClusterEnv.from_environ(
        {"SLURM_PROCID": "3", "SLURM_NTASKS": "5", "SLURM_JOB_NODELIST": "gpu[01-04,07]"}
    )
    assert (env.rank, env.world_size, env.master_addr, env.master_port) == (3, 5, "gpu01", 29500)
    assert env.agent_store is False
    with pytest.raises(ClusterError, match="one task per node"):
        ClusterEnv.from_environ(
            {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_NODELIST": "gpu[01-02]"}
        )
    with pytest.raises(ClusterError, match="nor by srun"):
        ClusterEnv.from_environ({})
    # torchrun's variables win where both are set (torchrun inside an allocation).
    both = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h0", "MASTER_PORT": "1234"}
    both.update(SLURM_PROCID="0", SLURM_NTASKS="1", SLURM_JOB_NODELIST="x")
    assert ClusterEnv.from_environ(both).master_addr == "h0"


def test_compare_names_the_target_and_refuses_the_same_report_twice(tmp_path: Path) -> None:
    """Issue 22: rows carried no target or size; the same file twice was accepted."""
    from loadscope.report.compare import Row, to_text
    from tests.conftest import run_loadscope

    def row(host: str, spec: str, size: int) -> Row:
        return Row(host, host, "fuse", 5000.0, "auto", 1e9, "problem", [], spec, size)

    assert to_text([row("a", "/m", 1 << 30), row("b", "/m", 1 << 30)]).startswith(
        "target: /m (1 GiB)"
    )
    assert to_text([row("a", "/m", 1 << 30), row("b", "/n", 1 << 20)]).startswith(
        "targets differ: a: /m (1 GiB); b: /n (1 MiB)"
    )
    golden = Path(__file__).parents[1] / "golden" / "doctor_report.json"
    r = run_loadscope("compare", str(golden), str(golden))
    assert r.code == 2 and "name each report once" in r.err, r


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not a loadscope report"),
        ("[" * 5000 + "]" * 5000, "nested"),
        (
            '{"rank": 1, "host": "h", "status": "ok", "report": {"verdict": {"status": "healthy",'
            ' "headline": "x"}, "recommendations": []}}',
            "report: missing 'schema_version'",
        ),
        (
            '{"rank": 1, "host": "h", "status": "ok", "report": {"schema_version": 1,'
            ' "verdict": [], "recommendations": []}}',
            "verdict: expected an object, got a list",
        ),
        (
            '{"rank": 1, "host": "h", "status": "ok", "report": {"schema_version": 0,'
            ' "verdict": {}, "recommendations": []}}',
            "written by an older loadscope (schema_version 0); this one reads schema_version 1",
        ),
        ('{"rank": 1, "host": 7, "status": "ok"}', "host: expected a string, got an integer"),
        ('{"rank": 0, "host": "h", "status": "ok"}', "says it is rank 0"),
    ],
)
def test_a_hostile_node_result_is_a_failed_node_not_the_fleets_end(text: str, why: str) -> None:
    """Issue 20: a node's result is checked against the schema before rank 0 uses it."""
    node = NodeResult.from_json(text, 1)
    assert node.rank == 1 and node.status == "failed", node
    assert why in (node.reason or ""), node.reason
    good = NodeResult.from_json(_ok(0), 0)
    assert good.status == "ok" and good.report == _doc(500.0, 1e9)


def test_a_node_says_sent_only_once_rank_0_confirmed() -> None:
    """Issue 22: a node printed "report sent to rank 0" after the store was gone."""
    from loadscope.diagnosis.cluster import wait_for_ack

    store = FakeStore()
    store.set(f"{PREFIX}/result/1", _ok(1))
    with pytest.raises(ClusterError, match=r"rank 0 did not confirm .* \(Socket Timeout\)"):
        wait_for_ack(store, 1, 5)
    store.set(f"{PREFIX}/result/0", _ok(0))
    nodes = collect(store, 2, join_timeout_s=5, clock=FakeClock(store, {}))
    assert [n.status for n in nodes] == ["ok", "ok"]
    wait_for_ack(store, 1, 5)  # rank 0 read it: the ack is there


def test_rows_sharing_a_hostname_are_told_apart_and_the_fleet_names_its_target(
    tmp_path: Path,
) -> None:
    """Issue 22: compare labelled rows by hostname only (every node "vm" here), and the
    fleet's Markdown and HTML named no target or size."""
    from loadscope.report.compare import row_of, to_text

    doc = _doc(500.0, 1e9)
    rows = [row_of("/reports/a.json", doc), row_of("/reports/b.json", doc)]
    text = to_text(rows)
    assert "same-vm (a.json)" in text and "same-vm (b.json)" in text, text
    # Two files of one name: as much of their paths as tells them apart.
    pair = [row_of("/r/before/report.json", doc), row_of("/r/after/report.json", doc)]
    assert "same-vm (before/report.json)" in to_text(pair), to_text(pair)
    assert text.startswith("target: /models/m (1 GiB)")
    nodes = [NodeResult(i, "same-vm", "ok", report=doc) for i in (0, 1)]
    write_fleet(nodes, tmp_path / "fleet")
    for name in ("fleet.md", "fleet.html"):
        body = (tmp_path / "fleet" / name).read_text()
        assert "Target: /models/m (1 GiB)" in body, name
        assert "node-0 (same-vm)" in body and "node-1 (same-vm)" in body, name


@pytest.mark.parametrize(
    "poison",
    [
        {"probe": {"files": [{"mount": {"storage_class": 7}}], "latency": {"p50_us": "fast"}}},
        {"probe": {"files": [{"mount": {"storage_class": ["x"]}}]}, "host": {"hostname": []}},
        {"bench": {"summary": [{"cache": "cold", "median_bytes_per_s": "1e9", "strategy": 3}]}},
        {"target": {"spec": 5, "total_bytes": "big"}, "verdict": {"status": 1, "headline": "x"}},
    ],
)
def test_a_schema_valid_node_with_odd_field_types_does_not_stop_the_fleet(
    tmp_path: Path, poison: dict[str, Any]
) -> None:
    """Issue 20: fields the schema leaves open (a mount's storage class, a host's name)
    reached html.escape and f-string padding as they came; the fleet report died with
    every node's result in it."""
    bad = _doc(500.0, 1e9) | poison
    nodes = [
        NodeResult(0, "a", "ok", report=_doc(500.0, 1e9)),
        NodeResult(1, "b", "ok", report=bad),
    ]
    fleet = write_fleet(nodes, tmp_path / "fleet")
    assert len(fleet.rows) == 2
    assert "2 of 2 nodes reported" in (tmp_path / "fleet" / "fleet.md").read_text()
    assert "node-1 (b)" in (tmp_path / "fleet" / "fleet.html").read_text()


def test_an_oversized_node_result_is_a_failed_node() -> None:
    from loadscope.diagnosis.doctor import MAX_REPORT_BYTES

    node = NodeResult.from_json(" " * (MAX_REPORT_BYTES + 1), 1)
    assert node.status == "failed" and "over the 256 MiB a report can be" in (node.reason or "")
