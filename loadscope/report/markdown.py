"""A doctor report as Markdown to paste into a GitHub issue: the verdict first, then the
report's sections (:mod:`loadscope.report.sections`), details collapsible, always
under GitHub's 65,536-character body limit.

May import: ``loadscope.advice``, ``loadscope.engine``, ``loadscope.base``.
"""

from __future__ import annotations

from typing import Any

from loadscope.base.units import format_bytes
from loadscope.report.sections import Block, Bullets, Code, Para, Quote, Section, Table, sections

#: GitHub's limit on an issue body.
GITHUB_BODY_LIMIT = 65_536


def to_markdown(doc: dict[str, Any]) -> str:
    """Markdown for a GitHub issue, from the report's JSON."""
    v = doc["verdict"]
    t = doc["target"]
    out = [
        f"### loadscope doctor: {v['headline']}",
        "",
        f"- target: `{t['spec']}` ({t['files']} file(s), {format_bytes(t['total_bytes'])})",
        f"- loadscope {doc['tool']['version']}, {doc['created']}",
        "",
    ]
    for section in sections(doc):
        out += _section(section)
    return _fit("\n".join(out))


def _section(section: Section) -> list[str]:
    body = [line for block in section.blocks for line in _block(block)]
    body += [line for child in section.children for line in _section(child)]
    if section.collapsed:
        return [f"<details><summary>{section.title}</summary>", "", *body, "</details>", ""]
    return ([f"#### {section.title}", ""] if section.title else []) + body


def _block(block: Block) -> list[str]:
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


def _fit(text: str) -> str:
    if len(text) <= GITHUB_BODY_LIMIT - 200:
        return text
    # A GitHub issue body holds 65,536 characters: keep the verdict, the fixes and the
    # evidence, cut the longest lists from the end, and say so.
    cut = text[: GITHUB_BODY_LIMIT - 400].rsplit("\n", 1)[0]
    if sum(line.startswith("```") for line in cut.splitlines()) % 2:
        cut += "\n```"  # close a code block the cut went through
    cut += "\n</details>" * (cut.count("<details>") - cut.count("</details>"))
    return cut + (
        "\n\n> trimmed to fit GitHub's 65,536-character limit: the full report is in `--json`\n"
    )
