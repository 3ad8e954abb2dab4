"""The probe's figures as content (``loadscope.report.probe_text``): what the storage is,
the machine, the page cache, the cold latency, the throughput by request size and by
readers (as bars on one scale), fio's figures, the registered probes' lines and the
notes, read from a probe report's JSON. ``loadscope probe``, the doctor's full text,
``report --text``, the Markdown and the HTML all lay out these blocks
(:func:`probe_blocks`): a terminal sets them in 80 columns with an 11-column gutter
of labels; the JSON has everything.

Owns :func:`probe_blocks` (:func:`probe_parts`), :func:`to_text` and :func:`latency_text`.
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
from loadscope.probes.registry import block_lines
from loadscope.report.content import Bars, Block, Code, Fields
from loadscope.report.text import blocks_text

Doc = Mapping[str, Any]


def latency_text(lat: Doc) -> str:
    """The cold read latency probe's figures (its block in the report's JSON), as the
    terminal, the Markdown, the HTML and the app say them."""
    return (
        f"cold 4 KiB reads ({lat.get('method')}, {lat.get('samples')} samples):"
        f" p50 {format_us(lat['p50_us'])}, p90 {format_us(lat['p90_us'])},"
        f" p99 {format_us(lat['p99_us'])}"
    )


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
    if isinstance(t := probe.get("target"), Mapping):
        size = _size(t.get("total_bytes"))
        rows.append(("target", f"{t.get('spec')} ({t.get('files')} file(s), {size})"))
    seen: set[str] = set()
    for f in _dicts(probe.get("files")):
        # Files on one filesystem share its storage probe: said once.
        key = json.dumps([f.get(k) for k in ("mount", "device", "bdi")], sort_keys=True)
        if key not in seen:
            seen.add(key)
            rows += _storage_rows(f)
    if "system" in probe:
        rows += _system_rows(probe)
    rows += _residency_rows(probe)
    if "latency" in probe:
        lat = _dict(probe.get("latency"))
        rows.append(("latency", latency_text(lat) if _ok(lat) else _status(lat)))
    middle = _throughput_blocks(_dict(probe["throughput"])) if "throughput" in probe else []
    middle += _fio_blocks(_dict(probe.get("fio")))
    tail = [row for _spec, found in block_lines(dict(probe)) for row in found]
    tail += [("note", str(n)) for n in probe.get("notes") or []]
    if "elapsed_s" in probe:
        # In a doctor run the probes have a share of its budget: said as theirs.
        took = f"{_num(probe.get('elapsed_s')):.1f} s of the probes'"
        tail.append(("took", f"{took} {_num(probe.get('budget_s')):g} s budget"))
    return Fields(tuple(rows)), middle, Fields(tuple(tail))


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


def _storage_rows(f: Doc) -> list[tuple[str, str]]:
    m = _dict(f.get("mount"))
    if not _ok(m):
        return [("storage", _status(m))]
    rows = [("storage", f"{m.get('storage_class')}: {m.get('reason')}")]
    if m.get("resolved_class"):
        rows.append(("", f"under the overlay: {m['resolved_class']} ({m.get('resolved_reason')})"))
    rows.append(("", f"mount {m.get('mount_point')} ({m.get('fstype')}, {m.get('source')})"))
    device = _dict(f.get("device"))
    if _ok(device):
        for disk in _dicts(device.get("disks")):
            bits = [str(disk.get("transport")), disk.get("model") or "no model string"]
            if disk.get("rotational"):
                bits.append("rotational")
            if disk.get("scheduler"):
                bits.append(f"scheduler {disk['scheduler']}")
            if disk.get("max_sectors_kb"):
                bits.append(f"max_sectors_kb {disk['max_sectors_kb']}")
            rows.append(("", f"disk {disk.get('name')}: {', '.join(bits)}"))
    bdi = _dict(f.get("bdi"))
    if _ok(bdi) and bdi.get("read_ahead_kb") is not None:
        rows.append(("", f"read_ahead_kb {bdi['read_ahead_kb']} ({bdi.get('path')})"))
    fuse = _dict(f.get("fuse_connection"))
    if _ok(fuse):
        conn = (
            f"max_background {fuse.get('max_background')},"
            f" congestion {fuse.get('congestion_threshold')}"
        )
        rows.append(("", f"fuse connection: {conn}"))
    return rows


def _system_rows(probe: Doc) -> list[tuple[str, str]]:
    s = _dict(probe.get("system"))
    if not _ok(s):
        return [("system", _status(s))]
    model = int((probe.get("target") or {}).get("total_bytes") or 0)
    limit = _dict(s.get("cgroup")).get("limit_bytes")
    fits = "fits" if int(s.get("memory_headroom_bytes") or 0) >= model else "does NOT fit"
    memory = (
        f"{_size(s.get('ram_available_bytes'))} available of {_size(s.get('ram_total_bytes'))};"
        f" cgroup limit {_size(limit) if limit else 'none'};"
        f" model {_size(model)} ({fits} in RAM)"
    )
    where = s.get("virtualization") or "bare metal?"
    container = f", {s['container']}" if s.get("container") else ""
    system = (
        f"{s.get('cpus_usable')} CPUs ({s.get('cpu_model') or '?'}), kernel {s.get('kernel')},"
        f" {where}{container}"
    )
    return [("memory", memory), ("system", system)]


def _residency_rows(probe: Doc) -> list[tuple[str, str]]:
    files = _dicts(probe.get("files"))
    known = [
        float(r["fraction"])
        for f in files
        if _ok(r := _dict(f.get("residency"))) and r.get("fraction") is not None
    ]
    if known:
        mean = sum(known) / len(known)
        return [("page cache", f"{mean:.0%} resident before probing ({len(known)} file(s))")]
    if files:
        first = _dict(files[0].get("residency"))
        why = first.get("reason") or (first.get("note") if _ok(first) else "") or ""
        return [("page cache", f"unknown: {why}")]
    return []


def _throughput_blocks(thr: Doc) -> list[Block]:
    if not _ok(thr):
        return [Fields((("throughput", _status(thr)),))]
    seq, par = _dicts(thr.get("sequential")), _dicts(thr.get("parallel"))
    ram = _dict(thr.get("into_ram"))
    # The bars share one scale, the into-RAM point's too.
    scale = max((_num(p.get("bytes_per_s")) for p in [*seq, *par, ram] if p), default=0.0)
    out: list[Block] = [
        Fields((("throughput", f"cold, {thr.get('method')}; one reader, by request size:"),)),
        Bars(
            ("request", "rate"), tuple(_point(p, _size(p.get("block_bytes"))) for p in seq), scale
        ),
    ]
    if par:
        out += [
            Fields((("", "parallel readers, 1 MiB requests:"),)),
            Bars(("readers", "rate"), tuple(_point(p, _readers(p)) for p in par), scale),
        ]
    if ram:
        best = max(_num(p.get("bytes_per_s")) for p in par) if par else 0.0
        share = f"  {_num(ram.get('bytes_per_s')) / best:.2f}x" if best > 0 else ""
        landed = _size(ram.get("bytes_read"))
        out += [
            Fields((("", f"into fresh RAM, where a loader lands it ({landed}):"),)),
            Bars(("readers", "rate"), (_point(ram, _readers(ram), share),), scale),
        ]
    elif par and thr.get("into_ram_reason"):
        out.append(Fields((("into RAM", str(thr["into_ram_reason"])),)))
    return out


def _point(p: Doc, label: str, remark: str | None = None) -> tuple[str, str, float, str]:
    rate = _num(p.get("bytes_per_s"))
    if remark is None:
        avg = p.get("avg_request_bytes")
        remark = f"  kernel {format_bytes(avg)}/req" if avg else ""
    return label, format_rate(rate), rate, remark


def _readers(p: Doc) -> str:
    n = p.get("readers")
    return f"{n} reader{'s' if n != 1 else ''}"


def _fio_blocks(fio: Doc) -> list[Block]:
    """fio's figures beside the probe's (with --fio), else how to reproduce with fio."""
    jobs = _dicts(fio.get("jobs"))
    if not jobs:
        return []
    if not _ok(fio):
        rows = [] if fio.get("status") == "skipped" else [("fio", _status(fio))]
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


def _status(block: Doc) -> str:
    return f"{block.get('status', 'unavailable')}: {block.get('reason')}"


def _ok(block: Doc) -> bool:
    return block.get("status") == "ok"


def _dict(value: Any) -> Doc:
    return value if isinstance(value, Mapping) else {}


def _dicts(value: Any) -> list[Doc]:
    return [v for v in value or [] if isinstance(v, Mapping)] if isinstance(value, list) else []


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _size(value: Any) -> str:
    return format_bytes(int(value)) if isinstance(value, int | float) else "?"
