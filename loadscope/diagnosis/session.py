"""One diagnosis from a target spec to a report: what the TUI drives, in the engine.

It opens the target (building a synthetic one when asked, removed afterwards),
optionally serves it through the emulated slow disk, and runs ``doctor`` with
the caller's listeners and cancel event. Everything it created is gone when it
returns or raises.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loadscope.base.tempdirs import owned_tempdir
from loadscope.diagnosis.doctor import DEFAULT_BUDGET_S, DoctorOptions, DoctorReport, run_doctor
from loadscope.engine.bench import Listener
from loadscope.engine.probing import ProbeReport
from loadscope.model.inspection import open_checked
from loadscope.model.targets import Target, resolve
from loadscope.tools.emulator import EmulatorSettings, emulated_disk


@dataclass(frozen=True, slots=True)
class SessionRequest:
    spec: str
    budget_s: float = DEFAULT_BUDGET_S
    #: Serve the model through the emulated slow disk with these settings (needs FUSE).
    emulate: EmulatorSettings | None = None
    synth_dir: str | None = None
    #: Where tensors land ("auto": the GPU when usable) and multi-rank trials (None: auto).
    device: str = "auto"
    ranks: int | None = None
    #: The user's stacks (``--stack``): only their routes' trials run (empty: every stack's).
    stacks: tuple[str, ...] = ()


@contextlib.contextmanager
def _served(target: Target, emulate: EmulatorSettings | None) -> Iterator[Target]:
    if emulate is None:
        yield target
        return
    # /var/tmp, as the demo: on disk, where /tmp may be a tmpfs that hides the slowness.
    parent = "/var/tmp" if Path("/var/tmp").is_dir() else None
    work = owned_tempdir("loadscope-emulate-", parent)
    try:
        with emulated_disk(target.root, work / "mnt", emulate) as disk:
            # What the user named, inside the mount: the one file, or the index named
            # (a folder with both formats follows the safetensors index first).
            inside = Path(disk.path)
            if target.kind == "file":
                inside = inside / target.files[0].path.name
            elif target.index is not None:
                inside = inside / target.index.name
            # The user's spec and folder travel with the mount: the report names the
            # model, not a mountpoint that is gone once the run ends.
            yield dataclasses.replace(
                resolve(str(inside)), spec=target.spec, served_from=target.root
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def diagnose(
    request: SessionRequest,
    *,
    listener: Listener | None = None,
    on_probes: Callable[[ProbeReport], None] | None = None,
    progress: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
) -> DoctorReport:
    say = progress or (lambda _m: None)
    say("opening the model")
    # Every header first: a hostile or broken file is one line before any probe or worker.
    with open_checked(request.spec, synth_dir=request.synth_dir, loads=True) as target:
        if request.emulate is not None:
            say("mounting the emulated network disk")
        with _served(target, request.emulate) as served:
            options = DoctorOptions(
                budget_s=request.budget_s,
                device=request.device,
                ranks=request.ranks,
                stacks=request.stacks,
                cancel=cancel,
            )
            return run_doctor(
                served, options, listener=listener, on_probes=on_probes, progress=progress
            )
