"""``loadscope demo``: see the slow-network-disk pathology (and its fix) without owning a slow disk.

It builds a synthetic checkpoint on local disk, serves it through the emulated
slow disk when FUSE is available (else says why and uses the local disk) — or,
with ``block``, as a network block volume (ext4 on a loop device over it) — and
runs the full diagnosis on it (``doctor``: probes, trials, advice). Everything
it creates is removed afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from loadscope.base.units import format_bytes
from loadscope.diagnosis.doctor import DoctorOptions, DoctorReport, run_doctor
from loadscope.engine.bench import Listener
from loadscope.model.targets import resolve, scratch_dir
from loadscope.tools.blockemu import block_unavailable_reason, emulated_block_disk
from loadscope.tools.emulator import EmulatorSettings, emulated_disk, fuse_unavailable_reason
from loadscope.tools.synth import synthesize


@dataclass(frozen=True, slots=True)
class DemoOptions:
    size_bytes: int = 512 << 20
    settings: EmulatorSettings = field(
        default_factory=lambda: EmulatorSettings(latency_s=0.005, readahead_kb=128)
    )
    #: For the whole diagnosis (probes, trials, advice); sampled to fit.
    budget_s: float = 40.0
    work_dir: str | None = None
    #: Serve it as a network block volume (ext4 on a loop device over the slow disk).
    block: bool = False
    #: The user's stacks (``--stack``): the others' routes are not timed, as in doctor.
    stacks: tuple[str, ...] = ()


@contextlib.contextmanager
def _model_dir(options: DemoOptions, out: TextIO, warn: TextIO) -> Iterator[Path]:
    parent = options.work_dir or (
        "/var/tmp" if Path("/var/tmp").is_dir() else tempfile.gettempdir()
    )
    # The block volume's image holds a second copy of the model.
    need = int(options.size_bytes * (2.1 if options.block else 1.02)) + (32 << 20)
    what = f"the demo's {format_bytes(options.size_bytes)} checkpoint"
    work = scratch_dir("loadscope-demo-", Path(parent), need, what, "use --size or --work-dir")
    try:
        out.write(
            f"building a {format_bytes(options.size_bytes)} synthetic checkpoint in {work} ...\n"
        )
        synthesize(work / "model", options.size_bytes)
        reason = block_unavailable_reason() if options.block else fuse_unavailable_reason()
        if reason is not None:
            warn.write(
                f"no emulated slow disk here ({reason});\n"
                "diagnosing the local copy instead: expect the 'nothing is wrong here' picture.\n\n"
            )
            yield work / "model"
            return
        s = options.settings
        if options.block:
            out.write(
                f"serving it as an emulated network block volume: ext4 on a loop device whose"
                f" image is on a disk answering in {s.latency_s * 1e3:g} ms per request,"
                f" readahead {s.readahead_kb} KiB (findmnt shows a plain ext4, as for an EBS or"
                " Persistent Disk volume).\n\n"
            )
            with emulated_block_disk(work / "model", work / "mnt", s) as volume:
                yield volume.path
            return
        out.write(
            f"serving it through an emulated network disk: {s.latency_s * 1e3:g} ms per read"
            f" request, readahead {s.readahead_kb} KiB, {s.max_background} background requests\n"
            "(a FUSE passthrough; on a real cloud volume or NFS mount the same numbers come"
            " from the network).\n\n"
        )
        with emulated_disk(work / "model", work / "mnt", s) as disk:
            yield disk.path
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_demo(
    options: DemoOptions,
    say: TextIO,
    *,
    listener: Listener | None = None,
    progress: Callable[[str], None] | None = None,
    warn: TextIO | None = None,
) -> DoctorReport:
    """Build, mount, diagnose (probes, trials, advice), clean up; what it builds and serves
    is said on ``say`` (stderr: the answer is the caller's to print), why it could not
    serve it from the slow disk on ``warn`` (default ``say``: it changes the answer, so a
    quiet caller still shows it), the diagnosis's steps and trials go to ``progress`` and
    ``listener``."""
    with _model_dir(options, say, warn or say) as model:
        return run_doctor(
            resolve(str(model)),
            DoctorOptions(budget_s=options.budget_s, stacks=options.stacks),
            listener=listener,
            progress=progress,
        )
