"""The content model's blocks (:mod:`~loadscope.report.content`) as GitHub Markdown: a
section as a heading or a collapsible ``<details>``, each block as its Markdown. The
report's Markdown and the multi-rank section's both lay their content out here.

May import: ``loadscope.report.content``.
"""

from __future__ import annotations

from loadscope.report.content import Block, Bullets, Code, Para, Quote, Section, Table


def render_section(section: Section) -> list[str]:
    body = [line for block in section.blocks for line in block_lines(block)]
    body += [line for child in section.children for line in render_section(child)]
    if section.collapsed:
        return [f"<details><summary>{section.title}</summary>", "", *body, "</details>", ""]
    return ([f"#### {section.title}", ""] if section.title else []) + body


def block_lines(block: Block) -> list[str]:
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
