"""Every option is checked where it is parsed, and every printed command pastes safely.

Each case ran before these checks (a budget of -5, a knob no strategy has, a host
named ``h0;rm -rf /``): now it is a usage error (exit 2) with one line naming the
option and what it takes, before any worker starts or any file is read.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from loadscope.loaders.strategies import STRATEGIES, check_knobs
from loadscope.loaders.strategy import Knob
from tests.conftest import CliRunner

# (argv, what stderr must say): the value is refused as the arguments are parsed, so a
# target that does not exist is never looked at.
BAD_NUMBERS = [
    (["bench", "m", "--budget", "0"], "--budget: must be a number of seconds above 0"),
    (["bench", "m", "--budget", "-5"], "--budget: must be a number of seconds above 0"),
    (["bench", "m", "--budget", "nan"], "--budget: must be a number of seconds above 0"),
    (["bench", "m", "--budget", "inf"], "--budget: must be a number of seconds above 0"),
    (["bench", "m", "--repeats", "0"], "--repeats: must be between 1 and 1000"),
    # Huge counts and waits: planned up front or past the platform's timeouts, they were a
    # hang eating memory or an internal error (OverflowError) after the work had started.
    (["bench", "m", "--repeats", "9" * 23], "--repeats: must be between 1 and 1000"),
    (["probe", "m", "--budget", "9" * 23], "--budget: must be a number of seconds above 0 and"),
    (["doctor", "m", "--budget", "31536001"], "--budget: must be a number of seconds above 0 and"),
    (["bench", "m", "--trial-timeout", "9" * 23], "--trial-timeout: must be a number of seconds"),
    (["warm", "m", "--lock", "--for", "9" * 23], "at most 31536000, not '999"),
    (["bench", "m", "--ranks", "0"], "--ranks: must be between 1 and 1024"),
    (["bench", "m", "--trial-timeout", "-1"], "--trial-timeout: must be a number of seconds"),
    (["probe", "m", "--budget", "0"], "--budget: must be a number of seconds above 0"),
    (["doctor", "m", "--budget", "nan"], "--budget: must be a number of seconds above 0"),
    (["doctor", "m", "--ranks", "-2"], "--ranks: must be between 1 and 1024"),
    (["warm", "m", "--threads", "0"], "--threads: must be between 1 and 1024"),
    (["warm", "m", "--threads", "1e9"], "--threads: must be between 1 and 1024"),
    (["warm", "m", "--block", "0"], "--block: must be between 4096 and 1073741824"),
    (["warm", "m", "--lock", "--for", "-1"], "--for: must be a number of seconds above 0"),
    (["warm", "m", "--lock", "--for", "inf"], "--for: must be a number of seconds above 0"),
    (["warm", "m", "--stall-timeout", "0"], "--stall-timeout: must be a number of seconds"),
    (["copy", "m", "d", "--threads", "-1"], "--threads: must be between 1 and 1024"),
    (["cluster", "m", "--port", "0"], "--port: must be between 1 and 65535"),
    (["cluster", "m", "--port", "99999"], "--port: must be between 1 and 65535"),
    (["cluster", "m", "--budget", "-1"], "--budget: must be a number of seconds above 0"),
    (["cluster", "m", "--join-timeout", "0"], "--join-timeout: must be a number of seconds"),
    (["demo", "--budget", "0"], "--budget: must be a number of seconds above 0"),
    (["demo", "--max-background", "0"], "--max-background: must be between 1 and 65535"),
    (["synth", "o", "--shards", "0"], "--shards: must be between 1 and 100000"),
    (["synth", "o", "--seed", "-1"], "--seed: must be between 0 and 4294967295"),
    (["emulate", "a", "b", "--seed", "-1"], "--seed: must be between 0 and 4294967295"),
    (["emulate", "a", "b", "--bandwidth", "0"], "--bandwidth: must be a rate above 0"),
]


@pytest.mark.parametrize(
    ("argv", "message"), BAD_NUMBERS, ids=[" ".join(a) for a, _ in BAD_NUMBERS]
)
def test_numbers_are_checked_as_they_are_parsed(
    cli: CliRunner, argv: list[str], message: str
) -> None:
    result = cli(*argv)
    assert result.code == 2, result
    assert message in result.err, result.err
    assert "internal error" not in result.err and result.out == ""


@pytest.mark.parametrize(
    ("knob", "message"),
    [
        ("nosuch.threads=4", "unknown strategy 'nosuch'"),
        ("auto.nosuch=4", "auto has no knob 'nosuch' (its knobs: threads, block_bytes"),
        ("auto.block_bytes=abc", "auto.block_bytes='abc': expected bytes 4096..1073741824"),
        ("parallel.threads=1e9", "parallel.threads='1e9': expected integer 1..256"),
        ("parallel.threads=-1", "parallel.threads='-1': expected integer 1..256"),
        ("parallel.threads=0", "parallel.threads='0': expected integer 1..256"),
        ("auto.direct=maybe", "auto.direct='maybe': expected auto | yes | no"),
        ("direct.block_bytes=5000", "a multiple of 4096"),
        # auto (and load_file's api) read with O_DIRECT too: 5000 was run as 4 KiB reads.
        ("auto.block_bytes=5000", "auto.block_bytes='5000': expected bytes 4096..1073741824,"),
        ("api.block_bytes=5000", "a multiple of 4096"),
    ],
)
def test_knobs_are_checked_against_each_strategys_declaration(
    cli: CliRunner, knob: str, message: str
) -> None:
    # The target is never opened: the knob is refused first.
    result = cli("bench", "/nonexistent/model", "--knob", knob)
    assert result.code == 2, result
    assert message in result.err and result.err.count("\n") == 1, result.err


def test_an_empty_strategy_list_is_refused(cli: CliRunner) -> None:
    result = cli("bench", "/nonexistent/model", "--strategies", " , ")
    assert result.code == 2 and "--strategies is empty" in result.err, result.err


def test_good_knob_values_are_converted() -> None:
    checked = check_knobs(
        {"parallel": {"threads": "16", "block_bytes": "4MiB"}, "auto": {"direct": "YES"}}
    )
    assert checked == {
        "parallel": {"threads": 16, "block_bytes": 4 << 20},
        "auto": {"direct": "yes"},
    }


def test_every_declared_default_passes_its_own_check() -> None:
    for strategy in STRATEGIES.values():
        for knob in strategy.knobs:
            assert knob.parse(knob.default) == knob.default, (strategy.name, knob.name)
            assert knob.takes()


def test_a_knob_declares_its_range() -> None:
    k = Knob("slots", 4, "ring slots", minimum=1, maximum=8)
    assert k.parse("8") == 8 and k.takes() == "integer 1..8"
    with pytest.raises(ValueError, match=r"slots='9': expected integer 1\.\.8"):
        k.parse("9")
    with pytest.raises(ValueError):
        k.parse(True)


def test_hostile_host_names_are_refused(cli: CliRunner) -> None:
    for hosts in ("h0;rm -rf /,h1", "a b", "$(reboot)", "-x", ",,"):
        result = cli("cluster", "/models/m", "--hosts", hosts)
        assert result.code == 2, (hosts, result)
        assert "--hosts" in result.err and result.out == "", result.err


def test_printed_cluster_lines_paste_as_the_same_arguments(cli: CliRunner) -> None:
    target = "/models/my model; $(x)"
    result = cli(
        "cluster",
        target,
        "--hosts",
        "node-0.example.com,10.0.0.2,fe80::1",
        "--out",
        "fleet dir",
        "--join-timeout",
        "30",
        "--heartbeat-timeout",
        "5",
        "--synth-dir",
        "/scratch/a b",
        "--stack",
        "vllm",
        "--stack",
        "sglang",
    )
    assert result.code == 0, result
    lines = [ln for ln in result.out.splitlines() if ln.startswith("  [")]
    assert len(lines) == 3
    for rank, line in enumerate(lines):
        words = shlex.split(line.split("] ", 1)[1])
        assert words[:6] == [
            "torchrun",
            "--nnodes=3",
            "--nproc-per-node=1",
            f"--node-rank={rank}",
            "--master-addr=node-0.example.com",
            "--master-port=29500",
        ]
        rest = words[6:]
        assert rest[:4] == ["-m", "loadscope", "cluster", target]
        # Every option a node needs is forwarded, not dropped.
        assert rest[rest.index("--out") + 1] == "fleet dir"
        assert rest[rest.index("--join-timeout") + 1] == "30"
        assert rest[rest.index("--heartbeat-timeout") + 1] == "5"
        assert rest[rest.index("--synth-dir") + 1] == "/scratch/a b"
        assert [rest[i + 1] for i, w in enumerate(rest) if w == "--stack"] == ["vllm", "sglang"]


def test_run_bench_refuses_a_bad_knob_before_any_trial(tmp_path: Path) -> None:
    from loadscope.engine.bench import BenchError, BenchOptions, run_bench
    from loadscope.model.targets import resolve
    from loadscope.tools.synth import synthesize

    target = resolve(str(synthesize(tmp_path / "m", 1 << 20, seed=1).root))
    with pytest.raises(BenchError, match=r"knob parallel\.threads='many': expected integer"):
        run_bench(
            target, BenchOptions(strategies=("parallel",), knobs={"parallel": {"threads": "many"}})
        )


@pytest.mark.parametrize(
    ("path", "codes", "says"),
    [
        ("/nonexistent/dir/r.json", {3}, "no directory /nonexistent/dir"),
        ("/proc/loadscope-report.json", {6, 7}, "cannot write /proc/loadscope-report.json"),
        ("/sys/loadscope-report.json", {6, 7}, "cannot write /sys/loadscope-report.json"),
        ("/", {7}, "it is a directory"),
        ("", {2}, "an empty path (name a file, or '-')"),
    ],
)
def test_a_report_path_that_cannot_be_written_is_refused_before_any_work(
    cli: CliRunner, tmp_path: Path, path: str, codes: set[int], says: str
) -> None:
    from loadscope.tools.synth import synthesize

    model = synthesize(tmp_path / "m", 1 << 20, seed=2).root
    for argv in (["warm", str(model), "--json", path], ["doctor", str(model), "--md", path]):
        result = cli(*argv)
        assert result.code in codes and says in result.err, (argv, result)
        assert result.out == "" and result.err.count("\n") == 1, result
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--strategies", "mmap"], "--strategies does not apply with --ranks"),
        (["--knob", "parallel.threads=4"], "--knob does not apply with --ranks"),
        (["--strategies", "mmap", "--knob", "auto.threads=4"], "--strategies and --knob do not"),
        (["--ranks", "999"], "would measure the scheduler"),
    ],
)
def test_bench_ranks_refuses_what_it_would_ignore(
    cli: CliRunner, extra: list[str], says: str
) -> None:
    """Issue 22: with --ranks, --strategies and --knob were silently ignored (--budget
    applies since issue 48: no trial starts past it)."""
    argv = ["bench", "/nonexistent/model", "--ranks", "2", *extra]
    result = cli(*argv)
    assert result.code == 2 and says in result.err, result


def test_a_knob_for_a_strategy_not_run_is_refused(cli: CliRunner) -> None:
    """``--strategies mmap --knob auto.huge_pages=yes`` ran mmap and dropped the knob."""
    result = cli("bench", "/nonexistent/model", "--strategies", "mmap", "--knob",
                 "auto.huge_pages=yes")  # fmt: skip
    assert result.code == 2, result
    assert "--knob auto.huge_pages: auto is not among --strategies mmap" in result.err
