"""A rank's events: the versioned JSON lines one rank of a multi-rank load writes for its
parent (``loaders/rank.py`` writes them, ``engine/rank_launch.py`` reads them): it
started, rank 0 set up the cache, a trial's numbers, it failed, it is done.

May import: ``loadscope.loaders.events``, the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

from loadscope.loaders.events import JsonLines

SCHEMA_VERSION = 1
#: What a plan's trials may ask of the ranks (``loaders/rank.py`` says what each does).
Mode = Literal[
    "independent",
    "broadcast",
    "broadcast-async",
    "sharded",
    "node-shared",
    "mmap",
    "direct",
    "warm-node",
]
MODES: tuple[Mode, ...] = get_args(Mode)
#: The modes that re-enact what a stack does with N ranks (not a loadscope fix).
STACK_MODES: tuple[Mode, ...] = ("mmap", "direct", "warm-node")


class RankProtocolError(ValueError):
    """A line from a rank that is not a valid event."""


@dataclass(frozen=True, slots=True)
class RankInfo:
    """One rank as it started: what the report lists per rank."""

    rank: int
    pid: int
    backend: str
    device: str
    torch_version: str
    #: Seconds spent in init_process_group (rendezvous of every rank).
    init_s: float
    threads: int
    rss_bytes: int | None


@dataclass(frozen=True, slots=True)
class RankStart(RankInfo):
    """A rank joined: its description, the world it joined and when (its first event)."""

    world_size: int
    t: float  # time.monotonic() (the same clock as the parent's on Linux)

    def info(self) -> RankInfo:
        """The description alone (what the report keeps)."""
        return RankInfo(**{f.name: getattr(self, f.name) for f in fields(RankInfo)})


@dataclass(frozen=True, slots=True)
class RankCache:
    """Rank 0's report on the cache state it set up before one trial."""

    rank: int
    trial: int
    verified: bool
    residency: float | None
    note: str
    seconds: float


@dataclass(frozen=True, slots=True)
class RankNumbers:
    """One rank's numbers in one trial: what the rank reports and the report keeps (the
    runner's per-rank record, ``engine/rank_records.py``, is these and its checks)."""

    rank: int
    seconds: float
    #: Bytes of every read this rank issued on the files (its own accounting).
    bytes_read: int
    read_calls: int
    #: /proc/self/io deltas over the timed region: bytes that reached storage, and
    #: bytes read through read syscalls (page cache hits included).
    storage_read_bytes: int | None
    rchar: int | None
    #: Peak RSS during this trial (VmHWM after a reset) or, where the reset is refused,
    #: the process's lifetime peak; ``peak_rss_scope`` says which ("trial", "process").
    peak_rss_bytes: int | None
    peak_rss_scope: str
    ru_maxrss_bytes: int
    tensors: int
    tensor_bytes: int
    collectives: int


@dataclass(frozen=True, slots=True)
class RankTrial(RankNumbers):
    """A rank's trial event: its numbers, and what the runner checks them with."""

    trial: int
    major_faults: int | None
    rss_before_bytes: int | None
    rss_after_bytes: int | None
    #: How much of the RSS growth is pages other ranks may map too (page cache, shared
    #: memory): a node holds them once.
    rss_shared_delta_bytes: int | None
    digests: dict[str, str]
    detail: dict[str, Any] = field(default_factory=dict)

    def numbers(self) -> dict[str, Any]:
        """The :class:`RankNumbers` fields, by name."""
        return {f.name: getattr(self, f.name) for f in fields(RankNumbers)}


@dataclass(frozen=True, slots=True)
class RankFailed:
    rank: int
    trial: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class RankDone:
    rank: int
    trials: int


RankEvent = RankStart | RankCache | RankTrial | RankFailed | RankDone
_TYPES: dict[str, type[Any]] = {
    "start": RankStart,
    "cache": RankCache,
    "trial": RankTrial,
    "failed": RankFailed,
    "done": RankDone,
}


CODEC: JsonLines[RankEvent] = JsonLines(_TYPES, RankProtocolError, SCHEMA_VERSION)
#: One JSON line for an event; one line parsed (raises :class:`RankProtocolError`).
encode, decode = CODEC.encode, CODEC.decode
