"""The content model's blocks (:mod:`~loadscope.report.content`) as terminal text: 80
columns, the inline markup (`code`, **bold**) dropped, code indented as it is."""

from __future__ import annotations

import re
import textwrap

from loadscope.report.content import Bars, Block, Bullets, Code, Fields, Para, Quote, Section, Table

WIDTH = 80
#: The gutter a :class:`~loadscope.report.content.Fields` block's labels take.
LABEL_WIDTH = 11
#: How wide a :class:`~loadscope.report.content.Bars` block's bars may grow.
BAR_WIDTH = 20


def plain(text: str) -> str:
    """The inline markup removed: `code` and **bold** as their text."""
    return re.sub(r"\*\*([^*]+)\*\*", r"\1", text).replace("`", "")


def block_lines(block: Block, indent: int = 0, width: int = WIDTH) -> list[str]:
    """One block, indented by ``indent`` columns, in ``width`` columns."""
    pad = " " * indent
    if isinstance(block, Para | Quote):
        mark = "> " if isinstance(block, Quote) else ""
        return [
            textwrap.fill(
                plain(line),
                width,
                initial_indent=pad + mark,
                subsequent_indent=pad + mark,
                break_on_hyphens=False,
            )
            for line in block.text.splitlines() or [""]
        ]
    if isinstance(block, Bullets):
        return [
            textwrap.fill(
                plain(item).replace("\n", " "),
                width,
                initial_indent=pad + "- ",
                subsequent_indent=pad + "  ",
                break_on_hyphens=False,
            )
            for item in block.items
        ]
    if isinstance(block, Code):
        return [pad + "  " + line for line in block.text.splitlines()]
    if isinstance(block, Table):
        return _table_lines(block, pad, width)
    if isinstance(block, Fields):
        return [
            textwrap.fill(
                text,
                width=width,
                initial_indent=f"{pad}{label:<{LABEL_WIDTH}}",
                subsequent_indent=pad + " " * LABEL_WIDTH,
                break_on_hyphens=False,
            )
            for label, text in block.rows
        ]
    if isinstance(block, Bars):
        drawn = [(row, bar(row[2], block.scale)) for row in block.rows]
        return [
            f"{pad}  {label:>10}   {figure:>10}  {drawn:<{BAR_WIDTH}}{remark}".rstrip()
            for (label, figure, _value, remark), drawn in drawn
        ]
    raise TypeError(block)


def bar(value: float, biggest: float, width: int = BAR_WIDTH) -> str:
    """``value`` as a bar of ``#`` on a scale whose largest value fills ``width``."""
    return "#" * (max(1, round(width * value / biggest)) if biggest > 0 and value > 0 else 0)


def _table_lines(table: Table, pad: str, width: int) -> list[str]:
    """Columns as wide as their widest cell, two spaces apart (one where two would pass
    80 columns), figures right-aligned, a rule under the header; a last column too wide
    for the line (a reason, what a fix changes) wraps under itself."""
    rows = [tuple(plain(c) for c in r) for r in (table.header, *table.rows)]
    # A row that says why it has no figures (its third cell, the rest empty) spans the
    # columns after its name: its reason sizes none of them.
    sized = [rows[0], *(r for r in rows[1:] if not _spans(r))]
    widths = [max(len(r[i]) for r in sized) for i in range(len(table.header))]
    # A column of figures ("1.2 GB/s", "0.52x", "-") lines up on the right.
    right = [
        i > 0 and all(_FIGURE.match(r[i]) or not r[i] for r in sized[1:])
        for i in range(len(widths))
    ]
    fixed = sum(widths[:-1])
    last_needs = widths[-1] if right[-1] else min(widths[-1], 24)
    if len(widths) > 3 and len(pad) + fixed + len(widths) - 1 + last_needs > width:
        return _split_table(table, widths, pad, width)
    gap = "  " if len(pad) + fixed + 2 * (len(widths) - 1) + last_needs <= width else " "
    start = len(pad) + fixed + len(gap) * (len(widths) - 1)
    room = max(width - start, 24)

    def line(row: tuple[str, ...]) -> list[str]:
        if _spans(row):
            head = pad + gap.join(c.ljust(w) for c, w in zip(row[:2], widths[:2], strict=True))
            return textwrap.wrap(
                row[2],
                width,
                initial_indent=head + gap,
                subsequent_indent=" " * (len(head) + len(gap)),
                break_on_hyphens=False,
            )
        laid = zip(row[:-1], widths[:-1], right[:-1], strict=True)
        head = pad + gap.join(c.rjust(w) if r else c.ljust(w) for c, w, r in laid)
        last = row[-1].rjust(widths[-1]) if right[-1] else row[-1]
        parts = textwrap.wrap(last, room, break_on_hyphens=False) or [""]
        if start + len(parts[0]) > width + 8:  # no room beside: under the row
            return [head.rstrip(), *(" " * (len(pad) + 4) + p for p in parts)]
        first = (head + gap + parts[0]).rstrip()
        return [first, *(" " * start + p for p in parts[1:])]

    header = line(rows[0])
    out = [*header, pad + "-" * (len(header[0]) - len(pad))]
    return out + [text for r in rows[1:] for text in line(r)]


def _spans(row: tuple[str, ...]) -> bool:
    """A row with a third cell and nothing after it: a reason, not figures."""
    return len(row) > 3 and bool(row[2]) and not any(row[3:])


def _split_table(table: Table, widths: list[int], pad: str, width: int) -> list[str]:
    """A table too wide for the line as two: the columns that fit, then the first two
    (what names a row) with the rest; every cell kept."""
    keep, used = 2, len(pad) + widths[0] + widths[1] + 1
    while keep < len(widths) and used + 1 + widths[keep] <= width:
        used += 1 + widths[keep]
        keep += 1
    keep = max(keep, 3)

    def part(columns: list[int]) -> Table:
        return Table(
            tuple(table.header[i] for i in columns),
            tuple(tuple(r[i] if i < len(r) else "" for i in columns) for r in table.rows),
        )

    first = part(list(range(keep)))
    rest = part([0, 1, *range(keep, len(widths))])
    return [*_table_lines(first, pad, width), "", *_table_lines(rest, pad, width)]


#: A cell that is a figure: a number with its unit, a ratio, "-" for none or "?" for
#: one that cannot be trusted.
_FIGURE = re.compile(r"^(-|\?|[\d.]+\s?\w*(/s)?x?)$")


def preformatted_runs(blocks: tuple[Block, ...]) -> list[tuple[Block, ...]]:
    """``blocks`` with each run of :class:`Fields` and :class:`Bars` together (one
    preformatted block), every other block alone."""
    runs: list[list[Block]] = []
    for block in blocks:
        together = isinstance(block, Fields | Bars)
        if together and runs and isinstance(runs[-1][-1], Fields | Bars):
            runs[-1].append(block)
        else:
            runs.append([block])
    return [tuple(run) for run in runs]


def blocks_text(
    blocks: tuple[Block, ...] | list[Block], indent: int = 0, width: int = WIDTH
) -> list[str]:
    return [line for block in blocks for line in block_lines(block, indent, width)]


def section_lines(section: Section, indent: int = 0, width: int = WIDTH) -> list[str]:
    """A section's blocks, then each child under its title (``title:``), indented, in
    ``width`` columns (a terminal's 80 by default; the app gives its own)."""
    lines = blocks_text(section.blocks, indent, width)
    pad = " " * indent
    for child in section.children:
        title = plain(child.title) + ":"
        lines += textwrap.wrap(title, width, initial_indent=pad, subsequent_indent=pad + "  ")
        lines += section_lines(child, indent + 2, width)
    return lines
