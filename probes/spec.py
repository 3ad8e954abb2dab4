"""The probe contract: what a probe declares so that every output can show it.

A :class:`ProbeSpec` names the probe's block in the probe report's JSON (``key``), the
heading it is shown under, the probe itself (``run``: a :class:`ProbeContext` in, its
record out, :class:`~loadscope.probes.result.Unavailable` when it cannot measure), its
record type (the report's JSON schema is generated from it), its share of the probe
budget, its summary lines and what it contributes to the advice's facts. The lines and
the facts are read from the block's JSON, so a report read back from disk shows the same
as a live run. The registry (:mod:`~loadscope.probes.registry`) holds the declarations;
probing, the text summary, the Markdown and HTML sections, the schema and the app's probe
view iterate over it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from loadscope.base.units import format_bytes, format_rate, format_us
from loadscope.probes.sources import FILES, ONLY_FILES


def _cannot_classify(path: str) -> tuple[str | None, str | None]:
    return None, "the mount table was not read"


def _no_mount(path: str) -> tuple[str, str] | None:
    return None


#: A probe's summary: ``(label, text)`` lines (the terminal puts the label in its gutter,
#: Markdown and HTML bold it, the app too).
Lines = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class BarRows:
    """Figures a probe shows as bars on one scale (the content's ``Bars``):
    ``(label, figure, value, remark)`` rows under ``header``; ``scale`` is the largest
    value on the chart, which several may share."""

    header: tuple[str, str]
    rows: tuple[tuple[str, str, float, str], ...]
    scale: float


@dataclass(frozen=True, slots=True)
class Commands:
    """Shell commands a probe shows to run (fio's jobs): a code block in every medium."""

    text: str


#: What a probe shows, in order: labelled lines, bars and commands.
Shown = list[tuple[str, str] | BarRows | Commands]


T = TypeVar("T")


class Reads(Protocol):
    """The model's measured reads, shared by the core probes that read it (the engine's:
    the reader, how it bypasses or evicts the cache, and the guard that bounds each read
    and stops all of them after one stall)."""

    #: The reader (:class:`~loadscope.probes.iobench.IoBench`).
    bench: Any
    #: Whether the reads bypass the page cache (O_DIRECT) or evict and read buffered.
    direct: bool
    #: What a network mount's eviction cannot reach ("" for local storage).
    remote: str
    stalled: list[str]
    notes: list[str]

    def guarded(self, fn: Callable[[], T], seconds: float) -> Callable[[], T]: ...


@dataclass(frozen=True, slots=True)
class ProbeContext:
    """What a registered probe may consult: the model's files and where they live."""

    #: The model's folder (or file) and its weight files, ``(path, bytes)``.
    root: str
    files: tuple[tuple[str, int], ...]
    #: The storage class of the largest file's mount (``probes/result.py``'s names).
    storage_class: str
    wsl: bool
    #: The seconds this probe may take: its share of the measured budget (0: fixed cost,
    #: it reads no file data).
    seconds: float
    #: The storage class of any path's mount and why (``None`` and the reason where it
    #: cannot tell), as the probes classify the model's own.
    classify: Callable[[str], tuple[str | None, str | None]] = _cannot_classify
    #: Any path's mount point and storage class (the class a FUSE or overlay mount
    #: resolves to), or None where the mount table was not read.
    mount_of: Callable[[str], tuple[str, str] | None] = _no_mount
    #: The kind of source the model is in (``probes/sources.py``; files unless a
    #: registered source's prefix named another); ``root`` is then the model's address
    #: there and ``files`` its objects' addresses.
    source: str = FILES
    #: For the core probes that read the model (latency, throughput, fio): the shared
    #: reads, when the measured reads must end, the memory headroom (None: unknown) and
    #: the results of the probes before them, by key.
    reads: Reads | None = None
    deadline: float = 0.0
    headroom: int | None = None
    earlier: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """One probe, as every output reads it (see the module's docstring)."""

    #: Its block in the probe report's JSON, and the probe result's name.
    key: str
    title: str
    #: The record ``run`` returns (a dataclass): the schema of its block comes from it.
    record: type
    run: Callable[[ProbeContext], Any]
    #: Its summary lines, from the block's JSON (the status line when it did not run ok
    #: is drawn by the renderers).
    lines: Callable[[dict[str, Any]], Lines]
    #: Its share of the measured part of the probe budget (0: a fixed-cost probe, run
    #: before the measured reads).
    budget_share: float = 0.0
    #: What it adds to the advice's facts, by fact name, from the block's JSON.
    facts: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: The label of its status line when it did not run ok (default: its key).
    label: str = ""
    #: A fixed-cost probe that runs after the measured reads instead (outside the budget,
    #: as fio does: the local disks' writes must not stand beside the model's reads).
    after_reads: bool = False
    #: The kinds of source it measures (``probes/sources.py``): files unless it says so;
    #: a model in another source is probed only by the probes that declare that source.
    sources: frozenset[str] = ONLY_FILES
    #: One of the core's own probes (the machine, the files' storage and page cache, the
    #: cold latency, the throughput, fio): its block is one of the report's own and the
    #: engine runs it in its place among the reads (``engine/probing.py``); a registered
    #: probe's result goes with the others' under its key.
    core: bool = False
    #: Where its figures go in the probe block: "head" (the labelled lines at the top),
    #: "middle" (bars and commands) or "tail" (after them: the registered probes).
    part: str = "tail"
    #: What it shows, from the whole probe report's JSON (a core probe reads the target
    #: and the files too); None: its :attr:`lines` from its block, or its status line.
    shown: Callable[[Mapping[str, Any]], Shown] | None = None
    #: Its block in the report's JSON when it is not ``key`` (the page cache's figures
    #: are in each file's block, beside the storage's).
    block: str = ""

    @property
    def phase(self) -> str:
        """When it runs: "fixed" (before the measured reads), "measured" (its share of
        them) or "after" (after them)."""
        if self.budget_share > 0.0:
            return "measured"
        return "after" if self.after_reads else "fixed"


def status_text(block: Mapping[str, Any]) -> str:
    """A block that is not ok, in words: "unavailable: no NVIDIA GPU on the PCI bus"."""
    return f"{block.get('status', 'not run')}: {block.get('reason')}"


def ok(block: Any) -> bool:
    """Whether a probe's block in the report's JSON ran ok."""
    return isinstance(block, dict) and block.get("status") == "ok"


def block_of(value: Any) -> dict[str, Any]:
    """A block of the report's JSON, or an empty one (an older report, a missing part)."""
    return value if isinstance(value, dict) else {}


def blocks_of(value: Any) -> list[dict[str, Any]]:
    """The blocks of a list in the report's JSON (none where it is not a list)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


#: Each figure's unit, declared once: by its field's name (the first rule that matches:
#: a whole name, a prefix or a suffix). The report's JSON schema carries it (``x-unit``),
#: and :func:`figure` lays any field out by it for the terminal, Markdown, HTML and the
#: app alike. A field none matches is a count, an id or a word.
UNIT_RULES: tuple[tuple[str, str, str], ...] = (
    ("name", "seconds", "s"),
    ("suffix", "_seconds", "s"),
    ("suffix", "bytes_per_s", "bytes/s"),
    ("suffix", "bytes", "bytes"),
    ("prefix", "bytes_", "bytes"),
    ("suffix", "_us", "us"),
    ("suffix", "_kb", "KiB"),
    ("suffix", "_ratio", "%"),
    ("suffix", "_gts", "GT/s"),
    ("suffix", "_s", "s"),
)


def unit_of(name: str) -> str | None:
    """The unit of a record's field ``name`` ("bytes", "bytes/s", "us", "KiB", "s", "%",
    "GT/s"), or None for a count, an id or a word."""
    for kind, text, unit in UNIT_RULES:
        if (
            (kind == "name" and name == text)
            or (kind == "prefix" and name.startswith(text))
            or (kind == "suffix" and name.endswith(text))
        ):
            return unit
    return None


def figure(name: str, value: Any) -> str:
    """Field ``name``'s ``value`` in its unit ("1.2 GiB", "3.4 GB/s", "210 us", "8192
    KiB", "0.52 s", "20%", "16 GT/s"), "?" when it is not a number."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "?"
    unit = unit_of(name)
    if unit == "bytes":
        return format_bytes(value)
    if unit == "bytes/s":
        return format_rate(value)
    if unit == "us":
        return format_us(value)
    if unit == "KiB":
        return f"{int(value)} KiB"
    if unit in ("s", "%", "GT/s"):
        return f"{value:.3g} {unit}" if unit != "%" else f"{value:g}%"
    return f"{value:g}"
