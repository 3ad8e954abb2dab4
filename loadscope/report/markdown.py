"""A doctor report as Markdown to paste into a GitHub issue: the verdict first, then the
report's sections (:mod:`loadscope.report.sections`), details collapsible, always
under GitHub's 65,536-character body limit.

May import: ``loadscope.advice``, ``loadscope.engine``, ``loadscope.base``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from loadscope.report.content import Block, Bullets, Section, Table
from loadscope.report.markdown_blocks import block_lines, render_section
from loadscope.report.probe_text import target_words
from loadscope.report.sections import sections

#: GitHub's limit on an issue body.
GITHUB_BODY_LIMIT = 65_536


def to_markdown(doc: dict[str, Any]) -> str:
    """Markdown for a GitHub issue, from the report's JSON."""
    v = doc["verdict"]
    t = doc["target"]
    out = [
        f"### loadscope doctor: {v['headline']}",
        "",
        f"- target: `{t['spec']}` ({target_words(t)})",
        f"- loadscope {doc['tool']['version']}, {doc['created']}",
        "",
    ]
    found = sections(doc)
    text = "\n".join(out + [line for section in found for line in render_section(section)])
    trimmed = 0
    while len(text) > GITHUB_BODY_LIMIT - 400:
        shorter = _shrink_largest(found)
        if shorter is None:
            break
        found, trimmed = shorter, trimmed + 1
        text = "\n".join(out + [line for section in found for line in render_section(section)])
    if trimmed:
        text += (
            "\n\n> trimmed to fit GitHub's 65,536-character limit: the largest tables and"
            " lists were shortened (the full report is in `--json`)\n"
        )
    return _fit(text)


def _shrink_largest(found: list[Section]) -> list[Section] | None:
    """``found`` with its longest table or list (as Markdown) cut to half its rows and a
    line saying how many were left out; None when nothing can be cut further."""
    spots: list[tuple[int, tuple[int, ...], int]] = []  # (length, section path, block)

    def walk(section: Section, path: tuple[int, ...]) -> None:
        for b, block in enumerate(section.blocks):
            rows = block.rows if isinstance(block, Table) else getattr(block, "items", None)
            if rows is not None and len(rows) > 2:
                spots.append((len("\n".join(block_lines(block))), path, b))
        for c, child in enumerate(section.children):
            walk(child, (*path, c))

    for i, section in enumerate(found):
        walk(section, (i,))
    if not spots:
        return None
    _, path, b = max(spots)

    def cut(section: Section, rest: tuple[int, ...]) -> Section:
        if rest:
            children = list(section.children)
            children[rest[0]] = cut(children[rest[0]], rest[1:])
            return replace(section, children=tuple(children))
        blocks = list(section.blocks)
        blocks[b] = _halved(blocks[b])
        return replace(section, blocks=tuple(blocks))

    out = list(found)
    out[path[0]] = cut(found[path[0]], path[1:])
    return out


_TRIMMED = re.compile(r"^… (\d+) more")


def _halved(block: Block) -> Block:
    """The first half of a table's rows or a list's items, and how many more there were."""
    rows: tuple[Any, ...] = block.rows if isinstance(block, Table) else block.items  # type: ignore[union-attr]
    gone = 0
    last = rows[-1][0] if isinstance(block, Table) else rows[-1]
    if (m := _TRIMMED.match(str(last))) is not None:  # already cut once: count those too
        gone, rows = int(m[1]), rows[:-1]
    keep = max(1, len(rows) // 2)
    gone += len(rows) - keep
    if isinstance(block, Table):
        mark = (f"… {gone} more rows (trimmed)",) + ("",) * (len(block.header) - 1)
        return Table(block.header, (*rows[:keep], mark))
    return Bullets((*rows[:keep], f"… {gone} more (trimmed)"))


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
