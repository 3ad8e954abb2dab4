"""``loadscope.load_file``: a drop-in for safetensors ``load_file`` that loads cold files fast.

This is the library face of the ``auto`` strategy, and the code the ``api`` trial
runs, so the advice's number for it is a number for this function. Per file:

- the header is checked first (loadscope's format checks: one clear line naming the
  file for a corrupt header, a Git LFS pointer, an HTML page, a FIFO);
- a file the page cache already holds (~90%+, sampled) is memory-mapped exactly as
  ``safetensors.torch.load_file`` does: zero-copy, nothing is read;
- a cold file is read with many large requests in flight (O_DIRECT where the
  filesystem allows it, buffered ``pread`` threads otherwise) into one buffer, and
  the tensors are views on it — unless the file does not fit in the memory this
  process may use, in which case it is mapped instead (pages the kernel can drop).

Every choice and its reason go into a :class:`LoadRecord` (pass ``record=``) and to
the ``loadscope`` logger at INFO. Errors keep safetensors' exception family (a
missing file is a ``FileNotFoundError``, a bad header a ``SafetensorError``) and are
also :class:`~loadscope.base.errors.LoadscopeError`, with loadscope's one-line message.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.loaders import autoread, localranks
from loadscope.loaders.apichecks import (
    check_device,
    check_hints,
    check_knobs,
    check_local_ranks,
)
from loadscope.loaders.errors import UnsafePickle
from loadscope.loaders.loadrecord import FileChoice, LoadRecord, check_record, timed_call
from loadscope.loaders.requests import FileRequest, knob_value
from loadscope.loaders.safetensors_format import read_header
from loadscope.loaders.shmgroup import reap_stale
from loadscope.probes.pagecache import sampled_residency

if TYPE_CHECKING:
    import torch
    from typing_extensions import Unpack

log = logging.getLogger("loadscope")


# -- errors in the caller's exception family ----------------------------------------------------


def _safetensor_error() -> type[Exception]:
    try:
        from safetensors import SafetensorError
    except ImportError:  # an old safetensors: its errors were plain exceptions
        return Exception
    error: type[Exception] = SafetensorError
    return error


class LoadFileNotFound(LoadscopeError, FileNotFoundError):
    """A file (or an index's shard) that does not exist."""

    exit_code = ExitCode.NOT_FOUND


class LoadPermissionDenied(LoadscopeError, PermissionError):
    """A file this user may not read."""

    exit_code = ExitCode.PERMISSION


class LoadReadFailed(LoadscopeError, OSError):
    """The storage failed a read (EIO, a stall)."""

    exit_code = ExitCode.IO_ERROR


class LoadNotEnoughMemory(LoadscopeError, MemoryError):
    """The load would not fit in the memory this process may use."""

    exit_code = ExitCode.RESOURCES


class UnsafeCheckpoint(LoadscopeError, pickle.UnpicklingError):
    """A torch pickle that would run code: refused, nothing executed."""

    exit_code = ExitCode.UNSUPPORTED


_INVALID: list[type[LoadscopeError]] = []


def invalid_checkpoint_error() -> type[LoadscopeError]:
    """The class of "not a sound checkpoint" errors: a ``safetensors.SafetensorError``.

    Made on first use, so importing this module does not import safetensors (the
    commands that only read headers never load it)."""
    if not _INVALID:
        _INVALID.append(
            type(
                "InvalidCheckpoint",
                (LoadscopeError, _safetensor_error()),
                {
                    "__doc__": "Not a sound checkpoint: a corrupt header, an LFS pointer, a FIFO.",
                    "__module__": __name__,
                    "exit_code": ExitCode.CORRUPT,
                },
            )
        )
    return _INVALID[0]


def __getattr__(name: str) -> object:
    if name == "InvalidCheckpoint":
        return invalid_checkpoint_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def as_api_error(exc: LoadscopeError) -> LoadscopeError:
    """``exc`` re-made in the exception family a caller of safetensors/torch expects."""
    if isinstance(exc, LoadFileNotFound | LoadPermissionDenied | LoadReadFailed):
        return exc
    if isinstance(exc, invalid_checkpoint_error() | UnsafeCheckpoint | LoadNotEnoughMemory):
        return exc
    from loadscope.loaders.errors import UnsafePickle

    family: type[LoadscopeError]
    if isinstance(exc, UnsafePickle):
        family = UnsafeCheckpoint
    else:
        family = {
            ExitCode.NOT_FOUND: LoadFileNotFound,
            ExitCode.PERMISSION: LoadPermissionDenied,
            ExitCode.IO_ERROR: LoadReadFailed,
            ExitCode.RESOURCES: LoadNotEnoughMemory,
        }.get(exc.exit_code, invalid_checkpoint_error())
    made = family(exc.message, path=exc.path)
    made.exit_code = exc.exit_code
    return made


# -- load_file --------------------------------------------------------------------------------


#: What a load imports that ``import loadscope`` does not: a process's first load pays it.
LOAD_IMPORTS = ("torch", "safetensors.torch")


def import_for_load(record: LoadRecord | None) -> float:
    """Import :data:`LOAD_IMPORTS` not yet imported; the seconds it took (0 when none),
    added to ``record``'s ``import_seconds``, so that its wall time is the caller's."""
    missing = [name for name in LOAD_IMPORTS if name not in sys.modules]
    if not missing:
        return 0.0
    started = time.monotonic()
    for name in missing:
        importlib.import_module(name)
    seconds = time.monotonic() - started
    if record is not None:
        record.import_seconds += seconds
    log.info("imported %s in %.3g s (once per process)", ", ".join(missing), seconds)
    return seconds


#: Set once this process has removed what killed jobs left in shared memory.
_reaped: list[str | None] = []


def to_device(tensors: dict[str, torch.Tensor], device: str) -> dict[str, torch.Tensor]:
    if device == "cpu":
        return tensors
    return {name: t.to(device) for name, t in tensors.items()}


class LoadOptions(TypedDict, total=False):
    """What every loadscope load takes beside the model and the device, declared once for
    :func:`load_file`, ``loadscope.load_model`` and ``loadscope.from_pretrained``.

    ``threads``, ``block_bytes`` and ``direct`` ("auto", "yes", "no") are the ``auto``
    strategy's knobs for cold files (default 12 requests of 1 MiB in flight, O_DIRECT
    where allowed); ``hints`` are what a probe measured (``threads``, ``block_bytes``),
    used where no knob is given (a key that is not one of the knobs is refused);
    ``record`` (a :class:`LoadRecord`) learns what was chosen and why; ``local_ranks``
    ``(rank, world)`` names this process among the node's ranks that load the same files
    (default: from torchrun's or SLURM's environment); ``keep_cache`` reads buffered so
    the page cache keeps the file for a process that follows (default False).
    """

    threads: int | None
    block_bytes: int | None
    direct: str
    hints: dict[str, Any] | None
    record: LoadRecord | None
    local_ranks: tuple[int, int] | None
    keep_cache: bool


@dataclass(frozen=True, slots=True)
class CheckedOptions:
    """:class:`LoadOptions` checked (before any byte is read), as the loads use them."""

    knobs: dict[str, Any]
    device: str
    hints: dict[str, Any]
    record: LoadRecord | None
    local_ranks: tuple[int, int] | None
    keep_cache: bool


def check_options(
    options: Mapping[str, Any], caller: str, device: object = "cpu"
) -> CheckedOptions:
    """``options`` and ``device`` checked: a name that is not a :class:`LoadOptions` key is
    the TypeError Python raises for an unexpected keyword; a bad value a ValueError naming
    it. Imports torch for the first load (its time in ``record.import_seconds``)."""
    for name in options:
        if name not in LoadOptions.__annotations__:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")
    record = check_record(options.get("record"))
    import_for_load(record)
    if not _reaped:  # once per process: what ranks killed outright left in /dev/shm
        _reaped.append(reap_stale())
        if _reaped[0]:
            log.info("%s", _reaped[0])
    knobs = check_knobs(
        options.get("threads"), options.get("block_bytes"), options.get("direct", "auto")
    )
    return CheckedOptions(
        knobs,
        check_device(device),
        check_hints(options.get("hints")),
        record,
        check_local_ranks(options.get("local_ranks")),
        bool(options.get("keep_cache", False)),
    )


def load_file(
    path: str | os.PathLike[str], device: str = "cpu", **options: Unpack[LoadOptions]
) -> dict[str, torch.Tensor]:
    """Load a safetensors file into a ``{name: tensor}`` dict, as ``safetensors.torch.load_file``.

    Same keys, dtypes, shapes and bytes; zero-copy mapped when the file is resident;
    deep-parallel large reads when it is cold. ``options`` are :class:`LoadOptions`
    (the ``auto`` strategy's knobs for cold files, a probe's hints, a record, the local
    ranks, whether to keep the page cache). ``device`` is where the tensors land
    ("cpu", "cuda", "cuda:1"); to a CUDA device the file goes through the ``staged``
    path (large reads into a few pinned buffers, each copied to the device while the next
    is read; tensors made on the device, no CPU copy). Pass a :class:`LoadRecord` as
    ``record`` to learn what was chosen and why (and what a first call spent importing
    torch: ``import_seconds``).

    Several local ranks (torchrun's ``LOCAL_RANK``/``LOCAL_WORLD_SIZE``, SLURM's local
    ids, or ``local_ranks=(rank, world)``) that load the same cold file read it from
    storage once for the node: each reads its part into one shared-memory file that all
    map copy-on-write (``loaders/nodeshare.py``); a rank that cannot share (not every
    rank asked within seconds, too little ``/dev/shm``) loads alone and says why in the
    record. A single process's cold read leaves the page cache cold (O_DIRECT): a
    process that follows pays the full read again, unless ``keep_cache=True`` (buffered
    reads, which the page cache keeps).
    """
    with timed_call(options.get("record")):
        spath = os.fsdecode(os.fspath(path))
        checked = check_options(options, "load_file", device)
        return _load_file(spath, checked)


def _load_file(spath: str, checked: CheckedOptions) -> dict[str, torch.Tensor]:
    record, knobs, hinted, device = (
        checked.record,
        dict(checked.knobs),
        checked.hints,
        checked.device,
    )
    if not spath:
        raise LoadFileNotFound("an empty path names no file")
    if os.path.isdir(spath):
        raise invalid_checkpoint_error()(
            "is a directory: loadscope.load_model(path) loads a model folder", path=spath
        )
    try:
        header = read_header(spath)
    except LoadscopeError as exc:
        raise as_api_error(exc) from None
    request = FileRequest(spath, header.file_size, "safetensors")
    if device.startswith("cuda"):
        return _loadto_device(request, device, knobs, record)
    if checked.keep_cache:
        knobs["direct"] = "no"  # buffered: the page cache keeps what was read
    shared = _node_shared(request, header, knobs, hinted, checked.local_ranks, record)
    if shared is not None:
        return shared
    read = autoread.settings(knobs, hinted)
    started = time.monotonic()
    try:
        choice = autoread.choose(request, read)
        tensors = dict(autoread.load(request, choice, read))
    except LoadscopeError as exc:
        raise as_api_error(exc) from None
    except FileNotFoundError:
        raise LoadFileNotFound("disappeared while it was loaded", path=spath) from None
    except PermissionError as exc:
        raise LoadPermissionDenied(f"permission denied ({exc.strerror})", path=spath) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise LoadReadFailed(f"read failed: {reason} (errno {exc.errno})", path=spath) from None
    seconds = time.monotonic() - started
    made = FileChoice(
        path=request.path,
        strategy=choice.strategy,
        reason=choice.reason,
        size_bytes=request.size_bytes,
        seconds=seconds,
        residency=choice.residency,
        threads=choice.threads,
        block_bytes=choice.block_bytes,
    )
    if record is not None:
        record.files.append(made)
    log.info("%s: %s (%s) in %.3g s", spath, made.strategy, made.reason, seconds)
    return to_device(tensors, device)


def _node_shared(
    request: FileRequest,
    header: Any,
    knobs: dict[str, Any],
    hints: dict[str, Any],
    local_ranks: tuple[int, int] | None,
    record: LoadRecord | None,
) -> dict[str, torch.Tensor] | None:
    """The file read once for the node (``loaders/nodeshare.py``) when several local ranks
    load it cold; None to load it alone (one process, a resident file, or why not, said)."""
    ranks = localranks.local_ranks(local_ranks)
    if ranks is None:
        return None
    # Imported here, where there are ranks to share with: a single process's first load
    # never pays for the node-shared read (3.6 ms of its imports).
    from loadscope.loaders import nodeshare

    fraction = sampled_residency(request.path, windows=16)
    if fraction is not None and fraction >= autoread.RESIDENT_ENOUGH:
        return None  # mapped from the page cache: one copy for the node already
    threads, block, direct = nodeshare.settings(request.path, knobs, hints)
    try:
        tensors, share = nodeshare.shared_tensors(
            request.path, header, ranks, threads=threads, block_bytes=block, direct=direct
        )
    except nodeshare.NotShared as exc:
        _not_shared(request.path, str(exc), record)
        return None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise LoadReadFailed(
            f"read failed: {reason} (errno {exc.errno})", path=request.path
        ) from None
    others = "" if share.read_bytes < share.size_bytes else " (no other rank read any of it)"
    choice = FileChoice(
        path=request.path,
        strategy="node-shared",
        reason=f"local rank {ranks.rank} of {ranks.world}: read"
        f" {share.read_bytes / 2**20:.1f} MiB of {share.size_bytes / 2**20:.1f} MiB{others}"
        " into shared memory, all ranks map it copy-on-write (storage read once per node)",
        size_bytes=request.size_bytes,
        seconds=share.seconds,
        residency=fraction,
        threads=threads,
        block_bytes=block,
        read_bytes=share.read_bytes,
    )
    if record is not None:
        record.files.append(choice)
    log.info("%s: %s", request.path, choice.reason)
    return tensors


#: Not empty once this process has said at WARNING that a load fell back from node sharing (the
#: first time; later ones at INFO: a job's ranks would repeat it for every file).
_warned: set[str] = set()


def _not_shared(path: str, reason: str, record: LoadRecord | None) -> None:
    """Why ``path`` is loaded alone though local ranks are set: in the record, and on the
    logger (at WARNING the first time in this process; a file too small to share, INFO)."""
    line = f"{path}: not shared across local ranks: {reason}: loaded alone"
    if record is not None:
        record.notes.append(line)
    if _warned or "too small" in reason:
        log.info("%s", line)
    else:
        _warned.add(line)
        log.warning("%s", line)


def staging_device(device: str) -> Any:
    """The copy engine for ``device`` (``loaders/staged.py``'s CUDA device; tests give a
    fake one here)."""
    from loadscope.loaders.staged import CudaDevice

    return CudaDevice(device)


def _loadto_device(
    request: FileRequest, device: str, knobs: dict[str, Any], record: LoadRecord | None
) -> dict[str, torch.Tensor]:
    """One file straight onto an accelerator through the ``staged`` path: large preads
    into a bounded ring of pinned host buffers, each copied to the device while the next
    is read, tensors created on the device (never a whole CPU copy, never a pageable
    ``.to()``). ``threads`` and ``block_bytes`` are the readers' when given."""
    from loadscope.loaders.staged import KNOBS, NAME, StagingError, staged_load

    given = {k: v for k, v in knobs.items() if k in ("threads", "block_bytes")}
    slots, slot_bytes, threads, block = (
        knob_value(KNOBS, name, given) for name in ("slots", "slot_bytes", "threads", "block_bytes")
    )
    notes: dict[str, Any] = {}
    started = time.monotonic()
    try:
        tensors = dict(
            staged_load(
                [request],
                staging_device(device),
                slots=slots,
                slot_bytes=slot_bytes,
                threads=threads,
                block_bytes=block,
                notes=notes,
            )
        )
    except LoadscopeError as exc:
        raise as_api_error(exc) from None
    except FileNotFoundError:
        raise LoadFileNotFound("disappeared while it was loaded", path=request.path) from None
    except PermissionError as exc:
        raise LoadPermissionDenied(
            f"permission denied ({exc.strerror})", path=request.path
        ) from None
    except (OSError, StagingError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise LoadReadFailed(f"staging to {device} failed: {reason}", path=request.path) from None
    seconds = time.monotonic() - started
    choice = FileChoice(
        path=request.path,
        strategy=NAME,
        reason=f"to {device}: {threads} x {block >> 10} KiB reads into {slots} pinned"
        f" {slot_bytes >> 20} MiB buffers, copied while the next is read",
        size_bytes=request.size_bytes,
        seconds=seconds,
        threads=threads,
        block_bytes=block,
    )
    if record is not None:
        record.files.append(choice)
    log.info("%s: staged to %s in %.3g s", request.path, device, seconds)
    return tensors


# -- torch checkpoints (for load_model) ---------------------------------------------------------


def load_torch_file(
    path: str | os.PathLike[str], device: str = "cpu", *, record: LoadRecord | None = None
) -> dict[str, torch.Tensor]:
    """``torch.load(path, weights_only=True, mmap=True)`` flattened to ``{name: tensor}``.

    Checked first like every torch file loadscope touches: a pickle whose opcodes import
    anything a weights-only load refuses is refused without being unpickled, and torch
    older than 2.6 is refused (its weights-only loader could run code).
    """
    from loadscope.loaders.torch_format import read_torch_info
    from loadscope.loaders.torch_safety import refuse_unsafe_torch
    from loadscope.loaders.torchload import torch_load

    spath = os.fspath(path)
    record = check_record(record)
    import_for_load(record)
    device = check_device(device)
    started = time.monotonic()
    try:
        info = read_torch_info(spath)
        if info.unsafe_globals:
            raise UnsafePickle(
                f"its pickle imports {info.unsafe_globals[0]}, which a weights-only load"
                " refuses: unpickling it would run code; refusing it, nothing was executed",
                path=spath,
            )
        refuse_unsafe_torch()
        tensors = dict(torch_load(spath, "cpu", use_mmap=True))
    except LoadscopeError as exc:
        raise as_api_error(exc) from None
    seconds = time.monotonic() - started
    choice = FileChoice(
        spath, "torch.load", "weights_only=True, mmap=True", info.file_size, seconds
    )
    if record is not None:
        record.files.append(choice)
    log.info("%s: torch.load(weights_only=True, mmap=True) in %.3g s", spath, seconds)
    return to_device(tensors, device)
