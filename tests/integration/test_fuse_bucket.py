"""A bucket mounted through FUSE (issue 51, item 5): ``rclone mount`` (Debian's rclone) over
the test bed's S3-compatible store (``loadscope/tools/objstore.py``: 20 ms to each first
byte, 50 MB/s per connection), as users mount buckets with mountpoint-s3, gcsfuse or s3fs.

The doctor names it as an object store behind FUSE with its bound from the probe's
figures, keeps to its budget, and leaves out what cannot help there: this mount (rclone
without its VFS cache) keeps no pages in the page cache, so nothing is warmed and
``loadscope warm`` says so in one line."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadscope.advice.objstore_rules import load_model_code
from loadscope.probes.pagecache import keeps_pages
from loadscope.tools.emulator import fuse_unavailable_reason
from loadscope.tools.objstore import ObjectStore, StoreSettings
from loadscope.tools.synth import synthesize
from tests.conftest import run_here

BUDGET_S = 30.0

pytestmark = pytest.mark.skipif(
    shutil.which("rclone") is None or fuse_unavailable_reason() is not None,
    reason=f"rclone or FUSE unavailable: {fuse_unavailable_reason() or 'no rclone on PATH'}"
    " (scripts/setup --dev installs rclone as root)",
)


@pytest.fixture(scope="module")
def mounted(bed_mount: tuple[Path, str]) -> Path:
    """The model's folder on the mount."""
    return bed_mount[0]


@pytest.fixture(scope="module")
def bed_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The bucket ``models`` (a 32 MiB model in two shards under ``llm/``) through
    ``rclone mount``, read-only, and the store's URL; unmounted and the store stopped
    afterwards."""
    root = tmp_path_factory.mktemp("fuse bucket")
    served, mnt = root / "served", root / "mnt"
    synthesize(served / "models" / "llm", 32 << 20, seed=7, shards=2)
    mnt.mkdir()
    settings = StoreSettings(first_byte_s=0.02, per_connection_bps=50e6, total_bps=400e6)
    with ObjectStore(served, settings) as store:
        conf = root / "rclone.conf"
        conf.write_text(
            "[bed]\ntype = s3\nprovider = Other\n"
            f"endpoint = {store.url}\naccess_key_id = bed\nsecret_access_key = bed\n"
            "force_path_style = true\n"
        )
        # rclone refuses a custom CA bundle with its own transport: none is needed here.
        env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
        daemon = subprocess.Popen(
            ["rclone", "--config", str(conf), "mount", "bed:models", str(mnt), "--read-only",
             "--vfs-cache-mode", "off"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 20
            while not os.path.ismount(mnt):
                if daemon.poll() is not None or time.monotonic() > deadline:
                    err = daemon.stderr.read() if daemon.stderr else ""
                    pytest.skip(f"rclone mount did not come up: {err.strip()[-300:]}")
                time.sleep(0.1)
            yield mnt / "llm", store.url
        finally:
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, check=False)
            daemon.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.wait(10)
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
    assert not os.path.ismount(mnt)


def test_the_mount_keeps_no_pages_and_warm_says_so_in_one_line(mounted: Path) -> None:
    shard = next(mounted.glob("*.safetensors"))
    assert keeps_pages(shard) is False
    warm = [sys.executable, "-m", "loadscope", "warm", str(mounted), "--quiet"]
    done = run_here(warm, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "keeps no pages in the page cache" in lines[0], done.stderr
    assert "loadscope copy" in lines[0]


def test_the_doctor_names_the_bucket_and_its_bound_within_its_budget(
    bed_mount: tuple[Path, str],
) -> None:
    """...and with ``--bucket`` (the bucket the mount serves, its credentials in the
    environment) it also times reading it directly, against the mount's own load."""
    mounted, url = bed_mount
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "bed", "AWS_SECRET_ACCESS_KEY": "bed"}
    done = run_here(
        [sys.executable, "-m", "loadscope", "doctor", str(mounted), "--budget", f"{BUDGET_S:g}",
         "--stack", "safetensors", "--bucket", "s3://models/llm", "--json", "-", "--quiet"],
        timeout=180, env=env,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode in (0, 10), done.stderr[-2000:]
    doc = json.loads(done.stdout)
    headline = doc["verdict"]["headline"]
    assert doc["verdict"]["status"] == "problem", (headline, doc["failures"])
    assert headline.startswith("a remote or cloud store through rclone mount behind FUSE, bound"), (
        headline
    )
    assert "request latency" in headline or "connection to the store" in headline, headline
    # Its fix has a number measured here.
    top = doc["recommendations"][0]
    assert top["measured"] and top["expected_speedup"] >= 1.5, top
    # The probe found that the mount keeps no pages, and its lines say what that means.
    from loadscope.probes.pagecache import residency_lines

    assert doc["probe"]["files"][0]["keeps_pages"] is False
    said = dict(residency_lines(doc["probe"]["files"])[1:])
    assert said["page cache"].startswith("not kept by this mount"), said
    # Nothing warmed on a mount that keeps no pages: said, not run.
    assert any(f.startswith("warm trials: not run") for f in doc["failures"]), doc["failures"]
    ran = {(t["strategy"], t["cache"]) for t in doc["bench"]["trials"]}
    assert not any(cache == "warm" for _, cache in ran) and ("prewarm", "cold") not in ran
    # The bucket read directly: its fix with loadscope.load_model's number against the
    # mount's load_file (its code run as printed in test_object_store.py), or what it found.
    direct = [r for r in doc["recommendations"] if r["id"] == "read-bucket-directly"]
    if direct:
        assert direct[0]["measured"] and direct[0]["expected_speedup"] >= 1.2, direct[0]
        code = {s["stack"]: s["code"] for s in direct[0]["snippets"]}
        assert code["safetensors"] == load_model_code("s3://models/llm")
        assert code["vllm"].endswith("vllm serve s3://models/llm --load-format runai_streamer")
    else:
        said = doc["notes"] + doc["failures"]
        assert any(x.startswith(("reading the bucket directly", "--bucket")) for x in said), said
    # Within its budget (the probes, trials and checks after them), with some slack for
    # the interpreter's start and the report.
    assert took < 1.25 * BUDGET_S + 5, (took, headline)
