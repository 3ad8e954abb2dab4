"""``warm`` and ``copy``: the two fixes loadscope applies, proven on real files."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from loadscope.actions.localcopy import PARTIAL_SUFFIX, CopyRefused, NotEnoughSpace, copy_model
from loadscope.actions.warm import NotEnoughMemory, evict, warm
from loadscope.engine.bench import BenchOptions, run_bench
from loadscope.model.targets import resolve
from loadscope.probes.pagecache import residency
from loadscope.tools.emulator import (
    EmulatorSettings,
    emulated_disk,
    fuse_unavailable_reason,
    request_log_for,
)
from loadscope.tools.synth import synthesize
from tests.conftest import CliRunner, run_loadscope


def _tree(root: Path) -> dict[str, tuple[int, str, int]]:
    """Every file under root: size, sha256 and mtime (what 'untouched' means)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (
                st.st_size,
                hashlib.sha256(p.read_bytes()).hexdigest(),
                st.st_mtime_ns,
            )
    return out


@pytest.fixture
def model(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    synthesize(root, 12 << 20, seed=11, shards=3)
    (root / "tokenizer.json").write_text('{"version": "1.0"}')
    return root


def test_warm_fills_the_cache_and_evict_empties_it(model: Path) -> None:
    target = resolve(str(model))
    before = _tree(model)
    cold = evict(target)
    assert all(f.after is not None and f.after <= 0.01 for f in cold.files)
    report = warm(target, threads=4, block_bytes=1 << 20)
    assert report.bytes_read == target.total_bytes
    assert all(f.before is not None and f.before <= 0.01 for f in report.files)
    assert all(f.after == 1.0 for f in report.files)
    assert all(residency(str(wf.path)).fraction == 1.0 for wf in target.files)
    assert _tree(model) == before


def test_warm_refuses_what_does_not_fit_and_reads_nothing(model: Path) -> None:
    target = resolve(str(model))
    evict(target)
    with pytest.raises(NotEnoughMemory, match=r"missing"):
        warm(target, available=lambda: 1 << 20)
    assert all((residency(str(wf.path)).fraction or 0) <= 0.01 for wf in target.files)


def test_warm_cli_prints_residency_and_locks(model: Path) -> None:
    r = run_loadscope("warm", str(model), "--lock", "--for", "0.2", timeout=120)
    assert r.code == 0, r.err
    assert "resident before -> after" in r.out and "100%" in r.out
    assert "locked" in r.out
    r = run_loadscope("warm", str(model), "--evict", timeout=120)
    assert r.code == 0, r.err and "evicted" in r.out


def test_copy_is_verified_keeps_the_layout_and_never_touches_the_source(
    model: Path, tmp_path: Path
) -> None:
    target = resolve(str(model))
    before = _tree(model)
    dest = tmp_path / "local" / "copy"
    report = copy_model(target, dest, threads=3, block_bytes=1 << 20)
    assert {f.status for f in report.files} == {"copied"}
    assert "tokenizer.json" in {f.relative for f in report.files}
    assert {k: v[:2] for k, v in _tree(dest).items()} == {k: v[:2] for k, v in before.items()}
    assert _tree(model) == before
    assert not list(dest.rglob(f"*{PARTIAL_SUFFIX}"))
    # A rerun has nothing left to do: every file is verified in place and kept.
    again = copy_model(target, dest)
    assert {f.status for f in again.files} == {"already-there"} and again.bytes_copied == 0


def test_copy_refuses_to_overwrite_a_different_file_and_inside_the_model(
    model: Path, tmp_path: Path
) -> None:
    target = resolve(str(model))
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "config.json").write_text("{}")  # not the source's config
    with pytest.raises(CopyRefused, match="--force"):
        copy_model(target, dest)
    assert (dest / "config.json").read_text() == "{}"
    copy_model(target, dest, force=True)
    assert (dest / "config.json").read_bytes() == (model / "config.json").read_bytes()
    with pytest.raises(CopyRefused, match="inside the model"):
        copy_model(target, model / "sub")


def test_out_of_space_is_refused_before_a_byte_is_written(model: Path, tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(small)], check=True)
    try:
        with pytest.raises(NotEnoughSpace, match="nothing was written"):
            copy_model(resolve(str(model)), small / "copy")
        assert list(small.iterdir()) == []
        r = run_loadscope("copy", str(model), str(small / "copy"), timeout=60)
        assert r.code == 8 and "missing" in r.err and "Traceback" not in r.err
    finally:
        subprocess.run(["umount", str(small)], check=False)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_copy_resumes_to_an_identical_tree(
    tmp_path: Path, sig: signal.Signals
) -> None:
    model = tmp_path / "model"
    synthesize(model, 48 << 20, seed=12, shards=3)
    before = _tree(model)
    dest = tmp_path / f"dest-{sig.name}"
    cmd = [sys.executable, "-m", "loadscope", "copy", str(model), str(dest), "--threads", "1"]
    rng = random.Random(sig)
    mid_file = 0
    for _ in range(3):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if dest.exists() and any(dest.rglob(f"*{PARTIAL_SUFFIX}")):
                time.sleep(rng.uniform(0, 0.03))  # a random point inside a file's copy
                mid_file += 1
                break
            time.sleep(0.001)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert "Traceback" not in err
        if sig == signal.SIGINT and proc.returncode not in (0, None):
            assert proc.returncode == 130, err
            assert not list(dest.rglob(f"*{PARTIAL_SUFFIX}")), "Ctrl-C left a partial file"
        # Whatever was interrupted: every file under a final name is complete and right.
        for rel, (size, digest, _) in _tree(dest).items():
            if not rel.endswith(PARTIAL_SUFFIX):
                assert (size, digest) == before[rel][:2], rel
    assert mid_file >= 1, "never caught a copy in the middle of a file"
    r = run_loadscope("copy", str(model), str(dest), timeout=120)
    assert r.code == 0, r.err
    assert {k: v[:2] for k, v in _tree(dest).items()} == {k: v[:2] for k, v in before.items()}
    assert _tree(model) == before


def test_copy_and_warm_work_on_a_read_only_model_as_an_unprivileged_user(
    model: Path, request: pytest.FixtureRequest
) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as nobody")
    # Outside pytest's private (0700) tmp tree, so that nobody can reach it at all.
    base = Path(tempfile.mkdtemp(prefix="loadscope-nobody-"))
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    base.chmod(0o755)
    shared = base / "shared"
    shutil.copytree(model, shared / "model")
    for p in [shared, *shared.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    out = base / "out"
    out.mkdir()
    os.chown(out, 65534, 65534)
    before = _tree(shared / "model")
    env = {**os.environ, "HOME": str(out)}
    for args in (
        ["warm", str(shared / "model")],
        ["copy", str(shared / "model"), str(out / "copy")],
    ):
        r = subprocess.run(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-m",
                "loadscope",
                *args,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert r.returncode == 0, r.stderr
    assert _tree(shared / "model") == before
    assert {k: v[:2] for k, v in _tree(out / "copy").items()} == {
        k: v[:2] for k, v in before.items()
    }


needs_fuse = pytest.mark.skipif(
    (why := fuse_unavailable_reason()) is not None, reason=f"emulated disk unavailable: {why}"
)


#: Times safetensors' load_file of each file, every page touched (a fresh interpreter:
#: the test process never imports torch).
LOAD_FILE = """
import os, resource, sys, tempfile, torch
from safetensors.torch import load_file, save_file
# The same calls on a file of its own first: the code pages of torch and safetensors they
# fault in (evicted by memory pressure between runs) are not counted as the model's.
with tempfile.TemporaryDirectory() as d:
    save_file({"w": torch.ones(8192)}, os.path.join(d, "w.safetensors"))
    for v in load_file(os.path.join(d, "w.safetensors")).values():
        v.reshape(-1).view(torch.uint8)[::4096].sum()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
for path in sys.argv[1:]:
    for v in load_file(path).values():
        if v.numel():
            v.reshape(-1).view(torch.uint8)[::4096].sum()
print(resource.getrusage(resource.RUSAGE_SELF).ru_majflt - faults)
"""


def _load_file_faults(files: list[Path]) -> int:
    """Major page faults of load_file touching every page of ``files`` in a new process:
    each one waited for storage (none when the pages were in the page cache)."""
    out = subprocess.run(
        [sys.executable, "-c", LOAD_FILE, *map(str, files)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return int(out.stdout.strip().splitlines()[-1])


def _read_all(target_files: list[Path]) -> float:
    t0 = time.perf_counter()
    for p in target_files:
        with open(p, "rb", buffering=0) as fh:
            while fh.read(128 << 10):
                pass
    return time.perf_counter() - t0


@needs_fuse
def test_on_the_slow_disk_warm_makes_loads_page_cache_fast_and_copy_makes_them_local(
    model: Path, tmp_path: Path
) -> None:
    settings = EmulatorSettings(latency_s=0.002, jitter_s=0.0, readahead_kb=128, threads=4)
    with emulated_disk(model, tmp_path / "mnt", settings, log_requests=True) as disk:
        target = resolve(str(disk.path))
        files = [Path(wf.path) for wf in target.files]
        log = request_log_for(disk.path)
        assert log is not None
        evict(target)
        cold_s = _read_all(files)
        evict(target)
        at = log.end()
        cold_faults = _load_file_faults(files)
        cold_served = log.bytes_since(at)
        evict(target)
        report = warm(target, threads=8, block_bytes=4 << 20)
        assert all(f.after == 1.0 for f in report.files), [
            (f.path, f.before, f.after) for f in report.files
        ]
        warm_s = _read_all(files)  # no eviction in between: what the next load meets
        # Faster in seconds too (~10x alone; 5x failed once beside two busy workers on 2
        # cores, where reading the page cache took 28 ms): the bytes below are the proof.
        assert cold_s > 2 * warm_s, (cold_s, warm_s)
        # load_file, not told anything, meets the page cache: the storage serves (next to)
        # nothing. Counted in the bytes the disk served, not seconds (a 12 MiB load's time is
        # mostly the other worker's noise) nor major faults (the process's library pages,
        # evicted by memory pressure, fault too).
        at = log.end()
        warm_faults = _load_file_faults(files)
        warm_served = log.bytes_since(at)
        assert cold_faults >= 5, cold_faults
        assert 10 * warm_served <= cold_served, (cold_served, warm_served, warm_faults)
        dest = tmp_path / "local"
        copy_model(target, dest)
        options = BenchOptions(strategies=("mmap",), cache=("cold",), repeats=2, warmup=False)
        remote = run_bench(target, options)
        local = run_bench(resolve(str(dest)), options)
    assert all(t.verified for t in remote.trials + local.trials)
    assert remote.summary[0].median_seconds and local.summary[0].median_seconds
    assert local.summary[0].median_seconds < remote.summary[0].median_seconds / 2


def _in_another_process(code: str, *args: str) -> None:
    subprocess.run([sys.executable, "-c", code, *args], check=True, timeout=30)


_REWRITE = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
size = os.fstat(fd).st_size
os.pwrite(fd, b"\\xff" * 4096, 4096)
os.pwrite(fd, b"\\xee" * 4096, size - 8192)
os.close(fd)
"""
_APPEND = "import sys; open(sys.argv[1], 'ab').write(b'x' * (1 << 20))"


@pytest.mark.parametrize("change", [_REWRITE, _APPEND], ids=["rewritten", "appended"])
def test_a_source_changed_mid_copy_is_not_passed_off_as_a_copy(tmp_path: Path, change: str) -> None:
    """Issue 22: a shard rewritten (or appended to) by another process mid-copy gave exit 0
    and "matched the source", DEST holding neither version."""
    from loadscope.actions.localcopy import SourceChanged

    root = synthesize(tmp_path / "model", 8 << 20, seed=4).root
    shard = root / "model.safetensors"
    dest = tmp_path / "dest"
    changed = []

    def progress(done: int, total: int, seconds: float) -> None:
        if not changed and done >= 1 << 20:  # the first blocks are copied: change the rest
            _in_another_process(change, str(shard))
            changed.append(done)

    with pytest.raises(SourceChanged, match="changed while it was copied"):
        copy_model(resolve(str(root)), dest, threads=1, block_bytes=1 << 20, progress=progress)
    assert changed
    assert not (dest / "model.safetensors").exists()
    assert not list(dest.glob(f"*{PARTIAL_SUFFIX}"))


def test_a_source_changed_mid_copy_fails_the_command_in_one_line(
    tmp_path: Path, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same through ``loadscope copy``: its exit code and its one line, not exit 0."""
    import loadscope.cli.copy as copy_cli

    root = synthesize(tmp_path / "model", 8 << 20, seed=5).root
    shard = root / "model.safetensors"
    dest = tmp_path / "dest"
    changed = []

    class Meter:  # the command's progress: where the shard is changed, mid-copy
        def __init__(self, *args: object) -> None:
            pass

        def __call__(self, done: int, total: int, seconds: float) -> None:
            if not changed and done >= 1 << 20:  # the shard's block is written, not renamed
                _in_another_process(_REWRITE, str(shard))
                changed.append(done)

        def close(self) -> None:
            pass

    monkeypatch.setattr(copy_cli, "ByteMeter", Meter)
    r = cli("copy", str(root), str(dest), "--quiet")
    assert changed
    assert r.code == 7 and "changed while it was copied" in r.err, r
    assert r.err.count("\n") == 1 and "Traceback" not in r.err and "matched" not in r.out, r
    assert not (dest / "model.safetensors").exists()
    assert not list(dest.glob(f"*{PARTIAL_SUFFIX}"))


def test_a_second_copy_into_the_same_dest_is_refused(model: Path, tmp_path: Path) -> None:
    """Two copies into one DEST collided (a truncated partial, internal errors)."""
    dest = tmp_path / "dest"
    dest.mkdir()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY);"
            " fcntl.flock(fd, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)",
            str(dest),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        r = run_loadscope("copy", str(model), str(dest), timeout=60)
        assert r.code == 2 and "another loadscope copy is writing into it" in r.err, r
        assert r.err.count("\n") == 1 and list(dest.iterdir()) == []
    finally:
        holder.kill()
        holder.wait()
    copy_model(resolve(str(model)), dest)  # the lock is gone with its process
    assert (dest / "config.json").read_bytes() == (model / "config.json").read_bytes()


def test_dest_problems_are_one_line_before_any_byte(model: Path, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = run_loadscope("copy", str(model), str(afile / "sub"), timeout=60)
    assert r.code == 2 and "is a file, not a directory" in r.err and r.err.count("\n") == 1, r
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=4m", "tmpfs", str(ro)], check=True)
    try:
        for dest in (ro, ro / "sub"):
            r = run_loadscope("copy", str(model), str(dest), timeout=60)
            assert r.code in (6, 7) and "read-only" in r.err, r
            assert r.err.count("\n") == 1 and "internal error" not in r.err
    finally:
        subprocess.run(["umount", str(ro)], check=False)


def test_a_report_of_another_model_is_refused_before_the_copy(model: Path, tmp_path: Path) -> None:
    golden = Path(__file__).parents[1] / "golden" / "doctor_report.json"
    r = run_loadscope("copy", str(model), str(tmp_path / "dest"), "--report", str(golden))
    assert r.code == 2 and "a report of another model" in r.err and r.err.count("\n") == 1, r
    assert not (tmp_path / "dest").exists()
    bench_like = tmp_path / "bench.json"
    bench_like.write_text('{"schema_version": 1, "trials": []}')
    r = run_loadscope("copy", str(model), str(tmp_path / "dest"), "--report", str(bench_like))
    assert r.code != 0 and "not a loadscope doctor report" in r.err, r
    assert not (tmp_path / "dest").exists()


def _report_for(model: Path, at: Path, *, root: Path, listed: list[Path] | None = None) -> Path:
    """The golden doctor report, made a report of ``root`` (of ``model``'s size), listing
    the files ``listed`` (under ``root``, with ``model``'s sizes) when given."""
    golden = Path(__file__).parents[1] / "golden" / "doctor_report.json"
    doc = json.loads(golden.read_text())
    target = resolve(str(model))
    doc["target"] = {
        "spec": str(root),
        "kind": "directory",
        "root": str(root),
        "files": len(target.files),
        "total_bytes": target.total_bytes,
    }
    if listed is not None:
        doc["probe"] = {
            "files": [
                {"path": str(p), "size_bytes": wf.size_bytes}
                for p, wf in zip(listed, target.files, strict=True)
            ]
        }
    at.write_text(json.dumps(doc))
    return at


def test_a_report_of_another_folder_of_the_same_size_is_refused(
    model: Path, tmp_path: Path
) -> None:
    """Issue 22: only the total bytes and the file count were compared, so a report of
    another model of the same size (a fine-tune of the same base) was taken for this one's."""
    twin = tmp_path / "twin"
    shutil.copytree(model, twin)  # the same names and sizes, even the same bytes
    dest = tmp_path / "dest"
    target = resolve(str(model))
    names = [Path(wf.path).relative_to(model) for wf in target.files]
    gone = tmp_path / "not-here"
    for report in (
        _report_for(model, tmp_path / "twin.json", root=twin),
        _report_for(
            model, tmp_path / "twin-listed.json", root=twin, listed=[twin / n for n in names]
        ),
        # A folder this machine does not have: its files are not this model's names.
        _report_for(
            model, tmp_path / "renamed.json", root=gone, listed=[gone / f"x{n}" for n in names]
        ),
        _report_for(model, tmp_path / "unlisted.json", root=gone),
    ):
        r = run_loadscope("copy", str(model), str(dest), "--report", str(report))
        assert r.code == 2 and "a report of another model" in r.err, (report.name, r)
        assert str(model) in r.err and r.err.count("\n") == 1, (report.name, r)
        assert not dest.exists(), report.name  # refused before any byte
    assert (
        str(twin)
        in run_loadscope("copy", str(model), str(dest), "--report", str(tmp_path / "twin.json")).err
    )
    # This model's report: of its folder, or of a folder not here listing its files.
    for report in (
        _report_for(model, tmp_path / "same.json", root=model),
        _report_for(model, tmp_path / "moved.json", root=gone, listed=[gone / n for n in names]),
    ):
        r = run_loadscope("copy", str(model), str(dest), "--report", str(report))
        assert r.code == 0 and "break-even:" in r.out, (report.name, r)
    assert (dest / "config.json").read_bytes() == (model / "config.json").read_bytes()
