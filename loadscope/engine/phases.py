"""Where a command's start-up goes: its process tree sampled with py-spy while it runs, each
sample put in a phase by one declared table of rules over its frames (:data:`PHASES`).

py-spy (``record --subprocesses --idle --format chrometrace``: time blocked on I/O or a
lock counts) writes each thread's stack with the time it changed. The wall time is the
command's main thread's (the first Python process's ``MainThread``; where it waits on a
pipe, a socket or a child, the time goes to what its children's main threads did
meanwhile: a server whose engine process loads the weights): each stretch
between two of its samples goes, whole, to the phase of the stack it began with (a tick
py-spy took late, on a busy machine, still covers the time since the last), and what
lies outside the first and last sample (the interpreter's start before py-spy attached,
its exit) is said as not sampled. A stack's phase is the one of highest priority
(:data:`PHASES` in order) that any of its frames matches; frames running a module's top
level (``<module>``) match the imports only, since a module imported runs its top level
under the import. What no rule matches is "other", with its innermost frames, the
longest first.

py-spy attaches with ptrace: where that is not permitted (:func:`ptrace_blocked_reason`)
there is no profile, with the reason, and the command runs as it would. Under Yama's
scope 1 a user who is not root may still profile: the command names loadscope as its
tracer before its program starts (``engine/profiler.py``'s ``tracer_declaration``).

The seconds of "reading weights" are checked against the bytes that arrived while they
ran (:func:`cross_check`): the model's page-cache residency, or the tree's storage reads,
that ``engine/usercmd.py`` samples during the same run.

May import: :mod:`loadscope.engine.profiler` (py-spy and its permission check),
:mod:`loadscope.engine.usercmd` (its tree samples), ``loadscope.base``.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loadscope.base.units import format_bytes
from loadscope.engine.usercmd import SAMPLE_S, TreeSample

#: Samples per second: enough for 0.2 s phases, little enough that py-spy (it pauses the
#: sampled process at each tick) costs the command a few percent on 2 cores.
RATE_HZ = 25
#: Beyond this share of the run outside the main thread's samples, the table is no
#: profile of it (py-spy lost the command): said, with why, instead of a table.
MOST_UNSAMPLED = 0.5
#: How long py-spy gets to write its file once the command is gone.
STOP_TIMEOUT_S = 15.0
#: The phase of samples no rule matches.
OTHER = "other"
WEIGHTS = "reading weights"
#: What counted the bytes that arrived (:attr:`PhaseTable.arrived_by`).
RESIDENCY = "page cache"
STORAGE_READS = "storage reads"


@dataclass(frozen=True, slots=True)
class Phase:
    """A phase and the frames that put a sample in it: a frame matches when its file's
    path holds one of ``files``, or its function is one of ``functions``."""

    name: str
    files: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    #: A function of one file: ``(function, part of its path)``.
    calls: tuple[tuple[str, str], ...] = ()
    #: What the answer says where this phase dominates (what would help; not measured).
    hint: str = ""

    def matches(self, function: str, path: str) -> bool:
        return (
            function in self.functions
            or any(f in path for f in self.files)
            or any(function == f and part in path for f, part in self.calls)
        )


#: The phases, highest priority first: a sample whose frames match several goes to the
#: first (a weight read inside ``from_pretrained`` is reading weights, not construction;
#: an import inside ``torch.compile`` is compilation).
PHASES: tuple[Phase, ...] = (
    Phase(
        "compilation",
        files=("/torch/_dynamo/", "/torch/_inductor/", "/triton/", "/torch/_functorch/"),
        # torch.compile itself: the compiler's first import happens under it.
        calls=(("compile", "/torch/__init__.py"),),
        hint="a persistent compile cache (TORCHINDUCTOR_CACHE_DIR kept between starts)"
        " or a smaller compile scope would help",
    ),
    Phase(
        "CUDA graph capture",
        files=("/torch/cuda/graphs.py",),
        functions=("capture_model", "_capture_cudagraphs"),
        hint="fewer captured batch sizes (vLLM: --cuda-graph-sizes) or --enforce-eager"
        " trade serving speed for it",
    ),
    Phase(
        WEIGHTS,
        files=(
            "/safetensors/",
            "/torch/serialization.py",
            "/loadscope/",
            "/runai_model_streamer",
            "/fastsafetensors/",
            "/model_loader/weight_utils.py",
        ),
        functions=("load_file", "safe_open"),
    ),
    Phase(
        "network downloads",
        files=(
            "/huggingface_hub/file_download.py",
            "/urllib/request.py",
            "/http/client.py",
            "/requests/",
            "/urllib3/",
            "/botocore/",
            "/obstore/",
        ),
        hint="a local copy or a warm Hugging Face cache avoids it",
    ),
    Phase(
        "tokenizer",
        files=("/tokenizers/", "/transformers/tokenization_", "/sentencepiece/"),
        hint="a fast tokenizer's tokenizer.json avoids converting a slow one at start",
    ),
    Phase("CUDA initialisation", functions=("_lazy_init", "init_process_group")),
    Phase(
        "converting and copying tensors",
        functions=(
            "_apply",
            "load_state_dict_into_model",
            "_load_state_dict_into_meta_model",
            # vLLM's models copy each tensor the weights iterator yields into place.
            "load_weights",
            "weight_loader",
            "default_weight_loader",
        ),
        # torch's own: a mapped state dict's pages are read here, as it is copied in.
        calls=(
            ("load_state_dict", "/torch/nn/modules/module.py"),
            ("_load_from_state_dict", "/torch/nn/modules/module.py"),
        ),
    ),
    Phase(
        "model construction",
        files=("/torch/nn/modules/", "/transformers/modeling_utils.py", "/accelerate/"),
        hint="building on the meta device (init_empty_weights) skips the random init",
    ),
    Phase("imports", files=("<frozen importlib._bootstrap", "/importlib/__init__.py")),
)


@dataclass(slots=True)
class PhaseTime:
    name: str
    seconds: float
    share: float
    #: For "other": its innermost frames, the longest first.
    frames: list[str] = field(default_factory=list)
    #: The model's bytes that arrived while the phase ran (:func:`cross_check`).
    arrived_bytes: float | None = None


@dataclass(slots=True)
class PhaseTable:
    """The command's wall time by phase, or why there is none (``reason``)."""

    wall_s: float = 0.0
    samples: int = 0
    phases: list[PhaseTime] = field(default_factory=list)
    reason: str = ""
    rate_hz: int = RATE_HZ
    #: The check of the phases against the bytes: what the run brought in, in all
    #: (each phase's share in its row), counted by ``arrived_by``: the model's files'
    #: page-cache residency, else the tree's storage reads. None: not counted.
    arrived_bytes: float | None = None
    arrived_by: str = ""
    #: Whether the bytes could be placed by phase (most came in sample intervals wholly
    #: within one phase); if not, the rows carry none.
    arrived_placed: bool = True
    #: The phases that count with the load: reading weights, and those in which
    #: :data:`LOAD_SHARE` of the bytes arrived for sure (a mapped model's pages are read
    #: where its tensors are first used).
    load_phases: list[str] = field(default_factory=list)

    def seconds(self, name: str) -> float | None:
        return next((p.seconds for p in self.phases if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> PhaseTable:
        phases = [PhaseTime(**p) for p in doc.get("phases") or []]
        return cls(
            float(doc.get("wall_s") or 0.0),
            int(doc.get("samples") or 0),
            phases,
            str(doc.get("reason") or ""),
            int(doc.get("rate_hz") or RATE_HZ),
            doc.get("arrived_bytes"),
            str(doc.get("arrived_by") or ""),
            bool(doc.get("arrived_placed", True)),
            [str(n) for n in doc.get("load_phases") or []],
        )


#: The share of the wall time outside the main thread's samples: the interpreter's start
#: before py-spy attached, and its end after the last sample.
UNSAMPLED = "not sampled (start, exit)"

Frames = list[tuple[str, str]]


#: A phase this share of the start-up or more is named, with what would help it.
DOMINANT_SHARE = 0.3


def answer(table: PhaseTable) -> list[str]:
    """What the table means for the load fixes, in sentences: what they can save at most
    (the seconds of reading weights, and of any phase the model's bytes mostly arrived
    in), where the bytes arrived, and the phase that dominates with what would help it
    (not measured here). Every view of the table says the same."""
    if table.reason or not table.phases or not table.wall_s:
        return []
    loading = load_phases(table)
    seconds = sum(table.seconds(name) or 0.0 for name in loading)
    where = (
        WEIGHTS
        if loading == [WEIGHTS]
        else " and ".join(loading) + " (where the model's bytes arrived)"
    )
    out = [
        f"{where}: {seconds:.2f} s of {table.wall_s:.3g} s ({seconds / table.wall_s:.0%}):"
        " a load fix saves at most that much of this start"
    ]
    out += _arrivals_said(table)
    top = max(table.phases, key=lambda p: p.seconds)
    hint = next((ph.hint for ph in PHASES if ph.name == top.name), "")
    if top.name not in loading and top.name != UNSAMPLED and top.share >= DOMINANT_SHARE:
        out.append(
            f"{top.share:.0%} in {top.name}"
            + (f": {hint}; loadscope does not measure that" if hint else "")
        )
    return out


#: How far apart ``engine/usercmd.py`` samples the tree (its ``SAMPLE_S``): the finest
#: placing of the bytes in time.
SAMPLE_SPACING_S = SAMPLE_S
#: Below this many bytes, a run brought in "almost nothing" of the model.
LITTLE_BYTES = 1 << 20
#: A phase in which this share of the model's bytes arrived counts with the load: a
#: mapped model's pages are read where its tensors are first used (a copy into the
#: model, a conversion), not where the file was opened.
LOAD_SHARE = 0.2


def load_phases(table: PhaseTable) -> list[str]:
    """Reading weights, and the phases :func:`cross_check` found :data:`LOAD_SHARE` of
    the model's bytes arriving in (in the table's order)."""
    return [WEIGHTS, *(n for n in table.load_phases if n != WEIGHTS)]


def _arrivals_said(table: PhaseTable) -> list[str]:
    """Where the model's bytes arrived, in a sentence (none where they were not counted)."""
    total = table.arrived_bytes
    if total is None:
        return []
    what = (
        "the model's bytes reaching the page cache"
        if table.arrived_by == RESIDENCY
        else "the bytes the command read from storage"
    )
    if total < LITTLE_BYTES:
        return [
            f"{what}: almost none during the run ({format_bytes(total)}): the weights were"
            " cached already, or came by a path not counted here (the network, a mount"
            " that bypasses the page cache)"
        ]
    if not table.arrived_placed:
        return [
            f"{what}: {format_bytes(total)} in the run, too quickly to place by phase"
            f" (the samples are {SAMPLE_SPACING_S:g} s apart)"
        ]
    rows = sorted(
        (p for p in table.phases if (p.arrived_bytes or 0.0) >= 0.05 * total),
        key=lambda p: -(p.arrived_bytes or 0.0),
    )
    parts = [f"{(p.arrived_bytes or 0.0) / total:.0%} while {p.name}" for p in rows]
    said = f"{what}: {format_bytes(total)} in the run, " + ", ".join(parts or ["none sampled"])
    weights = sum(p.arrived_bytes or 0.0 for p in table.phases if p.name == WEIGHTS)
    if weights < LOAD_SHARE * total:
        said += (
            ": the model is mapped, its pages read where its tensors are first used"
            if len(load_phases(table)) > 1
            else f": this stack's loader may be missing from the rules ({OTHER!r} names its frames)"
        )
    return [said]


def cross_check(
    table: PhaseTable,
    parts: Sequence[Stretch],
    offset_s: float,
    samples: Sequence[TreeSample],
    model_bytes: int,
) -> None:
    """Fill ``table``'s check of the phases against the bytes, from the run's tree
    samples: the model's residency where it was followed, else the tree's storage reads;
    ``parts`` are the trace's stretches, ``offset_s`` where the trace starts on the run's
    clock."""
    if table.reason or not table.phases:
        return
    resident = [(s.t, s.resident * model_bytes) for s in samples if s.resident is not None]
    if model_bytes > 0 and len(resident) >= 2:
        points, by = resident, RESIDENCY
    else:
        points, by = [(s.t, float(s.read_bytes)) for s in samples], STORAGE_READS
    if len(points) < 2:
        return
    total = 0.0
    sure: dict[str, float] = {}
    for row in table.phases:
        if row.name == UNSAMPLED:
            continue
        row.arrived_bytes, total, sure[row.name] = arrivals(
            spans_of(parts, row.name, offset_s), points
        )
    table.arrived_bytes, table.arrived_by = total, by
    # Placed where at least half the bytes came in intervals wholly within one phase.
    table.arrived_placed = total < LITTLE_BYTES or sum(sure.values()) >= 0.5 * total
    if not table.arrived_placed:
        for row in table.phases:
            row.arrived_bytes = None
        return
    table.load_phases = [
        row.name
        for row in table.phases
        if row.name == WEIGHTS
        or (total >= LITTLE_BYTES and sure.get(row.name, 0.0) >= LOAD_SHARE * total)
    ]


def phase_of(frames: Frames) -> str:
    """The phase of one stack's ``(function, path)`` frames, outermost first (see the
    module's docstring)."""
    return _phase_of(tuple(frames))


@functools.lru_cache(maxsize=1 << 16)
def _phase_of(frames: tuple[tuple[str, str], ...]) -> str:
    """:func:`phase_of`, remembered: a start-up's stacks repeat sample after sample."""
    for phase in PHASES:
        for function, path in frames:
            if function == "<module>" and phase.name != "imports":
                continue
            if phase.matches(function, path):
                return phase.name
    return OTHER


def _marker(name: str, path: str) -> bool:
    """py-spy's own entries in a stack: the process and the thread, not frames."""
    return not path and name.startswith(("process ", "thread ("))


def _mains(events: list[dict[str, Any]]) -> dict[int, tuple[Any, Any]]:
    """Each Python process's main thread in the trace, the first sampled first: its pid
    (the main thread's OS thread id) to the ``(pid, tid)`` its events carry (the first
    is the command's own process, whatever its pid: pids wrap)."""
    mains: dict[int, tuple[Any, Any]] = {}
    for e in sorted(events, key=lambda e: float(e.get("ts", 0))):
        name = str(e.get("name", ""))
        if e.get("ph") == "B" and name.startswith("thread (") and name.endswith(": MainThread"):
            with contextlib.suppress(ValueError):
                os_tid = int(name.removeprefix("thread (").split(")", maxsplit=1)[0])
                mains.setdefault(os_tid, (e.get("pid"), e.get("tid")))
    return mains


#: One stretch of the main thread: its start and length on the trace's clock (seconds
#: since py-spy started) and the frames it began with.
Stretch = tuple[float, float, Frames]

#: Innermost functions of a main thread that waits (on a child process, a pipe, a
#: socket, a lock): while the command's first process waits so, its time goes to what
#: its child processes' main threads were doing (a server whose engine process loads
#: the weights, vLLM's).
WAITS = frozenset(
    {
        "wait", "poll", "_poll", "select", "recv", "recv_bytes", "_recv_bytes", "_recv",
        "recv_multipart", "join", "_wait_for_tstate_lock", "acquire", "communicate",
        "waitpid", "_try_wait", "sleep", "get", "result",
    }
)  # fmt: skip


def _by_thread(events: list[dict[str, Any]]) -> dict[tuple[Any, Any], list[dict[str, Any]]]:
    """The trace's begin and end events per ``(pid, tid)``, each thread's in time order."""
    out: defaultdict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(events, key=lambda e: float(e.get("ts", 0))):
        if e.get("ph") in ("B", "E"):
            out[(e.get("pid"), e.get("tid"))].append(e)
    return out


def _thread_stretches(mine: list[dict[str, Any]]) -> list[Stretch]:
    """One thread's stretches between its samples (``mine``: its events in time order)."""
    stack: Frames = []
    out: list[Stretch] = []
    i = 0
    while i < len(mine):
        ts = float(mine[i].get("ts", 0))
        while i < len(mine) and float(mine[i].get("ts", 0)) == ts:
            e = mine[i]
            frame = (str(e.get("name", "")), str((e.get("args") or {}).get("filename", "")))
            if e["ph"] == "B":
                stack.append(frame)
            elif stack:
                stack.pop()
            i += 1
        if i == len(mine) or not stack:
            continue
        span = (float(mine[i].get("ts", 0)) - ts) / 1e6
        out.append((ts / 1e6, span, [f for f in stack if not _marker(*f)]))
    return out


def stretches(trace: list[dict[str, Any]]) -> list[Stretch]:
    """The command's main thread's stretches between samples in a py-spy ``--format
    chrometrace`` trace (``--threads``): the first Python process's ``MainThread``; where
    it waited (:data:`WAITS`, no rule's frame), what its children's main threads did
    meanwhile, under a frame naming the child."""
    mains = _mains(trace)
    if not mains:
        return []
    first = next(iter(mains))
    threads = _by_thread(trace)
    own = _thread_stretches(threads[mains[first]])
    order = {p.name: i for i, p in enumerate(PHASES)}
    busy: list[_Busy] = []
    for pid, key in mains.items():
        if pid != first:
            for start, span, frames in _thread_stretches(threads[key]):
                if (phase := phase_of(frames)) != OTHER:
                    busy.append((start, start + span, order[phase], pid, frames))
    if not busy:
        return own
    busy.sort()
    starts = [b[0] for b in busy]
    longest = max(b[1] - b[0] for b in busy)
    out: list[Stretch] = []
    for start, span, frames in own:
        if not (frames and frames[-1][0] in WAITS and phase_of(frames) == OTHER):
            out.append((start, span, frames))
            continue
        # The children's stretches that overlap this one: those begun before its end and
        # not before its start less the longest (the list is sorted by start).
        lo = bisect.bisect_left(starts, start - longest)
        hi = bisect.bisect_left(starts, start + span)
        near = [b for b in busy[lo:hi] if b[1] > start]
        out += _while_waiting(start, span, frames, near)
    return out


#: A child's main-thread stretch in a rule's phase: start, end, the phase's priority
#: (its index in :data:`PHASES`), the child's pid and its frames.
_Busy = tuple[float, float, int, int, Frames]


def _while_waiting(start: float, span: float, frames: Frames, near: list[_Busy]) -> list[Stretch]:
    """A waiting stretch cut where the children's busy stretches that overlap it begin
    and end: each piece under the child's frames of the highest-priority phase then,
    else as it was. A sweep: at any moment at most one stretch of each child is active."""
    end = start + span
    edges = sorted([(max(b[0], start), 1, i) for i, b in enumerate(near)]
                   + [(min(b[1], end), 0, i) for i, b in enumerate(near)])  # fmt: skip
    out: list[Stretch] = []
    active: set[int] = set()
    at, k = start, 0
    for t in [*sorted({e[0] for e in edges}), end]:
        if t > at:
            best = min(active, key=lambda i: near[i][2], default=None)
            piece = frames
            if best is not None:
                pid, child = near[best][3], near[best][4]
                piece = [*frames, (f"(waiting on process {pid})", ""), *child]
            if out and out[-1][2] == piece:
                out[-1] = (out[-1][0], out[-1][1] + t - at, piece)
            else:
                out.append((at, t - at, piece))
            at = t
        while k < len(edges) and edges[k][0] <= t:
            _t, begins, i = edges[k]
            (active.add if begins else active.discard)(i)
            k += 1
    return out


def attribute(trace: list[dict[str, Any]], wall_s: float) -> PhaseTable:
    """The table of a py-spy ``--format chrometrace`` trace (``--threads``) for a run of
    ``wall_s`` seconds: each stretch between the main thread's samples goes to the phase
    of the stack it began with (a tick py-spy took late still covers its time)."""
    return table_of(stretches(trace), wall_s)


def table_of(parts: list[Stretch], wall_s: float) -> PhaseTable:
    """The phases of a run of ``wall_s`` seconds from its main thread's stretches."""
    seconds: defaultdict[str, float] = defaultdict(float)
    other: defaultdict[str, float] = defaultdict(float)
    for _start, span, frames in parts:
        name = phase_of(frames)
        seconds[name] += span
        if name == OTHER and frames:
            function, path = frames[-1]
            other[f"{function} ({Path(path).name})"] += span
    sampled = sum(seconds.values())
    if not sampled:
        return PhaseTable(wall_s, 0, [], "py-spy took no sample of the command's main thread")
    seconds[UNSAMPLED] = max(0.0, wall_s - sampled)
    order = [p.name for p in PHASES] + [OTHER, UNSAMPLED]
    total = sum(seconds.values())
    phases = [
        PhaseTime(
            name,
            seconds[name],
            seconds[name] / total,
            sorted(other, key=lambda f: -other[f])[:3] if name == OTHER else [],
        )
        for name in order
        if seconds[name] > 0
    ]
    return PhaseTable(total, len(parts), phases)


def spans_of(
    parts: Sequence[Stretch], name: str, offset_s: float = 0.0
) -> list[tuple[float, float]]:
    """When the main thread was in phase ``name``: ``(start, end)`` on the run's clock
    (the trace's plus ``offset_s``), touching stretches joined."""
    out: list[tuple[float, float]] = []
    for start, span, frames in parts:
        if phase_of(frames) != name:
            continue
        begin, end = start + offset_s, start + offset_s + span
        if out and begin <= out[-1][1] + 1e-9:
            out[-1] = (out[-1][0], end)
        else:
            out.append((begin, end))
    return out


def arrivals(
    spans: Sequence[tuple[float, float]], counter: Sequence[tuple[float, float]]
) -> tuple[float, float, float]:
    """Of what a counter sampled over the run gained (``(t, value)``, cumulative: bytes
    read, bytes resident), how much came while ``spans`` ran, how much in all, and how
    much of the first for sure. Each interval's gain is taken as even across it and
    split by its overlap with the spans; "for sure" counts only the intervals that lie
    wholly within them (a load shorter than the samples' spacing cannot be placed)."""
    during = total = sure = 0.0
    for (t0, v0), (t1, v1) in itertools.pairwise(counter):
        gain = max(0.0, v1 - v0)
        if gain <= 0 or t1 <= t0:
            continue
        total += gain
        overlap = min(1.0, sum(max(0.0, min(t1, e) - max(t0, s)) for s, e in spans) / (t1 - t0))
        during += gain * overlap
        sure += gain if overlap >= 1.0 - 1e-9 else 0.0
    return during, total, sure
