"""Where a model's bytes come from: the kinds of source that probes and strategies declare
support for.

Local files are the built-in source (:data:`FILES`): a path, a Hugging Face cache entry, a
synthetic checkpoint. Another kind of storage (an object store, or the tests' toy store
that serves a model from memory) is one :class:`Source` registered here by its probe
module (:func:`register_source`), that module's :class:`~loadscope.probes.spec.ProbeSpec`
s declaring ``sources={its name}``, and one strategy module whose strategies declare the
same in their requirements. A target whose spec starts with one of a source's prefixes
(``memory:``, ``s3://``) resolves to that source's objects; probing runs the probes that
declare it (the file probes: the mounts, cold latency, throughput, the page cache, fio
declare :data:`FILES`), the trials the strategies that do, and the reports say which
source the model came from.

May import: ``loadscope.base`` only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.base.plugins import PROBE_MODULES, import_named
from loadscope.base.units import format_bytes

#: The built-in source: files on a file system this machine mounts.
FILES = "files"
#: What a probe or a strategy supports when it declares nothing: files.
ONLY_FILES: frozenset[str] = frozenset({FILES})
#: What a probe of the machine itself declares (its GPUs, its local disks, its caches):
#: it runs whatever source the model is in.
EVERY_SOURCE: frozenset[str] = frozenset({"*"})


def supports(declared: frozenset[str], source: str) -> bool:
    """Whether a probe or a strategy that declares ``declared`` runs on ``source``."""
    return source in declared or "*" in declared


class SourceError(LoadscopeError):
    """A source that cannot serve the model (no such object, no access): one line."""

    exit_code = ExitCode.UNSUPPORTED


class BadAddress(SourceError):
    """An address a source's prefix names that does not parse (``memory:lots``)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True, slots=True)
class SourceObject:
    """One weight object of a model in a source: its name under the model's address (the
    file name in a folder, the key under a bucket's prefix) and its size."""

    name: str
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Source:
    """A kind of storage a target may name (see the module's docstring)."""

    #: Its name, as probes and strategies declare it and the report's target records it.
    name: str
    #: How the text says where the model is ("an in-memory store", "an S3 bucket").
    title: str
    #: The prefixes of the targets it takes ("memory:", "s3://").
    prefixes: tuple[str, ...]
    #: The model's weight objects at an address (the target's spec), in load order; raises
    #: :class:`SourceError` (one line) when there are none or the source cannot be read.
    listing: Callable[[str], tuple[SourceObject, ...]]
    #: Why a trial's cold state means what it does here ("every read is served by the
    #: store: there is no cache on this machine to evict"); the trials run cold only.
    cold_means: str = ""

    def takes(self, spec: str) -> bool:
        return spec.startswith(self.prefixes)


#: The registered sources other than files, by name.
SOURCES: dict[str, Source] = {}


def register_source(source: Source) -> Source:
    """Add ``source`` (a probe module's call). Raises ValueError for a name already taken
    (files' included), no prefix, or a prefix another source takes."""
    if not source.name or source.name == FILES or source.name in SOURCES:
        raise ValueError(f"source name {source.name!r} is empty or already taken")
    if not source.prefixes or not all(source.prefixes):
        raise ValueError(f"source {source.name!r} declares no prefix")
    for other in SOURCES.values():
        if clash := [p for p in source.prefixes if p.startswith(other.prefixes)]:
            raise ValueError(
                f"source {source.name!r}: prefix {clash[0]!r} is taken by {other.name!r}"
            )
    SOURCES[source.name] = source
    return source


#: The built-in sources other than files, by their prefixes: the probe module that
#: registers them, imported when a target names one.
BUILT_IN: dict[tuple[str, ...], str] = {
    ("s3://", "gs://", "az://"): "loadscope.probes.objstore",
}


def source_for(spec: str) -> Source | None:
    """The registered source ``spec`` names by its prefix; None for files (a path, a repo
    id, ``synthetic:``). A probe module registers its source with its probes: a built-in
    one's when ``spec`` has its prefix, and the ones ``$LOADSCOPE_PROBE_MODULES`` names,
    are imported first (nothing is, without either: a command's start-up does not pay
    for the probes' registry)."""
    for prefixes, module in BUILT_IN.items():
        if spec.startswith(prefixes):
            importlib.import_module(module)
    import_named(PROBE_MODULES)
    return next((s for s in SOURCES.values() if s.takes(spec)), None)


def object_address(address: str, name: str) -> str:
    """Where a source's object is: the model's address and the object's name under it."""
    return f"{address.rstrip('/')}/{name}"


def split_address(path: str) -> tuple[str, str]:
    """``(address, name)`` of an object's address (:func:`object_address`'s inverse)."""
    address, _, name = path.rpartition("/")
    return address, name


def source_title(target: object) -> str:
    """The source a report's ``target`` block (its JSON) says the model is in, in words
    ("" for files: those reports have no such field)."""
    if isinstance(target, dict) and target.get("source_kind"):
        return str(target.get("source_title") or target["source_kind"])
    return ""


def target_words(target: object) -> str:
    """A report's ``target`` block in a few words: "2 file(s), 16 MiB", or for a model in
    another source "a toy store in memory: 2 object(s), 16 MiB"."""
    if not isinstance(target, dict):
        return ""
    size = format_bytes(int(target.get("total_bytes") or 0))
    title = source_title(target)
    count = f"{target.get('files')} object(s)" if title else f"{target.get('files')} file(s)"
    return f"{title}: {count}, {size}" if title else f"{count}, {size}"
