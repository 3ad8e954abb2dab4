"""Turn what a user types into the list of weight files to diagnose.

Accepted targets, tried in this order:

* ``synthetic:SIZE[,shards=N][,format=safetensors|torch|both][,seed=S]`` — a synthetic
  checkpoint built in a temporary directory and removed afterwards;
* an existing path: a ``.safetensors`` file, a ``.bin``/``.pt``/``.pth`` torch
  checkpoint, or a directory (safetensors shards, following
  ``model.safetensors.index.json`` when present, else torch checkpoints);
* a Hugging Face repo id ``org/name[@revision]``, looked up in the **local** cache only.

Nothing is read beyond ``stat`` and the index JSON here; file types are checked
so that a FIFO or a device is refused before anyone opens it for reading.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from loadscope.base.errors import (
    LoadscopeError,
    NotARegularFile,
    PathNotFound,
    error_from_oserror,
)
from loadscope.base.safeio import open_regular, pread_exact
from loadscope.base.tempdirs import owned_tempdir
from loadscope.base.units import format_bytes, parse_size
from loadscope.model.twins import Other, other_format, safetensors_twin
from loadscope.model.weightfiles import (
    INDEX_NAMES,
    INDEX_SUFFIXES,
    MAX_INDEX_BYTES,
    NOT_WEIGHTS,
    SAFETENSORS_SUFFIXES,
    TORCH_SUFFIXES,
    BadTargetSpec,
    HubCacheMiss,
    InvalidIndex,
    NotEnoughSpace,
    NoWeightFiles,
    ShardMissing,
    ShardOutsideModel,
    TargetError,
    UnsupportedFile,
    WeightFile,
    WeightFormat,
    check_shard_name,
    format_of,
    index_files,
    parse_index,
    read_index,
    shard_file,
    weight_file,
)
from loadscope.probes.sources import FILES, Source, SourceError, object_address, source_for

if TYPE_CHECKING:
    from loadscope.tools.synth import SynthFormat

#: What this module gives (the weight-file names and errors are re-exported from
#: :mod:`weightfiles`, the other format's files from :mod:`twins`).
__all__ = [
    "INDEX_NAMES",
    "INDEX_SUFFIXES",
    "MAX_INDEX_BYTES",
    "NOT_WEIGHTS",
    "SAFETENSORS_SUFFIXES",
    "TORCH_SUFFIXES",
    "BadTargetSpec",
    "HubCacheMiss",
    "InvalidIndex",
    "NoWeightFiles",
    "NotEnoughSpace",
    "NotFiles",
    "Other",
    "ShardMissing",
    "ShardOutsideModel",
    "SyntheticSpec",
    "Target",
    "TargetError",
    "TargetKind",
    "UnsupportedFile",
    "WeightFile",
    "WeightFormat",
    "check_shard_name",
    "files_only",
    "format_of",
    "hub_cache_dir",
    "index_files",
    "looks_like_repo_id",
    "open_target",
    "other_format",
    "parse_index",
    "parse_synthetic",
    "read_index",
    "repo_spec",
    "resolve",
    "resolve_path",
    "resolve_repo_id",
    "resolve_source",
    "safetensors_twin",
    "shard_file",
    "weight_file",
]

TargetKind = Literal["file", "directory", "hf-cache", "synthetic", "source"]

_HF_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")


@dataclass(frozen=True, slots=True)
class Target:
    """Resolved weight files and where they came from."""

    spec: str
    kind: TargetKind
    root: Path
    files: tuple[WeightFile, ...]
    #: The index JSON followed, if any (its weight map is in ``weight_map``).
    index: Path | None = None
    weight_map: dict[str, str] | None = None
    #: For HF cache targets: repo id and revision; for synthetic ones: the spec.
    detail: str = ""
    #: A folder holding the model in both formats (as many Hub repos do): the files of
    #: the other one (the torch files beside chosen safetensors, or the safetensors twins
    #: of a torch model named by its index or ``pytorch_model.bin``), so the formats can be
    #: measured side by side on the same tensors. Empty otherwise; ``files`` stay the
    #: chosen format's.
    alternates: tuple[WeightFile, ...] = ()
    #: Why the other format's files in the folder cannot be used ("" when there are none
    #: or they are fine): a missing shard, a FIFO, a broken link; said, not passed over.
    alternates_problem: str = ""
    #: The index that names ``alternates`` (the safetensors twin of a torch index), if any.
    alternates_index: Path | None = None
    #: The model's own folder when this target is the emulator's mount of it (the
    #: mount is gone after the run: advice and fixes name this folder instead).
    served_from: Path | None = None
    #: The kind of source its bytes come from (``probes/sources.py``): files, or a
    #: registered source that ``spec`` named by its prefix; then ``spec`` is the model's
    #: address there and each of ``files`` an object's name under it (:meth:`address`).
    source: str = FILES

    @property
    def on_files(self) -> bool:
        """Whether the model is files on a file system here (not another source)."""
        return self.source == FILES

    def address(self, wf: WeightFile) -> str:
        """Where a loader reads ``wf``: its path, or its object's address in the source."""
        return str(wf.path) if self.on_files else object_address(self.spec, str(wf.path))

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def report_spec(self) -> str:
        """The spec as a report keeps it: a path made absolute, so that a report opened
        from another directory (the app's apply, ``copy --report``) still names this
        model; repo ids and ``synthetic:`` specs as given."""
        if self.spec.startswith("synthetic:") or not self.on_files:
            return self.spec
        path = os.path.expanduser(self.spec)
        try:
            os.lstat(path)
        except (OSError, ValueError):
            return self.spec  # a repo id (or a path gone since): as given
        return os.path.abspath(path)

    @property
    def report_root(self) -> str:
        """The model's folder as a report keeps it: absolute, like :attr:`report_spec`
        (another source's address as given)."""
        return os.path.abspath(self.root) if self.on_files else self.spec

    @property
    def formats(self) -> set[WeightFormat]:
        return {f.format for f in self.files}

    @property
    def all_formats(self) -> set[WeightFormat]:
        """The formats of ``files`` and of ``alternates``."""
        return self.formats | {f.format for f in self.alternates}

    def files_in(self, formats: set[str] | frozenset[str]) -> tuple[WeightFile, ...]:
        """The files a loader of ``formats`` reads: the preferred ones, else the others."""
        if self.formats & formats:
            return self.files
        return tuple(f for f in self.alternates if f.format in formats)


def _folder(
    spec: str,
    root: Path,
    files: tuple[WeightFile, ...],
    index: Path | None,
    weight_map: dict[str, str] | None,
) -> Target:
    """A model folder's target, with the other format's files beside it when it has them."""
    other = other_format(root, files, index)
    return Target(
        spec,
        "directory",
        root,
        files,
        index=index,
        weight_map=weight_map,
        alternates=other.files,
        alternates_problem=other.problem,
        alternates_index=other.index,
    )


def resolve_path(path: Path, *, spec: str | None = None) -> Target:
    """Resolve an existing file or directory."""
    spec = spec if spec is not None else str(path)
    try:
        is_dir = path.is_dir()
    except OSError as exc:
        raise error_from_oserror(exc, path) from None
    if is_dir:
        index, weight_map, files = _directory_files(path)
        return _folder(spec, path, files, index, weight_map)
    if path.name.lower().endswith(INDEX_SUFFIXES):
        # A sharded index named by itself (model.safetensors.index.json, or a diffusers
        # one): the model folder it lives in, read through that index.
        weight_map, files = index_files(path.parent, path)
        return _folder(spec, path.parent, files, path, weight_map)
    file = weight_file(path)
    # A torch file with its safetensors twin beside it (many Hub repos hold both; a file
    # converted by the advice's code): named so that the advice says "load those". (A
    # safetensors file stands alone: the folder's pickles may be anything.)
    other = other_format(path.parent, (file,), None) if file.format == "torch" else Other()
    return Target(
        spec,
        "file",
        path.parent,
        (file,),
        alternates=other.files,
        alternates_problem=other.problem,
        alternates_index=other.index,
    )


def _directory_files(
    root: Path,
) -> tuple[Path | None, dict[str, str] | None, tuple[WeightFile, ...]]:
    try:
        names = sorted(e.name for e in os.scandir(root))
    except OSError as exc:
        raise error_from_oserror(exc, root) from None
    for index_name in INDEX_NAMES:
        if index_name in names:
            index = root / index_name
            return index, *index_files(root, index)
    by_format: tuple[tuple[WeightFormat, tuple[str, ...]], ...] = (
        ("safetensors", SAFETENSORS_SUFFIXES),
        ("torch", TORCH_SUFFIXES),
    )
    for fmt, suffixes in by_format:
        picked = [n for n in names if n.lower().endswith(suffixes) and n not in NOT_WEIGHTS]
        if picked:
            return None, None, tuple(weight_file(root / n, fmt) for n in picked)
    hint = _subfolders_with_weights(root, names)
    raise NoWeightFiles(
        "holds no weight files (.safetensors, .bin, .pt, .pth)"
        + (f"; these subfolders do, point at one: {', '.join(hint)}" if hint else ""),
        path=root,
    )


def _subfolders_with_weights(root: Path, names: list[str]) -> list[str]:
    # One level only, no symlinked folders: a directory cycle must not become a hang.
    found = []
    for n in names:
        sub = root / n
        with contextlib.suppress(OSError):
            if sub.is_symlink() or not sub.is_dir():
                continue
            with os.scandir(sub) as entries:  # closed even when any() stops early
                if any(
                    e.name.lower().endswith(SAFETENSORS_SUFFIXES + TORCH_SUFFIXES) for e in entries
                ):
                    found.append(n + "/")
    return found[:8]


_HF_BARE = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*)(?:@(?P<rev>[\w./-]+))?$")
#: File names a user means as files, not as a bare repo id.
_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".json", ".ckpt", ".gguf")


def repo_spec(spec: str) -> tuple[str, str | None] | None:
    """``(repo, revision)`` for the ways people name a Hub model, or None.

    ``org/name``, ``org/name@rev``, ``gpt2`` (no organisation), ``hf://org/name`` and a
    cache folder's name ``models--org--name``.
    """
    text = spec.strip()
    if text.startswith("hf://"):
        text = text[len("hf://") :].strip("/")
    elif text.startswith("models--"):
        text = text[len("models--") :].replace("--", "/", 1)
    for pattern in (_HF_ID, _HF_BARE):
        match = pattern.match(text)
        if match is not None:
            repo = match.group("repo")
            if pattern is _HF_BARE and repo.lower().endswith(_FILE_SUFFIXES):
                return None
            return repo, match.group("rev")
    return None


def looks_like_repo_id(spec: str) -> bool:
    return repo_spec(spec) is not None


def hub_cache_dir() -> Path:
    """The cache ``huggingface_hub`` reads (``HF_HUB_CACHE``, ``HF_HOME``, ... at call time)."""
    from loadscope.probes.hfcache import hub_cache_location  # only for org/name specs

    return Path(hub_cache_location().path)


def resolve_repo_id(spec: str) -> Target:
    """Resolve ``org/name[@revision]`` from the local Hugging Face cache, never the network."""
    parsed = repo_spec(spec)
    if parsed is None:
        raise BadTargetSpec(f"{spec!r} is not a Hugging Face repo id (org/name[@revision])")
    repo, revision = parsed
    if revision and (revision.startswith("/") or ".." in revision.split("/")):
        raise BadTargetSpec(f"{spec!r}: a revision is a branch, tag or commit, not a path")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    cache = hub_cache_dir()
    try:
        snapshot = snapshot_download(
            repo, revision=revision, cache_dir=cache, local_files_only=True
        )
    except (LocalEntryNotFoundError, HFValidationError, OSError, ValueError):
        at = f"@{revision}" if revision else ""
        get = shlex.join(["hf", "download", repo, *(["--revision", revision] if revision else [])])
        raise HubCacheMiss(
            f"{repo}{at} is not in the local Hugging Face cache at {cache}"
            f" (loadscope never downloads; run '{get}' first, or set HF_HUB_CACHE)"
        ) from None
    target = resolve_path(Path(str(snapshot)), spec=spec)
    return dataclasses.replace(
        target, kind="hf-cache", detail=f"{repo}@{revision or 'main'} in {cache}"
    )


# -- synthetic -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    size_bytes: int
    shards: int = 1
    format: SynthFormat = "safetensors"
    seed: int = 0


def parse_synthetic(spec: str) -> SyntheticSpec:
    """Parse ``synthetic:SIZE[,shards=N][,format=F][,seed=S]``."""
    body = spec.split(":", 1)[1]
    size_text, *options = body.split(",")
    try:
        size = parse_size(size_text)
        kwargs: dict[str, object] = {}
        for opt in options:
            key, sep, value = opt.partition("=")
            if not sep:
                raise ValueError(f"option {opt!r} needs a value (key=value)")
            if key in ("shards", "seed"):
                kwargs[key] = int(value)
            elif key == "format" and value in ("safetensors", "torch", "both"):
                kwargs[key] = value
            else:
                raise ValueError(
                    f"unknown option {opt!r} (shards=N, format=safetensors|torch|both, seed=S)"
                )
    except ValueError as exc:
        raise BadTargetSpec(f"bad synthetic target {spec!r}: {exc}") from None
    return SyntheticSpec(size, **kwargs)  # type: ignore[arg-type]


@contextlib.contextmanager
def open_target(spec: str, *, synth_dir: str | os.PathLike[str] | None = None) -> Iterator[Target]:
    """Resolve ``spec``; a synthetic target lives for the ``with`` block and is removed after."""
    if spec.startswith("synthetic:"):
        syn = parse_synthetic(spec)
        parent = Path(synth_dir) if synth_dir is not None else Path(tempfile.gettempdir())
        need = int(syn.size_bytes * (2 if syn.format == "both" else 1) * 1.02) + (16 << 20)
        tmp = scratch_dir(
            "loadscope-synthetic-",
            parent,
            need,
            f"a {format_bytes(syn.size_bytes)} synthetic checkpoint",
            "use a smaller size or --synth-dir",
        )
        try:
            from loadscope.tools.synth import synthesize  # only for synthetic: specs

            synthesize(tmp, syn.size_bytes, shards=syn.shards, fmt=syn.format, seed=syn.seed)
            target = resolve_path(tmp, spec=spec)
            yield dataclasses.replace(
                target, kind="synthetic", detail=f"seed {syn.seed}, removed afterwards"
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    yield resolve(spec)


class NotFiles(TargetError):
    """A command that reads files, given a model in another source (``probes/sources.py``)."""


def files_only(target: Target, what: str) -> Target:
    """``target`` when it is files; else one line: ``what`` reads files, the model is not."""
    if not target.on_files:
        raise NotFiles(
            f"{what} reads files, and this model is in {target.detail or target.source}"
            " (loadscope doctor, probe and bench measure it there)",
            path=target.spec,
        )
    return target


def resolve_source(source: Source, spec: str) -> Target:
    """A model in a registered source: its weight objects, by the source's listing."""
    try:
        objects = source.listing(spec)
    except SourceError:
        raise
    except Exception as exc:  # noqa: BLE001 - a source's own module: one line, no traceback
        raise SourceError(f"{source.title}: {type(exc).__name__}: {exc}", path=spec) from None
    files = []
    for obj in objects:
        fmt = format_of(Path(obj.name))
        if fmt is None:
            raise UnsupportedFile(f"{obj.name!r} is not a weight file", path=spec)
        files.append(WeightFile(Path(obj.name), obj.size_bytes, fmt))
    if not files:
        raise NoWeightFiles(f"{source.title} holds no weight objects here", path=spec)
    return Target(spec, "source", Path(spec), tuple(files), detail=source.title, source=source.name)


def scratch_dir(prefix: str, parent: Path, need: int, what: str, instead: str) -> Path:
    """A new folder of this process under ``parent`` for ``what`` (``need`` bytes), or one
    line why not: no such directory, no space (``instead`` says what to do), no right."""
    try:
        free = shutil.disk_usage(parent).free
        if free < need:
            raise NotEnoughSpace(
                f"{what} needs {format_bytes(need)} free in {parent}, which has"
                f" {format_bytes(free)} ({instead})"
            )
        return owned_tempdir(prefix, parent)
    except OSError as exc:
        raise _scratch_error(exc, parent, what) from None


def _scratch_error(exc: OSError, parent: Path, what: str) -> LoadscopeError:
    """Why ``what`` cannot be built under ``parent``, as a user error."""
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return PathNotFound(f"no such directory for {what}", path=parent)
    err = error_from_oserror(exc, parent)
    if not isinstance(err, PathNotFound | NotARegularFile) and exc.strerror:
        err = type(err)(f"cannot build {what} here: {exc.strerror}", path=parent)
    return err


def resolve(spec: str) -> Target:
    """Resolve a path, a repo id or a registered source's address (``probes/sources.py``;
    not ``synthetic:``: use :func:`open_target` for those)."""
    if not spec:
        raise BadTargetSpec("empty target: give a file, a directory, org/name, or synthetic:SIZE")
    if (source := source_for(spec)) is not None:
        return resolve_source(source, spec)
    try:
        path = Path(spec).expanduser()
        os.lstat(path)
    except RuntimeError:  # pathlib's "Could not determine home directory."
        raise PathNotFound(
            "cannot expand '~' here (no such user, or no home directory)", path=spec
        ) from None
    except (FileNotFoundError, NotADirectoryError):
        if looks_like_repo_id(spec) and not spec.startswith((".", "/", "~")):
            if "/" in spec or spec.startswith(("hf://", "models--")):
                return resolve_repo_id(spec)
            try:  # a bare name: a repo id like gpt2, or a path that is not there
                return resolve_repo_id(spec)
            except HubCacheMiss as exc:
                raise PathNotFound(
                    f"no such file or directory, and {exc.message}",
                    path=spec,
                ) from None
        raise PathNotFound("no such file or directory", path=path) from None
    except ValueError:  # "embedded null byte", or a surrogate no file name can hold
        raise BadTargetSpec(
            f"{spec!r} is not a usable path (a NUL byte, or a character file names cannot hold)"
        ) from None
    except OSError as exc:
        raise error_from_oserror(exc, path) from None
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotARegularFile("is a symbolic link loop", path=path) from None
        if isinstance(exc, FileNotFoundError):
            raise PathNotFound("is a broken symbolic link", path=path) from None
        raise error_from_oserror(exc, path) from None
    if path.name.startswith("models--") and (path / "snapshots").is_dir():
        return _resolve_cache_folder(path, spec)
    return resolve_path(path, spec=spec)


def _resolve_cache_folder(folder: Path, spec: str) -> Target:
    """A Hub cache folder (``.../models--org--name``): its ``main`` snapshot, or its only one."""
    snapshots = sorted(p for p in (folder / "snapshots").iterdir() if p.is_dir())
    chosen: Path | None = None
    ref = folder / "refs" / "main"
    if ref.is_file():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            fd = open_regular(ref)
            try:
                commit = pread_exact(fd, min(os.fstat(fd).st_size, 256), 0, path=ref)
            finally:
                os.close(fd)
            candidate = folder / "snapshots" / commit.decode().strip()
            if candidate.is_dir() and "/" not in commit.decode().strip():
                chosen = candidate
    if chosen is None and len(snapshots) == 1:
        chosen = snapshots[0]
    if chosen is None:
        names = ", ".join(p.name[:12] for p in snapshots) or "none"
        raise NoWeightFiles(
            f"a Hugging Face cache folder with no main snapshot (snapshots: {names});"
            " point at one of its snapshots/ folders",
            path=folder,
        )
    target = resolve_path(chosen, spec=spec)
    repo = folder.name[len("models--") :].replace("--", "/", 1)
    return dataclasses.replace(
        target, kind="hf-cache", detail=f"{repo} snapshot {chosen.name[:12]} in {folder.parent}"
    )
