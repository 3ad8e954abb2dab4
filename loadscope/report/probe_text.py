"""The probe's figures as content (``loadscope.report.probe_text``): what the storage is,
the machine, the page cache, the cold latency, the throughput by request size and by
readers (as bars on one scale), fio's figures, the registered probes' lines and the
notes, read from a probe report's JSON. ``loadscope probe``, the doctor's full text,
``report --text``, the Markdown and the HTML all lay out these blocks
(:func:`probe_blocks`): a terminal sets them in 80 columns with an 11-column gutter
of labels; the JSON has everything.

Owns :func:`probe_blocks` (:func:`probe_parts`) and :func:`to_text`: the layout; what
each probe shows, and where, is declared with it (``probes/registry.py``: the core's
probes' ``shown`` and ``part``, the registered ones' ``lines``).
May import: :mod:`~loadscope.engine.probe_report`, ``loadscope.probes``,
``loadscope.report.content``, ``loadscope.report.text``, ``loadscope.base``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadscope.base.units import format_bytes
from loadscope.engine.probe_report import ProbeReport
from loadscope.probes.registry import PROBES, block_lines
from loadscope.probes.sources import FILES, supports
from loadscope.probes.sources import source_title as source_title  # noqa: PLC0414
from loadscope.probes.sources import target_words as target_words  # noqa: PLC0414
from loadscope.probes.spec import BarRows, Commands, Shown, block_of
from loadscope.report.content import Bars, Block, Code, Fields
from loadscope.report.text import blocks_text

Doc = Mapping[str, Any]


def to_text(report: ProbeReport) -> str:
    """``loadscope probe``'s summary: the probe's blocks in 80 columns."""
    return "\n".join(blocks_text(probe_blocks(report.to_dict())))


def probe_blocks(probe: Doc) -> tuple[Block, ...]:
    """Every figure of a probe report's JSON (the doctor's ``probe`` block) as content."""
    head, middle, tail = probe_parts(probe)
    return _merged([head, *middle, tail])


def probe_parts(probe: Doc) -> tuple[Fields, list[Block], Fields]:
    """:func:`probe_blocks` in its three parts, each probe's figures where its declaration
    puts them (``ProbeSpec.part``, in the registry's order): the target, then the storage,
    the machine, the page cache and the latency (labelled lines); the throughput (bars)
    and fio; the registered probes' lines, the notes and the time the probes took. A
    model in another source than files says once that the file probes did not run."""
    title = source_title(probe.get("target"))
    kind = str(block_of(probe.get("target")).get("source_kind") or FILES)
    parts: dict[str, Shown] = {"head": [], "middle": [], "tail": []}
    if isinstance(t := probe.get("target"), dict):
        parts["head"].append(("target", f"{t.get('spec')} ({target_words(t)})"))
    if title:
        parts["head"].append(
            ("files", f"not probed: the model is in {title}; its own probes follow")
        )
    for spec in PROBES.values():
        shown = spec.shown if spec.core and supports(spec.sources, kind) else None
        if shown is not None and (spec.block or spec.key) in probe:
            parts[spec.part] += shown(probe)
    parts["tail"] += [row for _spec, found in block_lines(dict(probe)) for row in found]
    parts["tail"] += [("note", str(n)) for n in probe.get("notes") or []]
    if "elapsed_s" in probe:
        # In a doctor run the probes have a share of its budget: said as theirs.
        took = f"{_num(probe.get('elapsed_s')):.1f} s of the probes'"
        parts["tail"].append(("took", f"{took} {_num(probe.get('budget_s')):g} s budget"))
    head, tail = (_content(parts[p]) for p in ("head", "tail"))
    return _fields(head), _content(parts["middle"]), _fields(tail)


def _fields(blocks: list[Block]) -> Fields:
    """The one :class:`Fields` the head's or the tail's lines make."""
    rows = [row for b in blocks if isinstance(b, Fields) for row in b.rows]
    return Fields(tuple(rows))


def _content(shown: Shown) -> list[Block]:
    """What a probe shows (its lines and bars, ``probes/spec.py``) as content blocks."""
    out: list[Block] = []
    for part in shown:
        if isinstance(part, BarRows):
            out.append(Bars(part.header, part.rows, part.scale))
        elif isinstance(part, Commands):
            out.append(Code(part.text, "sh"))
        else:
            out.append(Fields((part,)))
    return list(_merged(out))


def _merged(blocks: list[Block]) -> tuple[Block, ...]:
    """Neighbouring :class:`Fields` as one."""
    out: list[Block] = []
    for block in blocks:
        last = out[-1] if out else None
        if isinstance(block, Fields) and isinstance(last, Fields):
            out[-1] = Fields(last.rows + block.rows)
        elif not isinstance(block, Fields) or block.rows:
            out.append(block)
    return tuple(out)


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _size(value: Any) -> str:
    return format_bytes(int(value)) if isinstance(value, int | float) else "?"
