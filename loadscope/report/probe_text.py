"""The probe's figures as content (``loadscope.report.probe_text``): what the storage is,
the machine, the page cache, the cold latency, the throughput by request size and by
readers (as bars on one scale), fio's figures, the registered probes' lines and the
notes, read from a probe report's JSON. ``loadscope probe``, the doctor's full text,
``report --text``, the Markdown and the HTML all lay out these blocks
(:func:`probe_blocks`): a terminal sets them in 80 columns with an 11-column gutter
of labels; the JSON has everything.

Owns :func:`probe_blocks` (:func:`probe_parts`) and :func:`to_text`: the order and the
layout; each probe's lines are declared with it (``storage_lines``, ``system_lines``,
``residency_lines``, ``latency_lines``, ``throughput_shown``).
May import: :mod:`~loadscope.engine.probe_report`, ``loadscope.probes``,
``loadscope.report.content``, ``loadscope.report.text``, ``loadscope.base``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from loadscope.base.units import format_bytes, format_rate, format_us
from loadscope.engine.probe_report import ProbeReport
from loadscope.probes.iobench import latency_lines, throughput_shown
from loadscope.probes.mounts import storage_lines
from loadscope.probes.pagecache import residency_lines
from loadscope.probes.registry import block_lines
from loadscope.probes.sources import source_title as source_title  # noqa: PLC0414
from loadscope.probes.sources import target_words as target_words  # noqa: PLC0414
from loadscope.probes.spec import BarRows, Shown, block_of, blocks_of, ok, status_text
from loadscope.probes.system import system_lines
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
    """:func:`probe_blocks` in its three parts: the storage, the machine, the page cache
    and the latency (labelled lines); the throughput (bars) and fio; the registered
    probes' lines, the notes and the time the probes took."""
    rows = []
    title = source_title(probe.get("target"))
    if isinstance(t := probe.get("target"), dict):
        rows.append(("target", f"{t.get('spec')} ({target_words(t)})"))
    seen: set[str] = set()
    for f in blocks_of(probe.get("files")):
        # Files on one filesystem share its storage probe: said once.
        key = json.dumps([f.get(k) for k in ("mount", "device", "bdi")], sort_keys=True)
        if key not in seen:
            seen.add(key)
            rows += storage_lines(f)
    if "system" in probe:
        model = int((probe.get("target") or {}).get("total_bytes") or 0)
        rows += system_lines(block_of(probe.get("system")), model)
    if title:  # another source than files: the file probes did not run, said once
        rows.append(("files", f"not probed: the model is in {title}; its own probes follow"))
    else:
        rows += residency_lines(probe.get("files"))
    if "latency" in probe and not title:
        rows += latency_lines(block_of(probe.get("latency")))
    middle = []
    if "throughput" in probe and not title:
        middle = _content(throughput_shown(block_of(probe["throughput"])))
    middle += _fio_blocks(block_of(probe.get("fio")))
    tail = [row for _spec, found in block_lines(dict(probe)) for row in found]
    tail += [("note", str(n)) for n in probe.get("notes") or []]
    if "elapsed_s" in probe:
        # In a doctor run the probes have a share of its budget: said as theirs.
        took = f"{_num(probe.get('elapsed_s')):.1f} s of the probes'"
        tail.append(("took", f"{took} {_num(probe.get('budget_s')):g} s budget"))
    return Fields(tuple(rows)), middle, Fields(tuple(tail))


def _content(shown: Shown) -> list[Block]:
    """What a probe shows (its lines and bars, ``probes/spec.py``) as content blocks."""
    out: list[Block] = []
    for part in shown:
        if isinstance(part, BarRows):
            out.append(Bars(part.header, part.rows, part.scale))
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


def _fio_blocks(fio: Doc) -> list[Block]:
    """fio's figures beside the probe's (with --fio), else how to reproduce with fio."""
    jobs = blocks_of(fio.get("jobs"))
    if not jobs:
        return []
    if not ok(fio):
        rows = [] if fio.get("status") == "skipped" else [("fio", status_text(fio))]
        hint = (
            "loadscope probe --fio runs the fio jobs that reproduce these numbers"
            " (their command lines: fio.jobs[].command in --json)"
        )
        return [Fields((*rows, ("fio", hint)))]
    rows = []
    for job in jobs:
        if job.get("fio") is None:
            continue
        if job.get("metric") == "p50_us":
            mine = format_us(job["probe"]) if job.get("probe") else "-"
            text = f"{job.get('label')}: p50 {format_us(job['fio'])} (probe {mine})"
        else:
            mine = format_rate(job["probe"]) if job.get("probe") else "-"
            text = f"{job.get('label')}: {format_rate(job['fio'])} (probe {mine})"
        ratio = job.get("fio_over_probe")
        rows.append(("fio", text + (f", fio/probe {ratio:.2f}x" if ratio else "")))
    rows.append(("fio", "the jobs (read-only):"))
    commands = "\n".join(line for job in jobs for line in _shell_lines(str(job.get("command"))))
    return [Fields(tuple(rows)), Code(commands, "sh")]


def _shell_lines(command: str, width: int = 78) -> list[str]:
    """A long shell command as lines continued with a backslash, broken between words."""
    words = shlex.split(command)
    lines, line = [], ""
    for word in (shlex.quote(w) for w in words):
        if len(line) + 1 + len(word) > width - 2 and line.strip():
            lines.append(line + " \\")
            line = "  "
        line += (" " if line.strip() else "") + word
    return [*lines, line]


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _size(value: Any) -> str:
    return format_bytes(int(value)) if isinstance(value, int | float) else "?"
