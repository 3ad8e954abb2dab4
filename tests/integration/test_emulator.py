"""The emulated slow disk: what the kernel really asks for, and a clean lifecycle.

Assertions are on the request log (sizes and counts), not on times; the times of
each regime are recorded by ``benchmarks/bench_emulated_regimes.py``.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadscope.probes.iobench import IoBench, sequential_read
from loadscope.probes.pagecache import ColdCache
from loadscope.tools.emulator import (
    EmulatedDisk,
    EmulatorError,
    EmulatorSettings,
    emulated_disk,
    fuse_connection_settings,
    fuse_unavailable_reason,
    is_mounted,
    unmount,
)
from loadscope.tools.synth import SyntheticCheckpoint, synthesize
from tests.conftest import REPO_ROOT, run_here

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        (why := fuse_unavailable_reason()) is not None, reason=f"emulated disk unavailable: {why}"
    ),
]

SIZE = 32 << 20


def _quiet_disk(**settings: Any) -> pytest.MarkDecorator:
    """The test's ``disk`` fixture: an emulated disk without latency or jitter, and these
    settings."""
    quiet = EmulatorSettings(latency_s=0, jitter_s=0, **settings)
    return pytest.mark.parametrize("disk", [quiet], indirect=True)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> SyntheticCheckpoint:
    return synthesize(tmp_path_factory.mktemp("emu-src"), SIZE, seed=4)


@pytest.fixture
def disk(
    source: SyntheticCheckpoint, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[EmulatedDisk]:
    settings: EmulatorSettings = getattr(
        request, "param", EmulatorSettings(latency_s=0, jitter_s=0)
    )
    with emulated_disk(source.root, tmp_path / "mnt", settings, log_requests=True) as d:
        yield d
    assert not is_mounted(tmp_path / "mnt")


def _cold(disk: EmulatedDisk, name: str = "model.safetensors") -> Path:
    path = disk.path / name
    ev = ColdCache().evict(path)
    assert ev.verified, ev.note
    assert disk.log is not None
    disk.log.clear()
    return path


def _load_file_in_child(path: Path) -> None:
    # A fresh process, as every loadscope trial: touch every tensor so mmap really reads.
    code = (
        "import sys; from safetensors.torch import load_file;"
        " [t.clone() for t in load_file(sys.argv[1]).values()]"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, capture_output=True)


def test_passthrough_is_exact_and_read_only(
    disk: EmulatedDisk, source: SyntheticCheckpoint
) -> None:
    mine = disk.path / "model.safetensors"
    theirs = source.root / "model.safetensors"
    assert (
        hashlib.sha256(mine.read_bytes()).digest() == hashlib.sha256(theirs.read_bytes()).digest()
    )
    assert sorted(os.listdir(disk.path)) == sorted(os.listdir(source.root))
    with pytest.raises(OSError):
        open(mine, "r+b")  # noqa: SIM115
    with pytest.raises(OSError):
        (disk.path / "new").write_text("x")


@_quiet_disk(readahead_kb=0)
def test_readahead_0_mmap_faults_page_by_page(disk: EmulatorSettings) -> None:
    assert fuse_connection_settings(*disk.device)["read_ahead_kb"] == 0
    path = _cold(disk)
    _load_file_in_child(path)
    hist = disk.log.size_histogram()
    total = sum(hist.values())
    # Every page is its own request: thousands of 4 KiB reads for a 32 MiB file.
    assert total >= 0.9 * SIZE / 4096
    assert hist[4096] >= 0.9 * total
    # A buffered full read goes page by page too at readahead 0 (the folklore fix does not help) ...
    path = _cold(disk)
    path.read_bytes()
    assert disk.log.size_histogram()[4096] >= 0.9 * SIZE / 4096
    # ... while large O_DIRECT reads reach the filesystem as a few large requests.
    path = _cold(disk)
    sequential_read(
        str(path), offset=0, length=path.stat().st_size, block_bytes=16 << 20, direct=True
    )
    hist = disk.log.size_histogram()
    assert sum(hist.values()) <= SIZE / (512 << 10)
    assert max(hist) == 1 << 20


@_quiet_disk(readahead_kb=8192, max_background=64)
def test_large_readahead_sends_1mib_requests(disk: EmulatedDisk) -> None:
    settings = fuse_connection_settings(*disk.device)
    assert settings["read_ahead_kb"] == 8192
    if settings["max_background"] is not None:
        assert settings["max_background"] == 64
    path = _cold(disk)
    path.read_bytes()
    hist = disk.log.size_histogram()
    # By bytes: a few page-sized requests the kernel sends around the readahead windows
    # (4 and 8 KiB, once 5 of 37 requests under load) carry almost none of the file.
    in_1mib = (1 << 20) * hist[1 << 20]
    assert in_1mib >= 0.9 * sum(size * n for size, n in hist.items()), hist


@_quiet_disk(readahead_kb=8192, max_read_kb=128)
def test_max_read_caps_request_size(disk: EmulatedDisk) -> None:
    path = _cold(disk)
    path.read_bytes()
    assert max(disk.log.size_histogram()) == 128 << 10


@_quiet_disk(readahead_kb=128)
def test_kernel_cache_keeps_second_read_warm(disk: EmulatedDisk) -> None:
    path = _cold(disk)
    path.read_bytes()
    first = sum(r.size for r in disk.log.requests())
    assert first >= path.stat().st_size
    disk.log.clear()
    path.read_bytes()  # a new open: kernel_cache keeps the pages
    # This machine's page cache decays on its own (DAMON reclaim): a few pages may be
    # evicted between the two reads (7 of 4 KiB once, in a full run). Without
    # kernel_cache the second read asks for the whole file again.
    again = sum(r.size for r in disk.log.requests())
    assert again <= 0.02 * first, again


@_quiet_disk(readahead_kb=8192, bandwidth_bytes_per_s=50e6)
def test_bandwidth_cap_is_a_floor_on_time(disk: EmulatedDisk) -> None:
    # A lower bound only: nothing can read faster than the cap, however quiet the machine.
    path = _cold(disk)
    t0 = time.monotonic()
    path.read_bytes()
    assert time.monotonic() - t0 >= 0.9 * path.stat().st_size / 50e6


@_quiet_disk(readahead_kb=128, direct_io=True)
def test_direct_io_mount_caches_nothing(disk: EmulatedDisk) -> None:
    path = disk.path / "model.safetensors"
    path.read_bytes()
    assert disk.log is not None
    disk.log.clear()
    path.read_bytes()
    assert sum(disk.log.size_histogram().values()) > 0  # every read reaches the "network"


def _probe_latency_us(disk: EmulatedDisk) -> float:
    path = disk.path / "model.safetensors"
    bench = IoBench([(str(path), path.stat().st_size)], cold=ColdCache(), direct=True)
    return bench.latency(time.monotonic() + 1.0).p50_us


def test_probe_classifies_fuse_and_measures_configured_latency(
    source: SyntheticCheckpoint, tmp_path: Path
) -> None:
    from loadscope.engine.probing import run_probes
    from loadscope.model.targets import resolve

    base = EmulatorSettings(latency_s=0, jitter_s=0)
    with emulated_disk(source.root, tmp_path / "m0", base) as d0:
        overhead_us = _probe_latency_us(d0)
    slow = EmulatorSettings(latency_s=0.004, jitter_s=0)
    with emulated_disk(source.root, tmp_path / "m4", slow) as d4:
        report = run_probes(resolve(str(d4.path)), budget_s=4)
        measured_us = _probe_latency_us(d4)
    storage = report.files[0].storage
    assert storage.mount.data is not None and storage.mount.data.storage_class == "fuse"
    assert report.latency.ok
    expected_us = 4000 + overhead_us
    assert abs(measured_us - expected_us) <= 0.3 * expected_us, (measured_us, overhead_us)


def test_sigterm_unmounts(source: SyntheticCheckpoint, tmp_path: Path) -> None:
    with emulated_disk(source.root, tmp_path / "mnt") as d:
        d.process.send_signal(signal.SIGTERM)
        d.process.wait(timeout=10)
        assert not is_mounted(d.path)


def test_stale_mount_after_kill_is_cleaned_by_unmount(
    source: SyntheticCheckpoint, tmp_path: Path
) -> None:
    mnt = tmp_path / "mnt"
    with emulated_disk(source.root, mnt) as d:
        d.process.kill()  # SIGKILL: no chance to unmount, the mount goes stale
        d.process.wait(timeout=10)
        assert is_mounted(mnt)
        assert unmount(mnt)
    assert not is_mounted(mnt)


def test_emulator_dies_with_its_parent(source: SyntheticCheckpoint, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    script = textwrap.dedent(
        f"""
        import os, signal
        from loadscope.tools.emulator import emulated_disk
        with emulated_disk({str(source.root)!r}, {str(mnt)!r}):
            print("up", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # die without running any cleanup
        """
    )
    proc = run_here([sys.executable, "-c", script], timeout=None)
    assert "up" in proc.stdout, proc.stderr
    deadline = time.monotonic() + 15
    while is_mounted(mnt) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not is_mounted(mnt)


def test_unmount_cli_on_stale_mount(source: SyntheticCheckpoint, tmp_path: Path) -> None:
    from tests.conftest import run_loadscope

    mnt = tmp_path / "mnt"
    with emulated_disk(source.root, mnt) as d:
        d.process.kill()
        d.process.wait(timeout=10)
        # A new emulator refuses the stale mount and says how to remove it.
        again = run_loadscope("emulate", str(source.root), str(mnt))
        assert again.code == 4 and "stale: emulate --unmount removes it" in again.err
        result = run_loadscope("emulate", "--unmount", str(mnt))
        assert result.code == 0, result.err
        assert not is_mounted(mnt) and not any(mnt.iterdir())


@pytest.mark.parametrize("how", ["unmount", "kill"])
def test_the_foreground_emulator_ends_as_its_mount_was_taken_away(
    source: SyntheticCheckpoint, tmp_path: Path, how: str
) -> None:
    """`emulate --unmount` from another shell is a way to stop a running `emulate`: it
    said "stopped on its own", exit 4. It now says unmounted, exit 0; a server that died
    (killed) is still an error, saying how it ended."""
    from tests.conftest import run_loadscope

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cmd = [sys.executable, "-m", "loadscope", "emulate", str(source.root), str(mnt)]
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while not is_mounted(mnt) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert is_mounted(mnt), proc.stderr
        time.sleep(1.0)  # mounted a moment before the server says it is ready
        if how == "unmount":
            assert run_loadscope("emulate", "--unmount", str(mnt)).code == 0
        else:
            server = subprocess.run(
                ["pgrep", "-f", "--", f"--serve-here {source.root} {mnt}"],
                capture_output=True, text=True, check=False,
            ).stdout.split()  # fmt: skip
            assert server, "no server process"
            os.kill(int(server[0]), signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        run_loadscope("emulate", "--unmount", str(mnt))
    if how == "unmount":
        assert proc.returncode == 0 and f"unmounted {mnt} (from outside)" in out, (out, err)
    else:
        assert proc.returncode == 4, (out, err)
        assert "stopped on its own (killed by signal 9)" in err
    assert "Traceback" not in err and not is_mounted(mnt)


def test_the_ready_line_reaches_a_pipe_while_the_mount_is_up(
    source: SyntheticCheckpoint, tmp_path: Path
) -> None:
    """`emulate SRC MNT 2>&1 | tee log` never said the mount was up: the ready line was
    written only when stderr was a terminal. It is written always, at once."""
    import select

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cmd = [sys.executable, "-m", "loadscope", "emulate", str(source.root), str(mnt)]
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 30)
        line = proc.stderr.readline() if ready else ""
        mounted = is_mounted(mnt)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        from tests.conftest import run_loadscope

        run_loadscope("emulate", "--unmount", str(mnt))
    assert line.startswith(f"serving {source.root} at {mnt}: 2 ms per request"), (line, err)
    assert "Ctrl-C unmounts" in line and mounted
    assert proc.returncode == 0 and f"unmounted {mnt}" in out, (out, err)
    assert "Traceback" not in err and not is_mounted(mnt)


def test_bad_source_is_one_line(tmp_path: Path) -> None:
    from tests.conftest import run_loadscope

    (tmp_path / "mnt").mkdir()
    result = run_loadscope("emulate", str(tmp_path / "nope"), str(tmp_path / "mnt"))
    # A missing SRC is blamed on SRC, as not-found (it was "mount point", exit 4).
    assert result.code == 3, result.err
    assert "nope: no such directory to emulate" in result.err
    assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1
    (tmp_path / "file").write_text("x")
    result = run_loadscope("emulate", str(tmp_path / "file"), str(tmp_path / "mnt"))
    assert result.code == 4 and "not a directory to emulate" in result.err


@pytest.fixture
def foreign_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs that loadscope did not mount (as a user's own mount would be)."""
    from tests.conftest import foreign_tmpfs_at

    mnt = tmp_path / "their-tmpfs"
    mnt.mkdir()
    with foreign_tmpfs_at(mnt):
        yield mnt


def test_unmount_refuses_a_mount_loadscope_did_not_make(foreign_tmpfs: Path) -> None:
    """Issue 21: ``--unmount`` of a plain tmpfs unmounted it (umount -l), exit 0."""
    from tests.conftest import run_loadscope

    result = run_loadscope("emulate", "--unmount", str(foreign_tmpfs))
    assert result.code == 4, result.err
    assert is_mounted(foreign_tmpfs)
    assert "not unmounted: it is a tmpfs mount (source tmpfs)" in result.err
    assert "not one loadscope's emulator made" in result.err
    assert not result.out and len(result.err.strip().splitlines()) == 1
    assert unmount(foreign_tmpfs)  # the library call refuses too: True = no emulator mount
    assert is_mounted(foreign_tmpfs)


def test_unmount_of_a_path_that_is_not_a_mount(tmp_path: Path) -> None:
    from tests.conftest import run_loadscope

    (tmp_path / "plain").mkdir()
    result = run_loadscope("emulate", "--unmount", str(tmp_path / "plain"))
    assert result.code == 4 and "unmounted" not in result.out
    assert "it is a directory, not a mount point" in result.err
    result = run_loadscope("emulate", "--unmount", str(tmp_path / "missing"))
    assert result.code == 3 and "it does not exist" in result.err


def test_mountpoint_must_be_an_empty_directory_and_not_a_mount(
    source: SyntheticCheckpoint, tmp_path: Path, foreign_tmpfs: Path
) -> None:
    """Issue 21: a non-empty directory was mounted over silently, a live mount stacked on."""
    from tests.conftest import run_loadscope

    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    result = run_loadscope("emulate", str(source.root), str(full))
    assert result.code == 4 and "mount point is not empty" in result.err
    assert not is_mounted(full) and (full / "keep.txt").read_text() == "mine"
    result = run_loadscope("emulate", str(source.root), str(foreign_tmpfs))
    assert result.code == 4 and "already a tmpfs mount" in result.err
    with emulated_disk(source.root, tmp_path / "mnt") as d:
        result = run_loadscope("emulate", str(source.root), str(d.path))
        assert result.code == 4 and "already a fuse.loadscope mount" in result.err
        assert is_mounted(d.path) and (d.path / "model.safetensors").exists()
        refused = pytest.raises(EmulatorError, match=r"already a fuse\.loadscope mount")
        with refused, emulated_disk(source.root, d.path):
            pass
        assert is_mounted(d.path)


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--threads=0", "--threads: must be between 1 and 1024"),
        ("--max-read-kb=0", "--max-read-kb: must be between 4 and 1024"),
        ("--max-read-kb=4096", "--max-read-kb: must be between 4 and 1024"),
        ("--max-background=0", "--max-background: must be between 1 and 65535"),
        ("--readahead-kb=-1", "--readahead-kb: must be between 0 and 1048576"),
        ("--eio-rate=2", "--eio-rate: must be between 0 and 1"),
    ],
)
def test_emulator_numbers_are_checked_before_mounting(
    source: SyntheticCheckpoint, tmp_path: Path, option: str, message: str
) -> None:
    from tests.conftest import run_loadscope

    (tmp_path / "mnt").mkdir()
    result = run_loadscope("emulate", str(source.root), str(tmp_path / "mnt"), option)
    assert result.code == 2 and message in result.err, result.err
    assert not is_mounted(tmp_path / "mnt")


def test_an_unwritable_request_log_is_one_line(source: SyntheticCheckpoint, tmp_path: Path) -> None:
    """``--log-requests`` into a missing folder or onto a directory was the server's crash:
    "did not come up: internal error: FileNotFoundError ... (a bug: please report it)"."""
    from tests.conftest import run_loadscope

    mnt = tmp_path / "mnt"
    mnt.mkdir()
    for log, code, message in (
        (tmp_path / "no" / "log", 3, "no directory"),
        (tmp_path, 7, "it is a directory"),
        (Path("/proc/version"), 4, "cannot write the request log /proc/version"),
        # Under the mount point it would be hidden, and left there the next emulate
        # onto the same folder was refused as "not empty".
        (mnt / "log", 2, "inside the mount point"),
        (Path("-"), 2, "the request log is a file"),
    ):
        result = run_loadscope("emulate", str(source.root), str(mnt), f"--log-requests={log}")
        assert result.code == code and message in result.err, result.err
        assert "internal error" not in result.err and len(result.err.strip().splitlines()) == 1
        assert not is_mounted(mnt)


def _wait_mounted(path: Path, want: bool, timeout_s: float = 15) -> bool:
    deadline = time.monotonic() + timeout_s
    while is_mounted(path) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return is_mounted(path) == want


def test_relative_mountpoint(source: SyntheticCheckpoint, tmp_path: Path) -> None:
    """Issue 21: a relative MOUNTPOINT mounted, then 'did not come up in time' after 15 s."""
    (tmp_path / "rel").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadscope", "emulate", str(source.root), "rel"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_mounted(tmp_path / "rel", True, timeout_s=10)
        assert (tmp_path / "rel" / "model.safetensors").stat().st_size > 0
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert "unmounted rel" in out
    finally:
        if proc.poll() is None:
            proc.kill()
        unmount(tmp_path / "rel")
    assert not is_mounted(tmp_path / "rel")


def test_backgrounded_emulate_dies_with_its_parent_shell(
    source: SyntheticCheckpoint, tmp_path: Path
) -> None:
    """Issue 21 / README: emulate exits and unmounts when its parent dies."""
    mnt = tmp_path / "bg"
    mnt.mkdir()
    script = (
        f"{sys.executable} -m loadscope emulate {source.root} {mnt} >/dev/null 2>&1 &\n"
        f"for i in $(seq 100); do mountpoint -q {mnt} && exit 0; sleep 0.1; done; exit 1\n"
    )
    shell = subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, timeout=30, check=False)
    try:
        assert shell.returncode == 0, "the emulator never mounted"
        # Its stop gives the server up to 10 s to unmount before the kill: a loaded machine
        # needs the margin.
        assert _wait_mounted(mnt, False, timeout_s=30), "still mounted after its shell exited"
    finally:
        unmount(mnt)


def test_a_served_model_keeps_the_users_name_and_folder(tmp_path: Path) -> None:
    """An emulated run's report names the model, not the mountpoint that is gone after."""
    from loadscope.advice.facts import _model_path
    from loadscope.diagnosis.session import _served
    from loadscope.engine.probing import run_probes
    from loadscope.model.targets import resolve

    model = synthesize(tmp_path / "my model", 4 << 20, seed=5, shards=2).root
    with _served(resolve(str(model)), EmulatorSettings(latency_s=0.0, jitter_s=0.0)) as served:
        assert served.root != model and served.served_from == model
        assert served.spec == str(model)
        probe = run_probes(served, budget_s=5)
    assert probe.target["spec"] == str(model) and probe.target["source"] == str(model)
    assert _model_path(probe) == str(model)


def _server_of(pid: int) -> int | None:
    """The emulator server ``pid`` started (``--serve-here``), once it runs, else None."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            if b"--serve-here" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
        except OSError:
            continue
    return None


def _gone(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie nobody reaps counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_emulate_killed_while_its_server_starts_leaves_no_mount(
    source: SyntheticCheckpoint, tmp_path: Path
) -> None:
    """SIGKILL of ``emulate`` while its server still imported (before it asked to die with
    its parent) left the server serving a live mount, reparented to init, for good."""
    mnt = tmp_path / "early"
    mnt.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadscope", "emulate", str(source.root), str(mnt)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = None
    deadline = time.monotonic() + 30
    while server is None and time.monotonic() < deadline and proc.poll() is None:
        server = _server_of(proc.pid)
        time.sleep(0.005)
    proc.kill()  # the moment its server exists: that one is still importing
    proc.wait(timeout=10)
    assert server is not None, "the emulator never started its server"
    try:
        deadline = time.monotonic() + 20
        while not _gone(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(server), "the server outlived the emulate command killed by SIGKILL"
        assert _wait_mounted(mnt, False, timeout_s=5), "still mounted after its command died"
    finally:
        if not _gone(server):
            os.kill(server, signal.SIGKILL)
        unmount(mnt)
