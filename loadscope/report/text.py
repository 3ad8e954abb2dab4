"""The content model's blocks (:mod:`~loadscope.report.content`) as terminal text: 80
columns, the inline markup (`code`, **bold**) dropped, code indented as it is."""

from __future__ import annotations

import re
import textwrap

from loadscope.report.content import Block, Bullets, Code, Para, Quote, Section, Table

WIDTH = 80


def plain(text: str) -> str:
    """The inline markup removed: `code` and **bold** as their text."""
    return re.sub(r"\*\*([^*]+)\*\*", r"\1", text).replace("`", "")


def block_lines(block: Block, indent: int = 0) -> list[str]:
    """One block, indented by ``indent`` columns."""
    pad = " " * indent
    if isinstance(block, Para | Quote):
        mark = "> " if isinstance(block, Quote) else ""
        return [
            textwrap.fill(
                plain(line),
                WIDTH,
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
                WIDTH,
                initial_indent=pad + "- ",
                subsequent_indent=pad + "  ",
                break_on_hyphens=False,
            )
            for item in block.items
        ]
    if isinstance(block, Code):
        return [pad + "  " + line for line in block.text.splitlines()]
    if isinstance(block, Table):
        rows = [
            tuple(plain(c) for c in block.header),
            *(tuple(plain(c) for c in r) for r in block.rows),
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(block.header))]
        return [
            pad + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows
        ]
    raise TypeError(block)


def blocks_text(blocks: tuple[Block, ...] | list[Block], indent: int = 0) -> list[str]:
    return [line for block in blocks for line in block_lines(block, indent)]


def section_lines(section: Section, indent: int = 0) -> list[str]:
    """A section's blocks, then each child under its title (``title:``), indented."""
    lines = blocks_text(section.blocks, indent)
    for child in section.children:
        lines.append(" " * indent + plain(child.title) + ":")
        lines += section_lines(child, indent + 2)
    return lines
