"""The typed result every probe returns: a status, the reason when not ok, and raw numbers.

A probe that cannot measure (no permission, no sysfs, a filesystem without
O_DIRECT) says ``unavailable`` and why; one that fails unexpectedly says
``error`` with the exception; neither ever invents a number, and neither stops
the other probes.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")

#: Where a file's bytes really come from; one name per class, used in JSON and advice.
StorageClass = Literal[
    "local-block",  # a disk attached to this machine (NVMe, SATA, a local virtual disk)
    "network-block",  # a cloud volume posing as a local disk (EBS, PD, Azure, rbd, nbd, iSCSI)
    "network-fs",  # nfs, cifs/smb3, lustre, gpfs, beegfs, cephfs, glusterfs, virtiofs, 9p
    "fuse",  # a FUSE filesystem (object-store mounts, sshfs, rclone, ...)
    "wsl",  # a Windows drive seen from WSL (drvfs / 9p)
    "memory",  # tmpfs, ramfs
    "overlay",  # overlayfs (containers); resolved to its upper/lower storage where readable
    "unknown",
]
STORAGE_CLASSES: tuple[str, ...] = StorageClass.__args__  # type: ignore[attr-defined]


class Status(str, Enum):
    OK = "ok"
    UNAVAILABLE = "unavailable"
    ERROR = "error"
    #: Not run, on purpose (not needed for this target, or not asked for).
    SKIPPED = "skipped"


class Unavailable(Exception):
    """Raised inside a probe when it cannot measure here; the message says why."""


class Skipped(Exception):
    """Raised inside a probe that does not apply here (the message says why): the local
    disks of a model already on one."""


@dataclass(slots=True)
class ProbeResult(Generic[T]):
    """One probe's outcome. ``data`` is None unless ``status`` is ok."""

    name: str
    status: Status
    data: T | None = None
    reason: str | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_dict(self) -> dict[str, Any]:
        """``status``, ``reason`` and ``elapsed_s`` beside the data's own fields."""
        out: dict[str, Any] = {"status": self.status.value}
        if self.reason is not None:
            out["reason"] = self.reason
        out["elapsed_s"] = round(self.elapsed_s, 6)
        if self.data is not None:
            out.update(to_jsonable(self.data))
        return out


def to_jsonable(value: Any) -> Any:
    """Dataclasses, enums, tuples and nested results as plain JSON values."""
    if isinstance(value, ProbeResult):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def run_probe(name: str, probe: Callable[[], T]) -> ProbeResult[T]:
    """Run ``probe`` and wrap its outcome; never raises for a probe's own failure.

    ``Unavailable`` becomes status unavailable with its message, ``Skipped`` skipped; any
    other exception becomes status error naming the exception (set LOADSCOPE_DEBUG=1 to
    let it raise), so a broken probe is visible in the report instead of silently missing.
    """
    start = time.monotonic()
    try:
        data = probe()
    except Skipped as exc:
        return ProbeResult(name, Status.SKIPPED, reason=str(exc))
    except Unavailable as exc:
        elapsed = time.monotonic() - start
        return ProbeResult(name, Status.UNAVAILABLE, reason=str(exc), elapsed_s=elapsed)
    except Exception as exc:  # the one place probe failures are caught, and they are reported
        if os.environ.get("LOADSCOPE_DEBUG"):
            raise
        reason = f"{type(exc).__name__}: {exc}"
        return ProbeResult(name, Status.ERROR, reason=reason, elapsed_s=time.monotonic() - start)
    return ProbeResult(name, Status.OK, data=data, elapsed_s=time.monotonic() - start)
