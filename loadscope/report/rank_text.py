"""The ranks' content: a ``bench --ranks`` report (or a doctor's multi-rank round) as one
section of the content model (:func:`ranks_section`), which the CLI's text, the Markdown
for an issue, the doctor's full report and its HTML all lay out.

May import: ``loadscope.engine.rank_records``, ``loadscope.report.content``,
``loadscope.report.text``, ``loadscope.report.markdown_blocks``,
``loadscope.loaders.rank_events``, ``loadscope.base``.
"""

from __future__ import annotations

from typing import Any

from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.rank_records import OUT_OF_TIME, BroadcastReport
from loadscope.loaders.rank_events import STACK_MODES
from loadscope.report.content import Block, Bullets, Para, Section, Table
from loadscope.report.markdown_blocks import render_section
from loadscope.report.text import section_lines

#: What each column of the table is (said under it).
LEGEND = (
    "median: the slowest rank's time (the load ends when the last rank has every tensor);"
    " rate: model bytes / that time; x ind: speed-up over independent reads in the same"
    " cache state; amp: bytes the ranks read (or mapped and touched) / model bytes;"
    " stor: {stor} / model bytes; held: RSS the ranks gained (the copies of the model in"
    " RAM, pages they share counted once); RSS: peak RSS summed over ranks"
)
#: What ``stor`` counted, by the trials' counter.
STORAGE = {
    "request log": "bytes the storage served (the emulated disk's request log)",
    "object store": "bytes the ranks fetched from the object store (each a fetch: no page"
    " cache in the way)",
    None: "bytes that reached storage (/proc/<pid>/io; '-' where it cannot see them: FUSE, NFS)",
}
#: Said under the table when the round measured what the stacks do with N ranks.
STACKS = (
    "mmap, direct, warm-node: what a stack does with N ranks, beside loadscope's modes:"
    " every rank memory-maps every file (the default loader of transformers, vLLM,"
    " SGLang); every rank reads every file with O_DIRECT (fastsafetensors, Run:ai's"
    " streamer); loadscope warm once for the node, then every rank maps (the warm"
    " timed)"
)


def _secs(value: float | None) -> str:
    """At most six characters: "8.69ms", "1.23s", "123s"."""
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.3g}ms"
    return f"{value:.3g}s" if value < 100 else f"{value:.0f}s"


def _x(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}x"


def _rate(value: float | None) -> str:
    return "-" if not value else format_rate(value)


def _size(value: float | None) -> str:
    return "-" if value is None else format_bytes(value).replace(" ", "")


def header_lines(ranks: dict[str, Any]) -> tuple[str, str]:
    """What was loaded, and by how many ranks how often."""
    t, o = ranks.get("target") or {}, ranks.get("options") or {}
    return (
        f"{t.get('spec')} ({t.get('files')} file(s), {format_bytes(ranks.get('model_bytes') or 0)},"
        f" {ranks.get('tensors')} tensors)",
        f"{o.get('ranks')} ({o.get('backend') or '?'}, {o.get('device')}),"
        f" {o.get('repeats')} repeat(s){' after a warm-up round' if o.get('warmup') else ''}",
    )


def _failed(ranks: dict[str, Any]) -> list[str]:
    """Why each mode and cache state has no result (the launch's own failures are listed
    apart)."""
    stopped = "; ".join(ranks.get("failures") or [])
    trials = ranks.get("trials") or []
    lines = []
    for s in ranks.get("summary") or []:
        if s.get("median_seconds") is not None:
            continue
        at = (s.get("mode"), s.get("cache"))
        bad = next(
            (
                t
                for t in trials
                if (t.get("mode"), t.get("cache")) == at and t.get("status") != "ok"
            ),
            None,
        )
        why = (bad or {}).get("reason") or "no trial with a verified cache state"
        if why == OUT_OF_TIME:
            continue  # said on its row
        if bad is not None and (why == stopped or why.startswith("not run:")):
            why = "the launch stopped early (see why)"
        lines.append(f"{s.get('mode')} {s.get('cache')}: {why}")
    return lines


def _row(s: dict[str, Any], first: bool, out_of_time: set[tuple[str, str]]) -> tuple[str, ...]:
    if s.get("median_seconds") is None:
        at = (str(s.get("mode")), str(s.get("cache")))
        return (*at, "not run: the budget ran out" if at in out_of_time else "failed (below)")
    row = (
        str(s.get("mode")),
        str(s.get("cache")),
        _secs(s.get("median_seconds")),
        _rate(s.get("median_bytes_per_s")),
        _x(s.get("speedup_vs_independent")),
        _x(s.get("read_amplification"), 1),
        _x(s.get("storage_amplification"), 1),
        _size(s.get("rss_delta_bytes_total")),
        _size(s.get("peak_rss_bytes_total")),
    )
    return (*row, _secs(s.get("first_run_seconds"))) if first else row


def ranks_section(ranks: dict[str, Any]) -> Section:
    """A ranks report's JSON as one section: the table (a column for the warm-up round
    when one ran), what its columns are, then what failed or was left out and the notes."""
    summary = ranks.get("summary") or []
    first = any(s.get("first_run_seconds") is not None for s in summary)
    header: tuple[str, ...] = ("mode", "cache", "median", "rate", "x ind", "amp", "stor")
    header += ("held", "RSS", *(("first",) if first else ()))
    out_of_time = {
        (str(t.get("mode")), str(t.get("cache")))
        for t in ranks.get("trials") or []
        if t.get("reason") == OUT_OF_TIME and not t.get("warmup")
    }
    rows = tuple(_row(s, first, out_of_time) for s in summary)
    width = len(header)
    rows = tuple(r + ("",) * (width - len(r)) for r in rows)
    counters = {t.get("storage_counter") for t in ranks.get("trials") or []}
    stor = STORAGE[next((c for c in ("request log", "object store") if c in counters), None)]
    legend = LEGEND.format(stor=stor) + ("; first: the warm-up round." if first else ".")
    blocks: list[Block] = [Table(header, rows), Para(legend)]
    if any(s.get("mode") in STACK_MODES for s in summary):
        blocks.append(Para(STACKS + "."))
    failures = [str(f) for f in ranks.get("failures") or []]
    if failed := _failed(ranks):
        blocks.append(Para("failed:"))
        blocks.append(Bullets(tuple(f[:240] for f in failed)))
    if failures:
        trials = ranks.get("trials") or []
        early = any(t.get("status") != "ok" and not t.get("ranks") for t in trials)
        blocks.append(
            Para("the launch stopped early:" if early else "the ranks reported problems:")
        )
        blocks.append(Bullets(tuple(f[:240] for f in failures)))
    if skipped := ranks.get("skipped") or {}:
        blocks.append(Para("skipped:"))
        blocks.append(Bullets(tuple(f"{k}: {v}" for k, v in skipped.items())))
    unverified = [
        t
        for t in ranks.get("trials") or []
        if t.get("status") == "ok" and not t.get("cache_verified")
    ]
    if unverified:
        u = unverified[0]
        blocks.append(
            Para(
                f"{len(unverified)} trial(s) kept out of the medians: cache state not verified"
                f" (first: #{u.get('id')} {u.get('cache_note') or ''})"
            )
        )
    if notes := [str(n) for n in ranks.get("notes") or []]:
        blocks.append(Bullets(tuple(f"note: {n}" for n in notes)))
    o = ranks.get("options") or {}
    title = (
        f"{o.get('ranks')} ranks ({o.get('backend') or '?'}, {o.get('device')}): the slowest rank"
    )
    return Section("ranks", title, tuple(blocks))


def to_text(report: BroadcastReport) -> str:
    """One screen for the CLI: what ran, the table, then what failed or was left out."""
    doc = report.to_dict()
    target, ranks = header_lines(doc)
    lines = [f"target   {target}", f"ranks    {ranks}", ""]
    return "\n".join(lines + section_lines(ranks_section(doc)))


def to_markdown(report: BroadcastReport) -> str:
    """The same section as Markdown (for an issue)."""
    doc = report.to_dict()
    head = "target: {}; ranks: {}".format(*header_lines(doc))
    section = ranks_section(doc)
    body = render_section(Section(section.id, "", section.blocks))
    return "\n".join(["## Multi-rank loading", "", head, "", *body]).rstrip() + "\n"
