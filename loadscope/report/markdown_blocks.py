"""The content model's blocks (:mod:`~loadscope.report.content`) as GitHub Markdown: a
section as a heading or a collapsible ``<details>``, each block as its Markdown. The
report's Markdown and the multi-rank section's both lay their content out here. Figures
under labels and bars (the probes') are set as the terminal sets them, in one
preformatted block: a reader pasting it into an issue sees what the terminal showed.

May import: ``loadscope.report.content``, ``loadscope.report.text`` (the terminal's
layout of labelled figures and bars).
"""

from __future__ import annotations

from loadscope.report.content import (
    Bars,
    Block,
    Bullets,
    Code,
    Fields,
    Para,
    Quote,
    Section,
    Table,
)
from loadscope.report.text import blocks_text, preformatted_runs


def render_section(section: Section) -> list[str]:
    body = [line for run in preformatted_runs(section.blocks) for line in _run_lines(run)]
    body += [line for child in section.children for line in render_section(child)]
    if section.collapsed:
        return [f"<details><summary>{section.title}</summary>", "", *body, "</details>", ""]
    return ([f"#### {section.title}", ""] if section.title else []) + body


def _run_lines(run: tuple[Block, ...]) -> list[str]:
    if isinstance(run[0], Fields | Bars):
        return ["```text", *blocks_text(run), "```", ""]
    return block_lines(run[0])


def block_lines(block: Block) -> list[str]:
    if isinstance(block, Fields | Bars):
        return _run_lines((block,))
    if isinstance(block, Para):
        return [block.text, ""]
    if isinstance(block, Quote):
        return [f"> {block.text}", ""]
    if isinstance(block, Bullets):
        return [f"- {item}".replace("\n", "\n  ") for item in block.items] + [""]
    if isinstance(block, Code):
        return ["```" + block.lang, block.text, "```", ""]
    if isinstance(block, Table):
        lines = ["| " + " | ".join(block.header) + " |", "|" + "---|" * len(block.header)]
        lines += ["| " + " | ".join(row) + " |" for row in block.rows]
        return [*lines, ""]
    raise TypeError(block)
