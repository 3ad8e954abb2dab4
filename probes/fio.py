"""fio beside loadscope's own probe: the same measurements as fio jobs a storage team runs.

For each of the probe's measurements — cold random 4 KiB latency, sequential reads at
every block size it swept, the best parallel-reader point — :func:`jobs_for` gives the fio
job that reproduces it on the model's own (largest) file: read-only, bounded in bytes
and seconds, O_DIRECT where the probe used it (else the page cache is invalidated
first, as the probe evicts). :func:`command_line` is what every report prints, so a
vendor can run exactly that; :func:`run_job` runs it (``probe --fio``) and parses
fio's JSON output. Never writes: every job carries ``--readonly``.

May import: ``loadscope.base``.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from loadscope.base.units import format_bytes
from loadscope.probes.result import Unavailable

#: Bounds of each job, so a fio run fits the probe's budget on slow storage.
JOB_SECONDS = 5
SEQ_MAX_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class FioJob:
    """One fio job: what it reproduces and its arguments."""

    #: "latency", "sequential" or "parallel": which probe measurement it stands beside.
    measures: str
    args: tuple[str, ...]
    #: What fio's JSON gives for it: "p50_us" or "bytes_per_s".
    metric: str
    #: The request size of a sequential job (one per block size the probe swept).
    block_bytes: int | None = None

    @property
    def label(self) -> str:
        """How a report names it: "latency", "sequential 16 MiB", "parallel"."""
        if self.block_bytes is None:
            return self.measures
        return f"{self.measures} {format_bytes(self.block_bytes)}"


@dataclass(frozen=True, slots=True)
class FioMeasure:
    job: FioJob
    value: float
    #: fio's own numbers worth keeping (bandwidth, IOPS, latency percentiles).
    detail: dict[str, float]


def unavailable_reason() -> str | None:
    return None if shutil.which("fio") else "fio is not installed (Debian: apt-get install fio)"


def _size(n: int) -> str:
    """fio's spelling of a byte count (its k/m/g are powers of 1024)."""
    for unit, shift in (("g", 30), ("m", 20), ("k", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _common_args(path: str, *, direct: bool) -> tuple[str, ...]:
    """What every job shares: the file, read-only, synchronous reads, a cold page cache."""
    return (
        f"--filename={path}",
        "--readonly",
        "--ioengine=psync",
        f"--direct={1 if direct else 0}",
        "--invalidate=1",
        "--output-format=json",
    )


def _job_args(name: str, common: Sequence[str], *specific: str) -> tuple[str, ...]:
    """One job's command: its name, the shared arguments, its own, and the time bound."""
    return ("fio", f"--name=loadscope-{name}", *common, *specific, f"--runtime={JOB_SECONDS}")


def _latency_job(common: Sequence[str], size: int, samples: int) -> FioJob:
    """Cold 4 KiB reads, each in a region of its own (as many as the file has, at most)."""
    regions = max(1, size >> 20)
    return FioJob(
        "latency",
        _job_args(
            "latency",
            common,
            "--rw=randread",
            "--bs=4k",
            "--blockalign=1m",
            f"--number_ios={max(1, min(samples, regions))}",
            "--iodepth=1",
            "--numjobs=1",
        ),
        "p50_us",
    )


def _sequential_job(common: Sequence[str], size: int, block: int) -> FioJob:
    """One reader through the file (at most :data:`SEQ_MAX_BYTES`) in ``block``-byte reads."""
    return FioJob(
        "sequential",
        _job_args(
            f"sequential-{_size(block)}",
            common,
            "--rw=read",
            f"--bs={_size(block)}",
            "--iodepth=1",
            "--numjobs=1",
            f"--size={_size(max(block, min(size, SEQ_MAX_BYTES) // block * block))}",
        ),
        "bytes_per_s",
        block,
    )


def _parallel_job(common: Sequence[str], size: int, readers: int, par_block: int) -> FioJob:
    """``readers`` readers, each through its own share of the file, reported as one."""
    share = max(par_block, min(size, SEQ_MAX_BYTES) // max(1, readers) // par_block * par_block)
    return FioJob(
        "parallel",
        _job_args(
            "parallel",
            common,
            "--rw=read",
            f"--bs={_size(par_block)}",
            "--iodepth=1",
            f"--numjobs={readers}",
            f"--size={_size(share)}",
            f"--offset_increment={_size(share)}",
            "--group_reporting",
        ),
        "bytes_per_s",
    )


def jobs_for(
    path: str,
    size: int,
    *,
    direct: bool,
    seq_blocks: Sequence[int],
    readers: int,
    par_block: int,
    latency_samples: int = 256,
) -> list[FioJob]:
    """The fio jobs that reproduce the probe's measurements on ``path`` (``size`` bytes).

    The latency job reads as the probe does: each 4 KiB read in a different 1 MiB region
    (``--blockalign=1m`` with fio's random map: no region twice, so no read is served by
    the previous one's read-around), as many reads as the probe took."""
    common = _common_args(os.path.abspath(path), direct=direct)
    return [
        _latency_job(common, size, latency_samples),
        *(_sequential_job(common, size, block) for block in sorted(set(seq_blocks))),
        _parallel_job(common, size, readers, par_block),
    ]


def command_line(job: FioJob) -> str:
    """The job as one shell-quoted line (without the JSON output option, for a person)."""
    return shlex.join(a for a in job.args if a != "--output-format=json")


def run_job(job: FioJob, timeout_s: float = JOB_SECONDS * 4 + 10) -> FioMeasure:
    """Run ``job`` and read its figure from fio's JSON; Unavailable saying why otherwise."""
    if why := unavailable_reason():
        raise Unavailable(why)
    try:
        proc = subprocess.run(
            list(job.args), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise Unavailable(f"fio {job.label}: no result in {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        raise Unavailable(f"fio {job.label} failed: {tail[:200]}")
    try:
        # fio may print notes before its JSON: start at the first brace.
        doc = json.loads(proc.stdout[proc.stdout.index("{") :])
        read = doc["jobs"][0]["read"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise Unavailable(f"fio {job.label}: output is not fio's JSON") from None
    clat = read.get("clat_ns") or {}
    pct = clat.get("percentile") or {}
    detail = {
        "bytes_per_s": float(read.get("bw_bytes") or 0.0),
        "iops": float(read.get("iops") or 0.0),
        "clat_mean_us": float(clat.get("mean") or 0.0) / 1e3,
    }
    if "50.000000" in pct:
        detail["p50_us"] = float(pct["50.000000"]) / 1e3
    if "99.000000" in pct:
        detail["p99_us"] = float(pct["99.000000"]) / 1e3
    if job.metric not in detail or detail[job.metric] <= 0:
        raise Unavailable(f"fio {job.label}: no {job.metric} in its output")
    return FioMeasure(job, detail[job.metric], detail)
