"""Issue 20: ``--redact-hosts`` hides every path derived from the model's location, the
user's home and the hostname, in the JSON, the Markdown and the HTML; the conversion
sample's folder is on the model's filesystem only when the device ids say so, and
its label names the filesystem it really is on."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from loadscope.actions.convert import PREFIX, conversion_folder
from loadscope.advice.rules import facts_from, rule_copy_local
from loadscope.diagnosis.doctor import DoctorOptions, redact, run_doctor
from loadscope.model.targets import resolve
from loadscope.probes.localdisk import DiskSpeed, LocalDisk, LocalDisks
from loadscope.probes.result import ProbeResult, Status
from loadscope.report.html import to_html
from loadscope.report.markdown import to_markdown
from loadscope.report.schema import check as check_schema
from loadscope.tools.synth import synthesize
from tests.conftest import run_here

pytestmark = pytest.mark.integration

SECRET = "team-secret-x"
MODEL_NAME = "model-secret-y"
LOCAL_SECRET = "scratch-secret-z"
HOST = "gpu-secret-host-17"


def _snapshot(root: Path) -> dict[str, tuple[int, str]]:
    return {
        p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in root.iterdir()
        if p.is_file()
    }


def _leaks(text: str, secrets: list[str]) -> list[str]:
    return [s for s in secrets if s in text]


def _secrets() -> list[str]:
    out = [SECRET, MODEL_NAME, LOCAL_SECRET, HOST]
    real = platform.node()
    # A real hostname too short to be told from ordinary words ("vm") is only hidden
    # where a field holds it (checked below), not as a substring.
    if len(real) >= 4:
        out.append(real)
    return out


@contextmanager
def _tmpfs(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(folder)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (root and CAP_SYS_ADMIN needed): {exc}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)


@contextmanager
def _loop_ext4(folder: Path, image: Path) -> Iterator[None]:
    """An ext4 filesystem of its own (a loop device) mounted at ``folder``: unlike tmpfs,
    its page cache can be dropped, so the doctor's cold trials run."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with open(image, "wb") as fh:
            fh.truncate(96 << 20)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        subprocess.run(
            ["mount", "-o", "loop", str(image), str(folder)], check=True, capture_output=True
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a loop ext4 image here (root, mkfs.ext4 needed): {exc}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=False, capture_output=True)


# ------------------------------------------------------------------------- redaction


def test_redacted_report_of_a_pickle_model_holds_no_path_or_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real doctor run (a conversion beside the model names its parent), with a copy
    recommendation to a home folder and a configured local disk: nothing of the model's
    location, the home folder or the hostname is left anywhere in the report."""
    monkeypatch.setattr(platform, "node", lambda: HOST)
    ck = synthesize(tmp_path / SECRET / MODEL_NAME, 8 << 20, shards=2, fmt="torch", seed=5)
    before = _snapshot(ck.root)
    report = run_doctor(resolve(str(ck.root)), DoctorOptions(budget_s=30, stacks=("safetensors",)))
    conv = report.conversion
    assert conv is not None and conv.where and SECRET in conv.where, (conv, report.failures)
    # The local-disk probe's findings as on a cluster node (the model's disk is local here,
    # so the probe skipped them): the home folder and a folder set in $LOADSCOPE_LOCAL_DIRS,
    # and the copy advice built from them by the rule itself (its action, evidence,
    # snippets and apply name the destination, which ends in the model folder's name).
    home = os.path.expanduser("~")
    fast = tmp_path / LOCAL_SECRET
    fast.mkdir()
    speed = 50e9
    report.probe.registered["local_disks"] = ProbeResult(
        "local_disks",
        Status.OK,
        data=LocalDisks(
            [
                LocalDisk(
                    home,
                    "/",
                    "local-block",
                    1 << 40,
                    DiskSpeed(home, 1 << 40, 1, speed, speed, True),
                ),
                LocalDisk(str(fast), "/", "local-block", 1 << 40, None, f"cannot write {fast}"),
            ]
        ),
    )
    facts = facts_from(report.probe, report.bench, None, report.failures, report.conversion)
    facts.storage_class = "network-fs"
    facts.warm = {}  # no page-cache floor: the local disk is estimated faster
    facts.cold["mmap"] = facts.cold["pickle"]  # the rule compares with a default load
    copy = rule_copy_local(facts)
    assert copy and copy[0].apply and copy[0].apply["dest"].endswith(f"/{MODEL_NAME}")
    report.advice.recommendations += copy
    report.advice.notes.append(f"the local-disk probe measured {home} and {fast}")
    report.failures.append(f"local disk {fast}: not measured on {HOST}")
    doc = json.loads(report.to_json())
    check_schema(doc, "doctor")
    assert _leaks(json.dumps(doc), [SECRET, MODEL_NAME, LOCAL_SECRET, HOST]) == [
        SECRET,
        MODEL_NAME,
        LOCAL_SECRET,
        HOST,
    ]

    red = redact(doc)
    check_schema(red, "doctor")
    text = json.dumps(red)
    assert _leaks(text, _secrets()) == [], text
    assert red["host"]["hostname"] == "<host>"
    assert red["probe"]["system"]["hostname"] == "<host>"
    if len(home) > 2:
        assert f'"{home}' not in text and f" {home}" not in text
    # The placeholders still say what was there.
    assert red["conversion"]["where"].startswith("beside the model (<model>/..,")
    rec = next(r for r in red["recommendations"] if r["id"] == "copy-to-local-disk")
    assert rec["apply"] == {
        "kind": "copy",
        "source": "<model>",
        "dest": "~/loadscope-copies/<model>" if len(home) > 2 else rec["apply"]["dest"],
    }
    assert "<local-disk-1>" in json.dumps(red["probe"]["local_disks"])
    assert _leaks(to_markdown(red), _secrets()) == []
    assert _leaks(to_html(red), _secrets()) == []
    assert _snapshot(ck.root) == before  # the user's files untouched


def test_redact_hides_the_user_name_and_home_as_path_components(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The home folder becomes ``~`` and the login name elsewhere ``<user>``; a word that
    merely contains a folder's name stays."""
    import getpass

    monkeypatch.setenv("HOME", "/home/alice-secret")
    monkeypatch.setattr(getpass, "getuser", lambda: "alice-secret")
    doc = {
        "host": {"hostname": "n1"},
        "target": {"spec": "/data/proj-secret/m", "root": "/data/proj-secret/m"},
        "notes": [
            "cache in /home/alice-secret/.cache; scratch at /scratch/alice-secret/tmp",
            "beside the model (/data/proj-secret, ext4); /data/proj-secrets is another",
            "see /database/x",
        ],
    }
    notes = redact(doc)["notes"]
    assert notes[0] == "cache in ~/.cache; scratch at /scratch/<user>/tmp"
    assert notes[1].startswith("beside the model (<model>/.., ext4)")
    assert notes[2] == "see /database/x"  # /data (top level) is no secret, nor a prefix


def test_cli_redact_hosts_writes_no_path_or_host(tmp_path: Path) -> None:
    """``loadscope doctor MODEL --redact-hosts`` through the CLI, under a hostname of its
    own (a UTS namespace): the JSON, the Markdown and the HTML hold none of it."""
    if shutil.which("unshare") is None or shutil.which("hostname") is None:
        pytest.skip("unshare(1) or hostname(1) not installed")
    probe = subprocess.run(
        ["unshare", "--uts", "hostname", HOST], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a UTS namespace here: {probe.stderr.strip()}")
    ck = synthesize(tmp_path / SECRET / MODEL_NAME, 8 << 20, shards=2, fmt="torch", seed=6)
    before = _snapshot(ck.root)
    out = tmp_path / "out"
    out.mkdir()
    script = (
        f"hostname {HOST} && exec {sys.executable} -m loadscope doctor {ck.root}"
        f" --budget 30 --quiet --redact-hosts --json {out}/r.json --md {out}/r.md"
        f" --html {out}/r.html"
    )
    proc = run_here(
        ["unshare", "--uts", "sh", "-c", script],
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        timeout=120,
    )
    # 1: the doctor could not measure (a 2-core machine under the suite's load once did):
    # its reports are written all the same, and what they hold is this test's subject.
    assert proc.returncode in (0, 1, 10) and "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads((out / "r.json").read_text())
    check_schema(doc, "doctor")
    if proc.returncode == 1:
        assert doc["verdict"]["status"] == "unmeasured", doc["verdict"]
    if proc.returncode != 1 or doc.get("conversion"):
        where = doc["conversion"]["where"]
        assert where.startswith("beside the model (<model>/..,"), doc["conversion"]
    secrets = [SECRET, MODEL_NAME, HOST]
    for name in ("r.json", "r.md", "r.html"):
        assert _leaks((out / name).read_text(), secrets) == [], name
    assert _snapshot(ck.root) == before


# ------------------------------------------------------------------------ conversion


def test_conversion_goes_beside_the_model_on_its_own_filesystem(tmp_path: Path) -> None:
    root = tmp_path / "models" / "m"
    root.mkdir(parents=True)
    folder, where = conversion_folder(root, 1 << 20)
    try:
        assert folder.parent == root.parent and folder.name.startswith(PREFIX)
        assert os.stat(folder).st_dev == os.stat(root).st_dev
        assert where.startswith(f"beside the model ({root.parent}, the model's filesystem: ")
        assert "another filesystem" not in where
    finally:
        shutil.rmtree(folder)
    assert list(root.iterdir()) == []  # nothing inside the model's folder


def test_a_model_folder_that_is_a_mount_point_is_not_compared_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's folder is a tmpfs mount: its parent is another filesystem, so the
    sample goes to the temp dir, which is labelled with its own filesystem (another
    tmpfs here), and nothing is written inside the model's folder."""
    model = tmp_path / "mnt-model"
    scratch = tmp_path / "mnt-tmp"
    with _tmpfs(model), _tmpfs(scratch):
        (model / "w.bin").write_bytes(b"x" * 1024)
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))
        folder, where = conversion_folder(model, 1 << 20)
        try:
            assert folder.parent == scratch
            assert os.stat(folder).st_dev != os.stat(model).st_dev
            assert where.startswith(
                f"in {scratch} (another filesystem: tmpfs at {scratch}, in RAM;"
                f" the model's: tmpfs at {model}, in RAM)"
            ), where
            assert f"its parent {tmp_path} is on another filesystem" in where
            assert "beside the model (" not in where
        finally:
            shutil.rmtree(folder)
        assert [p.name for p in model.iterdir()] == ["w.bin"]
        assert not list(tmp_path.glob(f"{PREFIX}*"))


def test_a_read_only_parent_on_the_models_filesystem_falls_back_truthfully(
    tmp_path: Path,
) -> None:
    """The parent is on the model's device but read-only: the temp dir, said to be
    another filesystem (or the model's, if it is), with why not beside the model."""
    top = tmp_path / "ro"
    with _tmpfs(top):
        root = top / "m"
        root.mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(top)], check=True)
        folder, where = conversion_folder(root, 1 << 20)
        try:
            tmp = Path(tempfile.gettempdir())
            assert folder.parent == tmp
            assert where.startswith(f"in {tmp} (another filesystem: ")
            assert "the model's: tmpfs at" in where
            assert f"{top}: Read-only file system" in where
        finally:
            shutil.rmtree(folder)


def test_doctor_on_a_model_that_is_a_mount_point_says_where_it_converted(
    tmp_path: Path,
) -> None:
    """End to end: the doctor's conversion and its advice text say the sample was not
    measured on the model's filesystem, and which filesystem it was."""
    root = tmp_path / "mounted"
    with _loop_ext4(root, tmp_path / "disk.img"):
        ck = synthesize(root, 8 << 20, shards=2, fmt="torch", seed=7)
        before = _snapshot(ck.root)
        report = run_doctor(
            resolve(str(ck.root)), DoctorOptions(budget_s=30, stacks=("safetensors",))
        )
        conv = report.conversion
        assert conv is not None and conv.where is not None, report.failures
        tmp = tempfile.gettempdir()
        assert conv.where.startswith(f"in {tmp} (another filesystem: "), conv.where
        assert f"the model's: ext4 at {root})" in conv.where
        assert "its folder is a mount point" in conv.where
        verdict = report.advice.verdict
        if conv.reason is None and verdict.status != "unmeasured":
            # (Unmeasured: a figure broke a bound under the suite's load; no fix printed.)
            ids = [r.id for r in report.advice.recommendations]
            rec = next(
                (r for r in report.advice.recommendations if r.id == "convert-to-safetensors"), None
            )
            assert rec is not None, (verdict.headline, ids, report.failures)
            assert "another filesystem" in rec.action
            assert "another filesystem" in to_markdown(json.loads(report.to_json()))
        assert conv.removed and not list(Path(tmp).glob(f"{PREFIX}{os.getpid()}-*"))
        assert _snapshot(ck.root) == before
        doc = json.loads(report.to_json())
        check_schema(doc, "doctor")
