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
from loadscope.diagnosis.timing_text import table_rows
from loadscope.engine.bench import BenchReport
from loadscope.engine.broadcast import BroadcastReport
from loadscope.engine.probing import ProbeReport
from loadscope.report.bench_text import to_text as bench_text
from loadscope.report.content import Quote, Section, fix_sections
from loadscope.report.probe_text import to_text as probe_text
from loadscope.report.schema import SchemaError
from loadscope.report.schema import check as check_schema
from loadscope.report.sections import ceiling_line, sections
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


#: The evidence the terminal lays out from the content model, as the Markdown and the HTML
#: do (the probes' summary and the trial table are their own commands' text).
SHARED_SECTIONS = ("user-command", "conversion", "ranks", "failures")


def to_text(report: DoctorReport) -> str:
    doc = report.to_dict()
    lines = advice_lines(doc)
    lines += ["", "evidence:", "", probe_text(report.probe)]
    if report.bench is not None:
        extra = table_rows(report.user_command) if report.user_command else []
        lines += ["", bench_text(report.bench, extra)]
        if line := ceiling_line(doc["probe"], doc["bench"]):
            lines += ["", textwrap.fill(line.replace("`", ""), 80)]
    return "\n".join(lines + shared_lines(doc))


def shared_lines(doc: dict[str, Any]) -> list[str]:
    """The :data:`SHARED_SECTIONS` of a doctor report's JSON, for a terminal: each under
    its title, from the same content the Markdown and the HTML lay out."""
    return [line for s in sections(doc) if s.id in SHARED_SECTIONS for line in _section_text(s)]


def advice_lines(doc: dict[str, Any]) -> list[str]:
    """The verdict, each fix (``report/content.py``: what every output shows of it) and
    the notes, from a doctor report's JSON, for a terminal."""
    verdict = doc.get("verdict") or {}
    lines = [f"verdict: {verdict.get('headline', '')}", ""]
    for section in fix_sections(doc):
        lines += _section_text(section)[1:]  # one fix after another, as they always were
    return lines + [_note(str(n)) for n in doc.get("notes") or []]


def report_text(doc: dict[str, Any]) -> str:
    """A saved report's JSON for a terminal (``loadscope report --text``): the verdict,
    then every section the Markdown and the HTML lay out (``report/sections.py``), in
    their order, from the same content."""
    verdict = doc.get("verdict") or {}
    lines = textwrap.wrap(f"verdict: {verdict.get('headline', '')}", 80, subsequent_indent="  ")
    for section in sections(doc):
        lines += _section_text(section)
    return "\n".join(lines)


def _section_text(section: Section) -> list[str]:
    """One section for a terminal, after a blank line: a fix under its heading (its body
    indented 3), the notes one per line, any other under ``title:`` (indented 2)."""
    if section.id == "notes":
        return ["", *(_note(plain(b.text)) for b in section.blocks if isinstance(b, Quote))]
    if section.id.startswith("fix-"):
        return ["", section.title, *section_lines(section, indent=3)]
    return ["", plain(section.title) + ":", *section_lines(section, indent=2)]


def _note(text: str) -> str:
    return textwrap.fill(f"note: {text}", 80, subsequent_indent="      ")
