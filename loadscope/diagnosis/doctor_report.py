"""The doctor's report: the object a run returns, its JSON, its terminal text, and a saved
report read back.

The report is one JSON document (tool version, time, host facts, target, probes, trials
with downsampled series, recommendations, and every failed or skipped step with its
reason); its Markdown and HTML are ``loadscope.report``'s.

May import: ``loadscope.report``, ``loadscope.advice``, ``loadscope.engine``,
``loadscope.actions``, ``loadscope.base``.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import textwrap
from dataclasses import asdict, dataclass
from typing import Any

from loadscope.actions.convert import ConversionTrial
from loadscope.advice.rules import Advice, advice_dict
from loadscope.base._version import __version__
from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.base.units import format_bytes
from loadscope.diagnosis.timing import TimeReport
from loadscope.engine.bench import BenchReport
from loadscope.engine.broadcast import BroadcastReport
from loadscope.engine.probing import ProbeReport
from loadscope.report.content import Quote, Section, fix_sections
from loadscope.report.schema import SchemaError
from loadscope.report.schema import check as check_schema
from loadscope.report.sections import sections
from loadscope.report.text import plain, section_lines

SCHEMA_VERSION = 1


class ReportError(LoadscopeError):
    """A file that is not a loadscope doctor report."""

    exit_code = ExitCode.CORRUPT


#: A report larger than this is not one loadscope wrote (a 1,000-shard model's is ~10 MiB).
MAX_REPORT_BYTES = 256 << 20


def load_report(path: str, kind: str = "doctor") -> dict[str, Any]:
    """A saved report (JSON), checked against the published schema
    (:mod:`loadscope.report.schema`) before anything reads it: a bad file is one line
    naming it and the first offending path. ``kind`` "any": a doctor report, or a
    ``time --json`` one (its ``kind`` field says so). ``path`` "-": standard input
    (``loadscope time --json - -- CMD | loadscope report -``)."""
    if path == "-":
        raw = sys.stdin.buffer.read(MAX_REPORT_BYTES + 1)
        path = "standard input"
        if len(raw) > MAX_REPORT_BYTES:
            raise ReportError(
                f"not a loadscope report: over the {format_bytes(MAX_REPORT_BYTES)} a"
                " report can be",
                path=path,
            )
    else:
        raw = _read_file(path)
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise ReportError("not a loadscope report: JSON nested too deeply", path=path) from None
    except ValueError as exc:
        raise ReportError(f"not a JSON report ({exc})", path=path) from None
    if kind == "any":  # a doctor report, or the time command's (it says so)
        kind = "time" if isinstance(doc, dict) and doc.get("kind") == "time" else "doctor"
    try:
        check_schema(doc, kind)
    except SchemaError as exc:
        raise ReportError(f"not a loadscope {kind} report: {exc}", path=path) from None
    out: dict[str, Any] = doc
    return out


def _read_file(path: str) -> bytes:
    """A report file's bytes: a regular file (never a FIFO or a device) of bounded size."""
    from loadscope.base.safeio import open_regular, pread_exact

    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_REPORT_BYTES:
            raise ReportError(
                f"not a loadscope report: {format_bytes(size)}, over the"
                f" {format_bytes(MAX_REPORT_BYTES)} a report can be",
                path=path,
            )
        return pread_exact(fd, size, 0, path=path)
    finally:
        os.close(fd)


@dataclass(slots=True)
class DoctorReport:
    probe: ProbeReport
    bench: BenchReport | None
    advice: Advice
    created: str
    failures: list[str]
    #: Multi-rank trials (--ranks, or one rank per GPU when there are several).
    ranks: BroadcastReport | None = None
    #: A pickle-only model: a sample converted to safetensors and both timed.
    conversion: ConversionTrial | None = None
    #: ``--cmd``: the user's own command, cold as it is and after each no-code fix.
    user_command: TimeReport | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "loadscope", "version": __version__},
            "created": self.created,
            "host": {"hostname": platform.node(), "kernel": platform.release()},
            "target": self.probe.target,
            **advice_dict(self.advice),  # the verdict, the recommendations, the notes
            "probe": self.probe.to_dict(),
            "bench": self.bench.to_dict() if self.bench else None,
            **({"ranks": self.ranks.to_dict()} if self.ranks else {}),
            **({"conversion": asdict(self.conversion)} if self.conversion else {}),
            **({"user_command": self.user_command.to_dict()} if self.user_command else {}),
            "failures": self.failures,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)


def to_text(report: DoctorReport) -> str:
    """``doctor --details``: the report as ``loadscope report --text`` lays out its JSON."""
    return report_text(report.to_dict())


def advice_lines(doc: dict[str, Any]) -> list[str]:
    """The verdict, each fix (``report/content.py``: what every output shows of it) and
    the notes, from a doctor report's JSON, for a terminal."""
    return _verdict_and_fixes(doc) + [_note(str(n)) for n in doc.get("notes") or []]


def _verdict_and_fixes(doc: dict[str, Any]) -> list[str]:
    verdict = doc.get("verdict") or {}
    lines = textwrap.wrap(f"verdict: {verdict.get('headline', '')}", 80, subsequent_indent="  ")
    lines.append("")
    for section in fix_sections(doc):
        lines += section_text(section)[1:]  # one fix after another, as they always were
    return lines


#: The sections a terminal shows after the evidence, last (the block pasted into an
#: issue, which the Markdown puts first).
_LAST = ("system",)


def report_text(doc: dict[str, Any]) -> str:
    """A doctor report's JSON for a terminal (``loadscope report --text``, ``doctor
    --details``): the answer first (the verdict, each fix, the notes), then the evidence
    (the probes' figures, the trials, what was not run and why, ...): every section the
    Markdown and the HTML lay out (``report/sections.py``), from the same content."""
    found = sections(doc)
    lines = _verdict_and_fixes(doc)
    # The doctor's notes and the trials' own, each once (the notes section has both).
    lines += [line for s in found if s.id == "notes" for line in section_text(s)[1:]]
    rest = [s for s in found if not s.id.startswith("fix-") and s.id != "notes"]
    rest.sort(key=lambda s: s.id in _LAST)  # stable: the Markdown's order otherwise
    for section in rest:
        lines += section_text(section)
    return "\n".join(lines)


def section_text(section: Section) -> list[str]:
    """One section for a terminal, after a blank line: a fix under its heading (its body
    indented 3), the notes one per line, the probes' figures under "evidence:" in their
    own gutter, any other under ``title:`` (indented 2)."""
    if section.id == "notes":
        return ["", *(_note(plain(b.text)) for b in section.blocks if isinstance(b, Quote))]
    if section.id.startswith("fix-"):
        return ["", section.title, *section_lines(section, indent=3)]
    if section.id == "storage":
        return ["", "evidence:", "", *section_lines(section)]
    return ["", plain(section.title) + ":", *section_lines(section, indent=2)]


def _note(text: str) -> str:
    return textwrap.fill(f"note: {text}", 80, subsequent_indent="      ")
