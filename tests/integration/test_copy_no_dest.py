"""``copy MODEL`` without DEST for a model already on a local disk (or in RAM) says no copy
is needed and what a copy would and would not change, exit 0 (issue 41 item 6): it said
"(none found: name a directory on a local disk)" while that disk had 69 GiB free."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from loadscope.probes import mounts
from loadscope.probes.filestorage import storage_of as _storage
from loadscope.tools.synth import synthesize
from tests.conftest import CliRunner

pytestmark = pytest.mark.integration


def _class_of(path: Path) -> str | None:
    m = _storage(path, mounts.read_mountinfo(), False).mount.data
    return (m.resolved_class or m.storage_class) if m else None


def test_a_model_on_a_local_disk_needs_no_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: CliRunner
) -> None:
    model = synthesize(tmp_path / "m", 2 << 20, seed=31).root
    if _class_of(model) != "local-block":
        pytest.skip(f"{tmp_path} is not on a local disk here")
    # The only candidate is on the model's own disk: no other local disk to copy to.
    monkeypatch.setenv("LOADSCOPE_LOCAL_DIRS", str(tmp_path))
    r = cli("copy", str(model))
    assert r.code == 0, (r.out, r.err)
    assert "none found" not in r.out
    said = r.out.strip()
    assert said.startswith(f"no copy needed: {model} is already on a local disk"), said
    assert re.search(r"\(\w+ at /\S*, [\d.]+ [KMGT]?i?B free\)", said), said  # its room
    assert "cold loads would not get faster" in said
    assert f"loadscope doctor {model}" in said
    assert not (tmp_path / "m" / "loadscope-copies").exists()


def test_a_model_in_memory_needs_no_copy_even_with_a_disk_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: CliRunner
) -> None:
    if not Path("/dev/shm").is_dir() or _class_of(Path("/dev/shm")) != "memory":
        pytest.skip("no tmpfs at /dev/shm")
    folder = Path(tempfile.mkdtemp(prefix="loadscope-test-", dir="/dev/shm"))
    try:
        model = synthesize(folder / "m", 1 << 20, seed=32).root
        monkeypatch.setenv("LOADSCOPE_LOCAL_DIRS", str(tmp_path))
        r = cli("copy", str(model))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert r.code == 0, (r.out, r.err)
    assert r.out.startswith(f"no copy needed: {model} is in memory-backed storage (tmpfs")
    assert "would make cold loads slower" in r.out


def test_a_model_on_slow_storage_still_gets_destinations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: CliRunner
) -> None:
    from tests.conftest import slow_synthetic

    with slow_synthetic(tmp_path, 1 << 20, seed=33, latency_s=0.001) as mnt:
        local = tmp_path / "local"
        local.mkdir()
        monkeypatch.setenv("LOADSCOPE_LOCAL_DIRS", str(local))
        r = cli("copy", str(mnt))
    assert r.code == 2, (r.out, r.err)
    assert "copy needs a DEST" in r.out and "no copy needed" not in r.out
