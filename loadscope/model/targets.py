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
import json
import os
import posixpath
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from loadscope.base.errors import (
    ExitCode,
    LoadscopeError,
    NotARegularFile,
    PathNotFound,
    error_from_oserror,
)
from loadscope.base.safeio import open_regular, pread_exact, stat_regular
from loadscope.base.tempdirs import owned_tempdir
from loadscope.base.units import format_bytes, parse_size
from loadscope.probes.hfcache import hub_cache_location
from loadscope.tools.synth import SynthFormat, synthesize

WeightFormat = Literal["safetensors", "torch"]
TargetKind = Literal["file", "directory", "hf-cache", "synthetic"]

SAFETENSORS_SUFFIXES = (".safetensors",)
TORCH_SUFFIXES = (".bin", ".pt", ".pth")
#: Index files in the order they are preferred.
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
#: An index named as the target: the safetensors kind first (see _index_files).
INDEX_SUFFIXES = (".safetensors.index.json", ".bin.index.json")
#: Torch files in model folders that are not model weights.
NOT_WEIGHTS = ("training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
MAX_INDEX_BYTES = 64 << 20
_HF_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")


class TargetError(LoadscopeError):
    """The target cannot be turned into weight files."""

    exit_code = ExitCode.UNSUPPORTED


class UnsupportedFile(TargetError):
    """A file whose name is not a weight format loadscope reads."""


class NoWeightFiles(TargetError):
    """A directory holding no weight files."""


class HubCacheMiss(PathNotFound):
    """A Hugging Face repo id that is not in the local cache (loadscope never downloads)."""


class BadTargetSpec(TargetError):
    """A ``synthetic:`` spec or repo id that does not parse."""

    exit_code = ExitCode.USAGE


class InvalidIndex(TargetError):
    """An index JSON that is malformed, names missing shards, or points outside the model."""

    exit_code = ExitCode.CORRUPT


class ShardMissing(InvalidIndex):
    """The index names a shard file that is not there (an incomplete download?)."""


class ShardOutsideModel(InvalidIndex):
    """The index names a shard by an absolute path or one that climbs out with ``..``."""


class NotEnoughSpace(TargetError):
    """No room to build a synthetic checkpoint."""

    exit_code = ExitCode.RESOURCES


@dataclass(frozen=True, slots=True)
class WeightFile:
    path: Path
    size_bytes: int
    format: WeightFormat


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

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def report_spec(self) -> str:
        """The spec as a report keeps it: a path made absolute, so that a report opened
        from another directory (the app's apply, ``copy --report``) still names this
        model; repo ids and ``synthetic:`` specs as given."""
        if self.spec.startswith("synthetic:"):
            return self.spec
        path = os.path.expanduser(self.spec)
        try:
            os.lstat(path)
        except (OSError, ValueError):
            return self.spec  # a repo id (or a path gone since): as given
        return os.path.abspath(path)

    @property
    def report_root(self) -> str:
        """The model's folder as a report keeps it: absolute, like :attr:`report_spec`."""
        return os.path.abspath(self.root)

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


def format_of(path: Path) -> WeightFormat | None:
    """The weight format a file name promises, or None."""
    name = path.name.lower()
    if name.endswith(SAFETENSORS_SUFFIXES):
        return "safetensors"
    if name.endswith(TORCH_SUFFIXES):
        return "torch"
    return None


def _folder(
    spec: str,
    root: Path,
    files: tuple[WeightFile, ...],
    index: Path | None,
    weight_map: dict[str, str] | None,
) -> Target:
    """A model folder's target, with the other format's files beside it when it has them."""
    other = _other_format(root, files, index)
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
        weight_map, files = _index_files(path.parent, path)
        return _folder(spec, path.parent, files, path, weight_map)
    file = _weight_file(path)
    # A torch file with its safetensors twin beside it (many Hub repos hold both; a file
    # converted by the advice's code): named so that the advice says "load those". (A
    # safetensors file stands alone: the folder's pickles may be anything.)
    other = _other_format(path.parent, (file,), None) if file.format == "torch" else _Other()
    return Target(
        spec,
        "file",
        path.parent,
        (file,),
        alternates=other.files,
        alternates_problem=other.problem,
        alternates_index=other.index,
    )


def _index_files(root: Path, index: Path) -> tuple[dict[str, str], tuple[WeightFile, ...]]:
    """The weight map of ``index`` and the shards it names under ``root``, each once."""
    weight_map = read_index(index)
    fmt: WeightFormat = "safetensors" if index.name.lower().endswith(INDEX_SUFFIXES[0]) else "torch"
    # "./a.safetensors" and "a.safetensors" are one file: read it once.
    shards = sorted({posixpath.normpath(s) for s in weight_map.values()})
    return weight_map, tuple(_shard(root, index, s, fmt) for s in shards)


def _weight_file(path: Path, fmt: WeightFormat | None = None) -> WeightFile:
    fmt = fmt or format_of(path)
    if fmt is None:
        raise UnsupportedFile(
            "is not a weight file loadscope reads (expected .safetensors, .bin, .pt or .pth,"
            " a model directory, or its *.safetensors.index.json)",
            path=path,
        )
    st = stat_regular(path)
    if not os.access(path, os.R_OK):
        raise error_from_oserror(PermissionError(13, "Permission denied"), path)
    return WeightFile(path=path, size_bytes=st.st_size, format=fmt)


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
            return index, *_index_files(root, index)
    by_format: tuple[tuple[WeightFormat, tuple[str, ...]], ...] = (
        ("safetensors", SAFETENSORS_SUFFIXES),
        ("torch", TORCH_SUFFIXES),
    )
    for fmt, suffixes in by_format:
        picked = [n for n in names if n.lower().endswith(suffixes) and n not in NOT_WEIGHTS]
        if picked:
            return None, None, tuple(_weight_file(root / n, fmt) for n in picked)
    hint = _subfolders_with_weights(root, names)
    raise NoWeightFiles(
        "holds no weight files (.safetensors, .bin, .pt, .pth)"
        + (f"; these subfolders do, point at one: {', '.join(hint)}" if hint else ""),
        path=root,
    )


@dataclass(frozen=True, slots=True)
class _Other:
    """The other format's files, why they cannot be used ("" when they can, or are none),
    and the index that names them."""

    files: tuple[WeightFile, ...] = ()
    problem: str = ""
    index: Path | None = None


def safetensors_twin(name: str) -> str:
    """The name HF's libraries give the safetensors form of a torch file or index:
    ``pytorch_model*.bin`` -> ``model*.safetensors`` (transformers),
    ``diffusion_pytorch_model*.bin`` -> ``diffusion_pytorch_model*.safetensors``
    (diffusers), ``x.bin`` -> ``x.safetensors``; ``*.bin.index.json`` likewise."""
    head, base = posixpath.split(name)
    index = base.lower().endswith(INDEX_SUFFIXES[1])
    stem = base[: -len(INDEX_SUFFIXES[1])] if index else posixpath.splitext(base)[0]
    if stem.startswith("pytorch_model"):
        stem = "model" + stem[len("pytorch_model") :]
    return posixpath.join(head, stem + (INDEX_SUFFIXES[0] if index else ".safetensors"))


def _other_format(root: Path, files: tuple[WeightFile, ...], index: Path | None) -> _Other:
    """The files of the other format in the model's folder (the Target's two fields): the
    torch files beside chosen safetensors (by their own index when there is one), or the
    safetensors twins of a chosen torch model (:func:`safetensors_twin`: by the twin of
    its index, else file by file, all of them or none, so that a variant's or an
    adapter's safetensors are never taken for the model's); none when there are none,
    and why when they cannot be used. The chosen format is what every command loads; the
    other is measured beside it (and safetensors already there are named in place of
    "convert to safetensors")."""
    formats = {f.format for f in files}
    try:
        if formats == {"torch"}:
            return _safetensors_twins(root, files, index)
        if formats != {"safetensors"}:
            return _Other()
        names = sorted(e.name for e in os.scandir(root))
        torch_index = INDEX_NAMES[1]
        if torch_index in names:
            shards = sorted(
                {posixpath.normpath(s) for s in read_index(root / torch_index).values()}
            )
            shard_files = tuple(_shard(root, root / torch_index, s, "torch") for s in shards)
            return _Other(shard_files, index=root / torch_index)
        picked = [n for n in names if n.lower().endswith(TORCH_SUFFIXES) and n not in NOT_WEIGHTS]
        return _Other(tuple(_weight_file(root / n, "torch") for n in picked))
    except (OSError, LoadscopeError) as exc:
        other = "torch" if formats == {"safetensors"} else "safetensors"
        return _Other(problem=f"the {other} files beside the model cannot be used: {exc}")


def _safetensors_twins(root: Path, files: tuple[WeightFile, ...], index: Path | None) -> _Other:
    if index is not None:
        twin_index = root / safetensors_twin(os.path.relpath(index, root))
        if os.path.lexists(twin_index):
            shards = sorted({posixpath.normpath(s) for s in read_index(twin_index).values()})
            twin_files = tuple(_shard(root, twin_index, s, "safetensors") for s in shards)
            return _Other(twin_files, index=twin_index)
    twins = [root / safetensors_twin(os.path.relpath(f.path, root)) for f in files]
    present = [t for t in twins if os.path.lexists(t)]
    if not present:
        return _Other()
    if len(present) < len(twins):
        missing = next(t for t in twins if not os.path.lexists(t))
        raise ShardMissing(
            f"is missing, though {len(present)} of the {len(twins)} safetensors twins of the"
            " torch files are there",
            path=missing,
        )
    return _Other(tuple(_weight_file(t, "safetensors") for t in twins))


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


def read_index(index: Path) -> dict[str, str]:
    """Read an index JSON's ``weight_map`` (tensor name -> shard file name), validated."""
    fd = open_regular(index)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_INDEX_BYTES:
            raise InvalidIndex(f"is {format_bytes(size)}, too large for an index file", path=index)
        raw = pread_exact(fd, size, 0, path=index)
    finally:
        os.close(fd)
    return parse_index(raw, path=index)


def parse_index(raw: bytes, *, path: Path) -> dict[str, str]:
    """Validate index JSON bytes; each shard must be a plain relative path inside the model."""
    twice: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in items:
            if key in out and not twice:
                twice.append(key)
            out[key] = value
        return out

    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=pairs)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InvalidIndex(
            f"is not valid JSON ({str(exc).splitlines()[0][:100]})", path=path
        ) from None
    if twice:
        raise InvalidIndex(
            f"has the key {twice[0]!r} twice (a tensor listed in two shards? JSON would"
            " silently keep the last); fix or download the index again",
            path=path,
        )
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise InvalidIndex("has no 'weight_map' object of tensor name -> shard file", path=path)
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise InvalidIndex(f"tensor {tensor!r} maps to {shard!r}, not a file name", path=path)
        check_shard_name(shard, index=path)
    return weight_map


def check_shard_name(shard: str, *, index: Path) -> None:
    """Refuse shard names that could leave the model directory (absolute, ``..``, NUL, ``\\``)."""
    pure = PurePosixPath(shard)
    if (
        "\0" in shard
        or "\\" in shard
        or pure.is_absolute()
        or ".." in pure.parts
        or shard.startswith("~")
    ):
        raise ShardOutsideModel(
            f"names shard {shard!r}, which is outside the model directory; refusing to follow it",
            path=index,
        )


def _shard(root: Path, index: Path, shard: str, fmt: WeightFormat) -> WeightFile:
    path = root / shard
    if not os.path.lexists(path):
        raise ShardMissing(
            f"names shard {shard!r}, which is missing (incomplete download?)", path=index
        )
    try:
        exists = path.exists()
    except OSError as exc:  # e.g. a symlink whose target name is too long to stat
        raise error_from_oserror(exc, path) from None
    if not exists:
        raise ShardMissing(
            f"names shard {shard!r}, a broken symlink (incomplete download?)", path=index
        )
    return _weight_file(path, fmt)


# -- Hugging Face cache ----------------------------------------------------------------------


#: A repo id without an organisation, as classic models are named (``gpt2``).
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
        try:
            free = shutil.disk_usage(parent).free
        except OSError as exc:
            raise _synth_dir_error(exc, parent) from None
        need = int(syn.size_bytes * (2 if syn.format == "both" else 1) * 1.02) + (16 << 20)
        if free < need:
            raise NotEnoughSpace(
                f"a {format_bytes(syn.size_bytes)} synthetic checkpoint needs {format_bytes(need)}"
                f" free in {parent}, which has {format_bytes(free)}"
                " (use a smaller size or --synth-dir)"
            )
        try:
            tmp = owned_tempdir("loadscope-synthetic-", parent)
        except OSError as exc:
            raise _synth_dir_error(exc, parent) from None
        try:
            synthesize(tmp, syn.size_bytes, shards=syn.shards, fmt=syn.format, seed=syn.seed)
            target = resolve_path(tmp, spec=spec)
            yield dataclasses.replace(
                target, kind="synthetic", detail=f"seed {syn.seed}, removed afterwards"
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    yield resolve(spec)


def _synth_dir_error(exc: OSError, parent: Path) -> LoadscopeError:
    """Why a synthetic checkpoint cannot be built under ``parent``, as a user error."""
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return PathNotFound("no such directory for the synthetic checkpoint", path=parent)
    err = error_from_oserror(exc, parent)
    if not isinstance(err, PathNotFound | NotARegularFile) and exc.strerror:
        err = type(err)(f"cannot build the synthetic checkpoint here: {exc.strerror}", path=parent)
    return err


def resolve(spec: str) -> Target:
    """Resolve a path or a repo id (not ``synthetic:``; use :func:`open_target` for those)."""
    if not spec:
        raise BadTargetSpec("empty target: give a file, a directory, org/name, or synthetic:SIZE")
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
