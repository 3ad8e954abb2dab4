"""The profiled run as a flame graph: one self-contained SVG (no script, no fonts or files
fetched), each frame as wide as the seconds its stacks took on the command's main
thread, callers above callees (the outermost frame on top: a deep compiler stack
scrolls down, the start-up's shape stays in view), coloured by the phase
:data:`~loadscope.engine.phases.PHASES` puts its stack in, with the phases' seconds as
its legend. Hovering a frame shows its seconds and share.

It is drawn from the same stretches the phase table counts (``engine/phases.py``): the
picture and the table cannot disagree.

May import: :mod:`loadscope.engine.phases`, the standard library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from loadscope.engine.phases import OTHER, PHASES, Stretch, phase_of

WIDTH = 1200
ROW = 16
#: Frames narrower than this many pixels are left out (their time stays in the parent).
MIN_PX = 0.3
COLOURS = {
    "compilation": "#e4572e",
    "CUDA graph capture": "#a23b72",
    "reading weights": "#2e86ab",
    "network downloads": "#17bebb",
    "tokenizer": "#c5a3ff",
    "CUDA initialisation": "#f18f01",
    "converting and copying tensors": "#76b041",
    "model construction": "#ffc914",
    "imports": "#a5a5a5",
    OTHER: "#e8d6cb",
}


#: A stretch with no Python frame on the main thread (the interpreter's start or exit,
#: native code called without one): "other" in the table, drawn as this.
NO_FRAME = "(no Python frame)"


@dataclass(slots=True)
class _Node:
    seconds: float = 0.0
    phase: str = OTHER
    children: dict[str, _Node] = field(default_factory=dict)


def _label(function: str, path: str) -> str:
    return f"{function} ({Path(path).name})" if path else function


def _tree(parts: Sequence[Stretch]) -> _Node:
    root = _Node()
    for _start, span, frames in parts:
        root.seconds += span
        node = root
        for depth, (function, path) in enumerate(frames or [(NO_FRAME, "")]):
            child = node.children.get(label := _label(function, path))
            if child is None:
                child = node.children[label] = _Node(phase=phase_of(list(frames[: depth + 1])))
            child.seconds += span
            node = child
    return root


def _depth(node: _Node) -> int:
    return 1 + max((_depth(c) for c in node.children.values()), default=0)


def flame_svg(parts: Sequence[Stretch], title: str) -> str:
    """The SVG of a run's main-thread stretches (see the module's docstring)."""
    root = _tree(parts)
    total = root.seconds or 1.0
    scale = WIDTH / total
    legend_rows = 2
    top = legend_rows * ROW + 6
    height = top + _depth(root) * ROW + 4
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}"'
        f' viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="4" y="{ROW - 4}" font-size="12">{escape(title)}</text>',
    ]
    out += _legend(root, total)

    def draw(node: _Node, label: str, x: float, depth: int) -> None:
        width = node.seconds * scale
        if width < MIN_PX:
            return
        y = top + depth * ROW
        tip = f"{label}: {node.seconds:.2f} s ({node.seconds / total:.1%}), {node.phase}"
        out.append(
            f'<g><title>{escape(tip)}</title><rect x="{x:.1f}" y="{y}" width="{width:.1f}"'
            f' height="{ROW - 1}" fill="{COLOURS.get(node.phase, COLOURS[OTHER])}"/>'
        )
        chars = int((width - 4) / 6.6)
        if chars >= 3:
            text = label if len(label) <= chars else label[: chars - 2] + ".."
            out.append(f'<text x="{x + 2:.1f}" y="{y + ROW - 4}">{escape(text)}</text>')
        out.append("</g>")
        at = x
        for name, child in sorted(node.children.items(), key=lambda kv: -kv[1].seconds):
            draw(child, name, at, depth + 1)
            at += child.seconds * scale

    at = 0.0
    for name, child in sorted(root.children.items(), key=lambda kv: -kv[1].seconds):
        draw(child, name, at, 0)
        at += child.seconds * scale
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _legend(root: _Node, total: float) -> list[str]:
    """The phases' colours and seconds (each stretch counted once, at its deepest phase)."""
    seconds: dict[str, float] = {}

    def leaves(node: _Node, phase: str) -> None:
        inner = sum(c.seconds for c in node.children.values())
        if node.seconds > inner:
            seconds[phase] = seconds.get(phase, 0.0) + node.seconds - inner
        for child in node.children.values():
            leaves(child, child.phase)

    for child in root.children.values():
        leaves(child, child.phase)
    out, x = [], 4.0
    order = [p.name for p in PHASES] + [OTHER]
    for name in sorted(seconds, key=lambda n: order.index(n) if n in order else len(order)):
        text = f"{name} {seconds[name]:.2f} s ({seconds[name] / total:.0%})"
        out.append(
            f'<rect x="{x:.0f}" y="{ROW + 3}" width="10" height="10"'
            f' fill="{COLOURS.get(name, COLOURS[OTHER])}"/>'
            f'<text x="{x + 13:.0f}" y="{2 * ROW - 3}">{escape(text)}</text>'
        )
        x += 13 + 6.6 * len(text) + 12
    return out
