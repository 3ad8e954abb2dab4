"""One torch pickle converted to safetensors, in a directory loadscope made and removes,
so that "convert to safetensors" carries a measured number.

The user's file is only read: ``torch.load(weights_only=True, mmap=True)`` in a child
process (no code in the pickle runs, a crash or a kill stays there), ``save_file`` into
``.loadscope-convert-<pid>-*`` beside the model when that folder is on the model's
filesystem (same ``st_dev``: the converted file is measured on the storage the user
would keep it on) and writable, else in the temp dir, and said which filesystem that
is (read from the mount table: "another filesystem: tmpfs at /tmp, in RAM"). A
directory left by a run that was killed (its pid gone) is removed by the next one.

May import: ``loadscope.model``, ``loadscope.loaders``, ``loadscope.probes``,
``loadscope.base``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadscope.base.errors import LoadscopeError
from loadscope.base.processes import start_session
from loadscope.model.targets import WeightFile
from loadscope.probes import mounts
from loadscope.probes.result import Unavailable

PREFIX = ".loadscope-convert-"


#: Why a checkpoint cannot be converted as it is (a training checkpoint, a whole model):
#: said by the converting child, read by the advice.
NOT_A_STATE_DICT = "it is not a flat state dict of tensors (name -> tensor)"


class ConversionFailed(LoadscopeError):
    """The sample could not be converted (not a flat state dict, no room, a timeout)."""


@dataclass(frozen=True, slots=True)
class Converted:
    """The converted file, where its folder is, why there, and what converting took."""

    file: WeightFile
    folder: Path
    where: str
    seconds: float


@dataclass(slots=True)
class ConversionTrial:
    """What converting a sample of a pickle-only model measured (a doctor report's
    ``conversion``): the same tensors loaded from the pickle and from the converted
    file, interleaved, cold and warm; ``reason`` when it was not measured."""

    source: str
    sample_bytes: int
    where: str | None = None
    removed: bool = False
    convert_seconds: float | None = None
    pickle_cold_s: float | None = None
    safetensors_cold_s: float | None = None
    pickle_warm_s: float | None = None
    safetensors_warm_s: float | None = None
    trial_ids: list[int] = field(default_factory=list)
    verified: bool = False
    reason: str | None = None

    @property
    def speedup(self) -> float | None:
        """torch.load's cold time over load_file's on the converted file."""
        if self.pickle_cold_s and self.safetensors_cold_s:
            return self.pickle_cold_s / self.safetensors_cold_s
        return None


def conversion_folder(model_root: Path, need_bytes: int) -> tuple[Path, str]:
    """A new folder for the converted sample, with room for ``need_bytes``, and where it is.

    On the model's filesystem when it can be: beside the model (its parent) when the
    parent is on the model's device (``st_dev``); a model folder that is itself a mount
    point (a FUSE or NFS mount) has its parent on another filesystem, and nothing is ever
    written inside the user's model folder. Else in the temp dir, labelled with the
    filesystem it is really on ("another filesystem: tmpfs at /tmp, in RAM").
    """
    table = _mount_table()
    try:
        model_dev = os.stat(model_root).st_dev
    except OSError as exc:
        raise ConversionFailed(
            f"cannot stat the model's folder: {exc.strerror or exc}", path=model_root
        ) from None
    model_fs = _filesystem(model_root, table)
    tried: list[str] = []
    candidates: list[tuple[Path, str]] = []
    parent = Path(os.path.abspath(model_root)).parent  # "." said nothing of where
    try:
        same = os.stat(parent).st_dev == model_dev
    except OSError as exc:
        tried.append(f"beside the model: {parent}: {exc.strerror or exc}")
    else:
        if same:
            candidates.append(
                (parent, f"beside the model ({parent}, the model's filesystem: {model_fs})")
            )
        else:
            tried.append(
                f"not beside the model: its folder is a mount point, its parent {parent}"
                f" is on another filesystem ({_filesystem(parent, table)})"
            )
    tmp = Path(tempfile.gettempdir())
    if tmp != parent or not candidates:
        try:
            on_model_fs = os.stat(tmp).st_dev == model_dev
        except OSError:
            on_model_fs = False
        where = (
            f"in {tmp} (the model's filesystem: {model_fs})"
            if on_model_fs
            else f"in {tmp} (another filesystem: {_filesystem(tmp, table)};"
            f" the model's: {model_fs})"
        )
        candidates.append((tmp, where))
    for base, where in candidates:
        _reap(base)
        try:
            if shutil.disk_usage(base).free < need_bytes * 1.1:
                tried.append(f"{base}: not enough free space")
                continue
            folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))
        except OSError as exc:
            tried.append(f"{base}: {exc.strerror or exc}")
            continue
        return folder, "; ".join([where, *tried])
    raise ConversionFailed("no folder to convert a sample into: " + "; ".join(tried))


def _mount_table() -> list[mounts.Mount]:
    try:
        return mounts.read_mountinfo()
    except Unavailable:
        return []


def _filesystem(path: Path, table: list[mounts.Mount]) -> str:
    """The filesystem under ``path`` as "tmpfs at /tmp, in RAM", "ext4 at /"."""
    try:
        mount = mounts.mount_of(path, table)
    except Unavailable:
        return "an unknown filesystem"
    memory = ", in RAM" if mount.fstype in mounts.MEMORY_FILESYSTEMS else ""
    return f"{mount.full_fstype} at {mount.mount_point}{memory}"


def _reap(base: Path) -> None:
    """Remove conversion folders whose run (the pid in the name) no longer exists."""
    with contextlib.suppress(OSError):
        for entry in base.glob(f"{PREFIX}*"):
            pid = entry.name[len(PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(entry, ignore_errors=True)


def convert(source: WeightFile, folder: Path, timeout_s: float) -> tuple[WeightFile, float]:
    """``source`` as ``folder/model.safetensors``, converted in a child process within
    ``timeout_s``; returns the new file and the seconds the conversion took."""
    dest = folder / "model.safetensors"
    began = time.monotonic()
    proc = start_session(
        [sys.executable, "-m", "loadscope.actions.convert", str(source.path), str(dest)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise ConversionFailed(
            f"converting took over {timeout_s:.0f} s", path=source.path
        ) from None
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode != 0:
        last = next((line for line in reversed(err.splitlines()) if line.strip()), "")
        raise ConversionFailed(
            f"could not convert it: {last.strip()[:200] or f'exit {proc.returncode}'}",
            path=source.path,
        )
    return WeightFile(dest, dest.stat().st_size, "safetensors"), time.monotonic() - began


def _main(src: str, dest: str) -> int:
    import torch
    from safetensors.torch import save_file

    state = torch.load(src, map_location="cpu", weights_only=True, mmap=True)
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        print(NOT_A_STATE_DICT, file=sys.stderr)
        return 1
    seen: set[tuple[int, int]] = set()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        # Tied entries share storage, which safetensors refuses: each gets its own copy,
        # as a converted checkpoint holds them.
        key = (tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())
        shared = key in seen and tensor.numel() > 0
        seen.add(key)
        out[name] = tensor.clone() if shared else tensor.contiguous()
    save_file(out, dest)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1], sys.argv[2]))
