"""A doctor report's sections, once, for every rendering of it (Markdown, HTML, the app's
export): what each says, not how it looks.

:func:`sections` reads the report's JSON and returns :class:`Section` s of a few plain
blocks (paragraphs, bullets, code, tables, quotes); text may hold ``code`` spans in
backticks and ``**bold**``, which each renderer turns into its own markup. A section's
``id`` lets a renderer add what only it can draw (the HTML's charts go with ``trials``
and ``storage``).

May import: ``loadscope.advice``, ``loadscope.engine``, ``loadscope.probes`` (how each
probe's block reads), ``loadscope.base``, and this
folder's content model and content (:mod:`~loadscope.report.content`,
:mod:`~loadscope.report.probe_text`, :mod:`~loadscope.report.bench_text`,
:mod:`~loadscope.report.rank_text`).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.phases import PhaseTable, PhaseTime, answer
from loadscope.engine.sampling import whole_rate
from loadscope.probes.fio_probe import job_said
from loadscope.probes.iobench import best_read, into_ram_rate
from loadscope.probes.spec import block_of
from loadscope.probes.system import system_info_lines
from loadscope.report.bench_text import (
    bench_blocks,
    command_cells,
    format_lines,
    seconds_cell,
)
from loadscope.report.content import (
    Bars,
    Block,
    Bullets,
    Code,
    Para,
    Quote,
    Section,
    Table,
    fix_sections,
)
from loadscope.report.probe_text import probe_blocks, source_title
from loadscope.report.rank_text import ranks_section


def sections(doc: dict[str, Any]) -> list[Section]:
    """Every section of a doctor report, in reading order; a section with nothing to
    say is left out."""
    found = [
        _system_info(doc),
        _storage(doc),
        *fix_sections(doc),
        _trials(doc),
        user_command_section(doc),
        _formats(doc),
        _conversion(doc),
        _not_run(doc),
        _ranks(doc),
        _fio(doc),
        _notes(doc),
        _failures(doc),
    ]
    return [s for s in found if s is not None]


def _system_info(doc: dict[str, Any]) -> Section | None:
    """The block people paste into an issue (the shape of `transformers env`): loadscope's
    version, then the machine's lines (``probes/system.py``)."""
    probe = doc.get("probe") or {}
    host = doc.get("host") or {}
    machine = system_info_lines(block_of(probe.get("system")), str(host.get("kernel", "?")))
    if not machine:
        return None
    lines = [f"- loadscope version: {doc['tool']['version']}", *machine]
    return Section("system", "System Info", (Code("\n".join(lines)),))


def _storage(doc: dict[str, Any]) -> Section | None:
    """What the storage is and how it behaved cold, the machine, the page cache and each
    registered probe's lines (``report/probe_text.py``: what ``loadscope probe`` says):
    the evidence under the verdict."""
    probe = doc.get("probe")
    if not isinstance(probe, dict) or not (probe.get("files") or source_title(probe.get("target"))):
        return None
    return Section("storage", "Storage and this machine (the probes)", probe_blocks(probe))


def _trials(doc: dict[str, Any]) -> Section | None:
    """The trial table and what goes with it (``report/bench_text.py``'s content, as
    ``loadscope bench`` shows it), the user's command's runs among its rows, the fastest
    cold load against the probe's best read under it; what was skipped, what failed and
    the notes have their own sections."""
    bench = doc.get("bench")
    if not bench:
        return None
    ceiling = ceiling_line(doc.get("probe") or {}, bench)
    blocks = bench_blocks(
        bench,
        extra_rows=_user_command_rows(doc),
        under_table=(Para(ceiling),) if ceiling else (),
        in_report=True,
    )
    return Section("trials", "trials (median seconds)", blocks)


def probe_best_read(probe: Mapping[str, Any]) -> float | None:
    """The fastest read the probe measured on the model's mount (parallel readers into
    reused buffers): the one reference value the text, the Markdown and the HTML chart
    draw, or None without a parallel scan."""
    return best_read(block_of(probe.get("throughput")))


#: A loader this far above the probe's best read means the probe's short scan under-read
#: the storage: its value is then no ceiling, and the line says so.
CEILING_SLACK = 1.15


def ceiling_line(probe: Mapping[str, Any], bench: Mapping[str, Any]) -> str | None:
    """The fastest cold CPU load (measured whole) against the probe's best read on the same
    mount (:func:`probe_best_read`) and its read into fresh RAM, or None without a cold
    time or a parallel scan. The probe's figure is called a limit only while no loader
    beats it beyond noise; an estimate is never compared (it is not a load that ran)."""
    if str((bench.get("options") or {}).get("device", "cpu")) != "cpu":
        return None
    storage = probe_best_read(probe)
    total = int((bench.get("target") or {}).get("total_bytes") or 0)
    cold = [
        (rate, str(s.get("strategy")))
        for s in bench.get("summary") or []
        if isinstance(s, dict) and s.get("cache") == "cold" and s.get("scope") in (None, "whole")
        if (rate := whole_rate(s, total))
    ]
    if storage is None or not cold:
        return None
    rate, name = max(cold)
    text = f"fastest cold load (measured whole): `{name}` at {format_rate(rate)},"
    ram = into_ram_rate(block_of(probe.get("throughput")))
    if rate > CEILING_SLACK * storage:
        return (
            f"{text} {rate / storage:.2f}x the probe's best read ({format_rate(storage)}):"
            " the probe's short scan under-read this storage, so its figure is no limit here"
        )
    into = f"; into fresh RAM the probe read {format_rate(ram)}" if ram else ""
    return f"{text} {rate / storage:.2f}x the probe's best read ({format_rate(storage)}){into}"


def _conversion(doc: dict[str, Any]) -> Section | None:
    conv = doc.get("conversion")
    if not conv:
        return None
    name = str(conv.get("source", "?")).rsplit("/", 1)[-1]
    items = [f"sample: `{name}` ({format_bytes(int(conv.get('sample_bytes') or 0))})"]
    if conv.get("where"):
        items.append(f"written {conv['where']}; removed afterwards: {bool(conv.get('removed'))}")
    for cache in ("cold", "warm"):
        pk, st = conv.get(f"pickle_{cache}_s"), conv.get(f"safetensors_{cache}_s")
        if pk and st:
            items.append(
                f"{cache}: torch.load {pk:.3g} s, load_file {st:.3g} s ({pk / st:.1f}x)"
                + ("; the same tensors, digests checked" if conv.get("verified") else "")
            )
    if conv.get("reason"):
        items.append(f"not measured: {conv['reason']}")
    return Section("conversion", "a sample converted to safetensors", (Bullets(tuple(items)),))


def _user_command_rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    """``doctor --cmd``: the user's command's runs as rows of the trial table (the median
    run's counters, as the terminal's rows; its own section says what each fix changes)."""
    user = doc.get("user_command")
    if not isinstance(user, dict):
        return []
    total = int(user.get("total_bytes") or 0)
    rows: list[tuple[str, ...]] = []
    for v in user.get("variants") or []:
        median = v.get("median_seconds") if isinstance(v, dict) else None
        if not isinstance(median, int | float) or not median:
            continue
        runs = [r for r in v.get("runs") or [] if isinstance(r, dict)]
        ran = [r for r in runs if isinstance(r.get("seconds"), int | float)]
        timed = sorted(ran, key=lambda r: float(r["seconds"]))
        times = [float(r["seconds"]) for r in timed]
        mid = timed[len(timed) // 2] if timed else {}
        name = _USER_VARIANTS.get(str(v.get("name")), str(v.get("name")))
        cells = command_cells(
            f"your command: {name}",
            float(median),
            total,
            mid.get("major_faults"),
            mid.get("device_request_bytes"),
            mid.get("peak_rss_bytes"),
        )
        first = next(
            (float(r["seconds"]) for r in runs if isinstance(r.get("seconds"), int | float)), None
        )
        low, high = (times[0], times[-1]) if times else (None, None)
        rows.append(
            (
                *cells,
                str(len(times)),
                seconds_cell(first),
                f"{seconds_cell(low)}-{seconds_cell(high)}",
            )
        )
    return rows


#: How the report names each run of the user's command.
_USER_VARIANTS = {
    "as-is": "as is, cold",
    "readahead": "readahead raised",
    "warm": "loadscope warm first",
    "copy": "local copy",
}


def user_command_section(doc: dict[str, Any]) -> Section | None:
    """``doctor --cmd``: the user's own load, as it is and after each no-code fix."""
    user = doc.get("user_command")
    if not isinstance(user, dict) or not isinstance(user.get("variants"), list):
        return None
    variants = [v for v in user["variants"] if isinstance(v, dict)]
    base = next((v.get("median_seconds") for v in variants if v.get("name") == "as-is"), None)
    rows = []
    for v in variants:
        name = _USER_VARIANTS.get(str(v.get("name")), str(v.get("name")))
        median = v.get("median_seconds")
        if v.get("skipped") or not isinstance(median, int | float):
            runs = [r for r in v.get("runs") or [] if isinstance(r, dict)]
            why = v.get("skipped") or next((r.get("reason") for r in runs if r.get("reason")), "")
            rows.append((name, "-", "-", str(why or "not timed")))
            continue
        ratio = f"{base / median:.2f}x" if isinstance(base, int | float) and median else "-"
        rows.append((name, f"{median:.3g} s", ratio, str(v.get("changes") or "")))
    command = shlex.join(str(a) for a in user.get("argv") or [])
    blocks: list[Block] = [
        Code(command, "shell"),
        Table(("run", "time, cold", "vs as is", "what it changes"), tuple(rows)),
        Para("Each run after the model's files were evicted and verified cold"
             " (`loadscope time` repeats them and reports medians)."),
        *_phases(user.get("phases")),
    ]  # fmt: skip
    title = "your command, cold, one run each (outside the budget)"
    return Section("user-command", title, tuple(blocks), collapsed=False)


def _phases(doc: object) -> list[Block]:
    """``--profile``: the profiled cold run's wall time by phase, as bars, and what it
    means for the load fixes (the words ``loadscope time`` prints)."""
    if not isinstance(doc, dict):
        return []
    table = PhaseTable.from_dict(doc)
    if table.reason:
        return [Para(f"Where the time goes: not profiled: {table.reason}.")]
    rows = tuple(
        (p.name, f"{p.seconds:.2f} s ({p.share:.0%}){_arrived(p)}", p.seconds, ", ".join(p.frames))
        for p in table.phases
    )
    head = Para(
        f"Where the time goes: one more cold run, sampled by py-spy {table.rate_hz} times a"
        f" second ({table.wall_s:.3g} s)."
    )
    scale = max((p.seconds for p in table.phases), default=0.0)
    return [head, Bars(("phase", "seconds"), rows, scale), *(Para(f"{s}.") for s in answer(table))]


def _arrived(row: PhaseTime) -> str:
    """A phase's bytes, where they were counted (the words ``loadscope time`` prints)."""
    return "" if row.arrived_bytes is None else f", {format_bytes(row.arrived_bytes)} arrived"


def _not_run(doc: dict[str, Any]) -> Section | None:
    skipped = (doc.get("bench") or {}).get("skipped") or {}
    if not skipped:
        return None
    items = tuple(f"`{name}`: {why}" for name, why in skipped.items())
    return Section("not-run", "strategies not run, and why", (Bullets(items),))


def _ranks(doc: dict[str, Any]) -> Section | None:
    ranks = doc.get("ranks")
    return ranks_section(ranks) if isinstance(ranks, dict) and ranks.get("summary") else None


def _fio(doc: dict[str, Any]) -> Section | None:
    jobs = ((doc.get("probe") or {}).get("fio") or {}).get("jobs") or []
    if not jobs:
        return None
    blocks: list[Block] = []
    for job in jobs:
        blocks += [
            Bullets((f"{job_said(job)}:",)),
            Code(str(job.get("command")), "sh"),
        ]
    return Section("fio", "reproduce the storage numbers with fio", tuple(blocks))


def _formats(doc: dict[str, Any]) -> Section | None:
    """Seed 000's comparison, when the model is there in both formats: safetensors against
    torch.load on the same tensors, cold and warm."""
    bench = doc.get("bench")
    lines = format_lines(bench) if isinstance(bench, dict) else []
    if not lines:
        return None
    return Section(
        "formats", "safetensors vs torch.load", (Bullets(tuple(lines)),), collapsed=False
    )


def _notes(doc: dict[str, Any]) -> Section | None:
    # The doctor's notes, then the bench's own (trials the budget left out, files loaded
    # whole although sampled, how a cache state was verified): each said once.
    bench_notes = (doc.get("bench") or {}).get("notes") or []
    notes = list(dict.fromkeys([*(doc.get("notes") or []), *bench_notes]))
    if not notes:
        return None
    return Section("notes", "", tuple(Quote(str(n)) for n in notes), collapsed=False)


def _failures(doc: dict[str, Any]) -> Section | None:
    skipped = (doc.get("bench") or {}).get("skipped") or {}
    steps = other_failures(doc.get("failures") or [], skipped)
    if not steps:
        return None
    return Section("failures", "failed or skipped steps", (Bullets(tuple(steps)),))


def other_failures(failures: list[str], skipped: Mapping[str, str]) -> list[str]:
    """The failures not already listed with the trials (a strategy the bench skipped)."""
    listed = {f"{name}: skipped: {why}" for name, why in skipped.items()}
    return [f for f in failures if f not in listed]
