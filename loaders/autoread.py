"""``auto``'s decision and its reads, per file: map what is resident, read the rest deep.

Below the strategies and the public API, which both run it: ``loadscope.load_file``
(``loaders/api.py``), the ``auto`` strategy's trials and the node-shared reads take
their settings from here, so a first call imports none of the strategy registry. Per
file: when the page cache already holds it (:data:`RESIDENT_ENOUGH`, sampled), map it
(zero-copy beats every copy warm); when it is cold, many large requests in flight
(O_DIRECT where the filesystem allows it, buffered ``pread`` threads otherwise) with
the knobs given, else a probe's hints, else the declared defaults; a cold file that
would not fit in the memory this process may use is mapped instead. The decision is a
typed record (:class:`AutoChoice`), with its reason.

May import: ``loadscope.loaders.strategy``, ``loadscope.loaders.buffers``,
``loadscope.loaders.parallelread``, ``loadscope.loaders.mapped``, ``loadscope.probes``,
``loadscope.loaders.requests``, ``loadscope.base``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from loadscope.loaders import mapped
from loadscope.loaders.buffers import byte_ranges, o_direct_ok
from loadscope.loaders.mapped import load_mapped
from loadscope.loaders.parallelread import read_file_parallel
from loadscope.loaders.requests import FileRequest, Knob, Tensors, knob_value
from loadscope.probes.memory import memory_headroom
from loadscope.probes.pagecache import sampled_residency

#: A file at least this resident is mapped rather than read.
RESIDENT_ENOUGH = 0.9
#: Kept free beyond a cold file's buffer; a file that does not fit is mapped instead.
MEMORY_MARGIN = 256 << 20

#: The knobs of ``auto`` (and of ``loadscope.load_file``'s options, and ``bench --knob``).
KNOBS = (
    Knob("threads", 12, "requests in flight per cold file (default: from the probes)"),
    # A multiple of 4096, as O_DIRECT reads need (as ``direct``'s): any other size would
    # be split into aligned and unaligned reads behind the caller's back.
    Knob(
        "block_bytes",
        1 << 20,
        "bytes per request for cold files (default: from the probes)",
        multiple=4096,
    ),
    Knob("direct", "auto", "O_DIRECT for cold files", choices=("auto", "yes", "no")),
    Knob(
        "huge_pages",
        "no",
        "MADV_HUGEPAGE on the read buffers; off by default: 2 MiB pages can wait on compaction",
        choices=("yes", "no"),
    ),
)


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """How a cold file is read: requests in flight, bytes per request, O_DIRECT asked
    ("auto", "yes", "no"), huge pages on the buffer."""

    threads: int
    block_bytes: int
    direct: str
    huge_pages: bool

    def direct_for(self, path: str) -> bool:
        """O_DIRECT for ``path``: asked, or "auto" where its filesystem takes it."""
        return self.direct == "yes" or (self.direct == "auto" and o_direct_ok(path))


def settings(knobs: Mapping[str, Any], hints: Mapping[str, Any]) -> ReadSettings:
    """Each knob given, else the probe's hint, else its declared default (parsed)."""

    def value(name: str) -> Any:
        return knob_value(KNOBS, name, knobs, hints)

    return ReadSettings(
        value("threads"), value("block_bytes"), str(value("direct")), value("huge_pages") == "yes"
    )


#: What a file's load does: mapped from the page cache (``resident``), mapped because a
#: cold read would not fit in memory (``too-large``), or read (``direct``, ``parallel``).
How = Literal["resident", "too-large", "direct", "parallel"]


@dataclass(frozen=True, slots=True)
class AutoChoice:
    """What ``auto`` does with one file, and why."""

    path: str
    how: How
    reason: str
    residency: float | None
    threads: int | None = None
    block_bytes: int | None = None

    @property
    def strategy(self) -> str:
        """The strategy whose reads it makes: ``mmap`` for a mapped file."""
        return mapped.NAME if self.mapped else self.how

    @property
    def mapped(self) -> bool:
        return self.how in ("resident", "too-large")

    def note(self) -> dict[str, Any]:
        """As a trial's detail records it."""
        out: dict[str, Any] = {
            "file": self.path,
            "choice": self.strategy,
            "reason": self.reason,
            "residency": self.residency,
        }
        if not self.mapped:
            out |= {"threads": self.threads, "block_bytes": self.block_bytes}
        return out


def choose(f: FileRequest, read: ReadSettings) -> AutoChoice:
    """Map ``f`` when the page cache holds it or a read would not fit in memory, else read
    it with ``read``'s requests."""
    fraction = sampled_residency(f.path, windows=16)
    known = "unknown" if fraction is None else f"{fraction:.0%}"
    if fraction is not None and fraction >= RESIDENT_ENOUGH:
        why = f"~{fraction:.0%} resident (16 sampled windows): map it"
        return AutoChoice(f.path, "resident", why, fraction)
    room = memory_headroom()
    need = f.size_bytes
    if f.tensors is not None and need + MEMORY_MARGIN > room:
        need = sum(b - a for a, b in byte_ranges(f))  # only the sample is held
    if need + MEMORY_MARGIN > room:
        why = (
            f"{known} resident, but {need >> 20} MiB does not fit in the"
            f" {room >> 20} MiB this process may use: map it (pages can be dropped)"
        )
        return AutoChoice(f.path, "too-large", why, fraction)
    direct = read.direct_for(f.path)
    how = "O_DIRECT" if direct else "buffered pread"
    return AutoChoice(
        f.path,
        "direct" if direct else "parallel",
        f"{known} resident: {read.threads} x {read.block_bytes >> 10} KiB {how} reads",
        fraction,
        read.threads,
        read.block_bytes,
    )


def load(f: FileRequest, choice: AutoChoice, read: ReadSettings) -> Tensors:
    """``f``'s tensors as ``choice`` says: mapped, or read into one buffer."""
    if choice.mapped:
        yield from load_mapped(f)
        return
    yield from read_file_parallel(
        f,
        threads=read.threads,
        block_bytes=read.block_bytes,
        direct=choice.how == "direct",
        huge_pages=read.huge_pages,
    )
