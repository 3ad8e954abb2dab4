"""One launch of ``bench --ranks``: N real ranks running one plan, watched by the parent.

Owns the launch: its timeouts, the rendezvous port, every rank started (forked from the
fork server, else a fresh interpreter, each in its own process group) with the plan, its
events turned into each trial's numbers (every rank's, then the trial's aggregate), and
a rank that dies, fails or hangs turned into a reason that names it, after which every
rank's group is killed.

May import: ``loadscope.engine.rank_records``, ``loadscope.engine.children``,
``loadscope.engine.supervise`` (the loop that watches the ranks), ``loadscope.engine.trials``,
``loadscope.loaders``, ``loadscope.model``, ``loadscope.tools`` (the emulated disk's request
log), ``loadscope.probes``, ``loadscope.base``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from loadscope.base.processes import popen
from loadscope.engine.children import Child, Pipes, forked, python_module
from loadscope.engine.rank_records import (
    BroadcastCancelled,
    BroadcastListener,
    BroadcastOptions,
    BroadcastTrial,
    BroadcastTrialFinished,
    BroadcastTrialStarted,
    RankFinished,
    RankResult,
    RankStarted,
)
from loadscope.engine.supervise import Events, reap, supervise
from loadscope.engine.trials import digest_mismatch, exit_reason
from loadscope.loaders.rank_events import (
    RankCache,
    RankDone,
    RankEvent,
    RankFailed,
    RankInfo,
    RankProtocolError,
    RankStart,
    RankTrial,
    decode,
)
from loadscope.model.targets import WeightFile
from loadscope.probes.memory import oom_kills
from loadscope.tools.emulator import request_log_for

#: Default timeouts allow reading the model at this rate (a slow network disk).
SLOWEST_EXPECTED_BYTES_PER_S = 10e6
#: After the first failure, how long to keep listening for the other ranks' reasons.
FAILURE_GRACE_S = 1.0
#: Plans longer than this go to the ranks in a file (argv strings are capped at 128 KiB).
_INLINE_PLAN_CHARS = 100_000
_RANK_MODULE = "loadscope.loaders.rank"


def timeouts(options: BroadcastOptions, model_bytes: int, trials: int) -> tuple[float, float]:
    """(one trial's, the whole launch's) timeout in seconds: as asked, else from the model."""
    trial = options.trial_timeout_s
    if trial is None:
        trial = max(600.0, 2 * model_bytes / SLOWEST_EXPECTED_BYTES_PER_S)
    whole = options.timeout_s
    if whole is None:
        whole = trial * trials + 120.0
    return trial, whole


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (rank 0's store binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _spawn(args: list[str], env: dict[str, str]) -> Child:
    """One rank, forked from the fork server (torch already imported), else a fresh interpreter."""
    proc = forked(args, module=_RANK_MODULE, env=env)
    return proc if proc is not None else popen([*python_module(_RANK_MODULE), *args], env)


_Item = RankEvent | RankProtocolError


class _Rank:
    """One running rank: its process, a reader per pipe, and what it has said."""

    def __init__(self, rank: int, proc: Child, out: Events[_Item]) -> None:
        self.rank = rank
        self.proc = proc
        self.done = False
        self.failed = False
        self.exit_code: int | None = None
        self.pipes = Pipes(
            proc, lambda line: out.put(rank, self._decode(line)), lambda: out.put(rank, None)
        )

    @staticmethod
    def _decode(line: str) -> RankEvent | RankProtocolError:
        try:
            return decode(line)
        except RankProtocolError as exc:
            return exc


@dataclass(slots=True)
class Outcome:
    """What the parent saw of one launch."""

    infos: dict[int, RankInfo] = field(default_factory=dict)
    #: (priority, arrival order, text): deaths first, then the ranks' own reasons.
    problems: list[tuple[int, int, str]] = field(default_factory=list)
    protocol_errors: list[str] = field(default_factory=list)
    #: Trials every rank reported on.
    complete: set[int] = field(default_factory=set)
    #: Per trial id, the trial as the ranks left it (cache set up, every rank's numbers).
    trials: dict[int, BroadcastTrial] = field(default_factory=dict)
    #: When the first problem came (the others' reasons are awaited a moment longer).
    failure_at: float | None = None
    #: The ranks ended the plan early together, at the budget's end (``deadline``).
    out_of_time: bool = False

    def problem(self, priority: int, text: str) -> None:
        self.problems.append((priority, len(self.problems) + 1, text))
        if self.failure_at is None:
            self.failure_at = time.monotonic()


class Launch:
    """N ranks running one plan; events turned into trials, failures into reasons."""

    def __init__(
        self,
        plan: list[BroadcastTrial],
        files: list[WeightFile],
        options: BroadcastOptions,
        reference: Mapping[str, str],
        model_bytes: int,
        say: BroadcastListener,
        addresses: list[str] | None = None,
    ) -> None:
        self.plan = plan
        #: A model in an object store: each file's address there (the ranks fetch it).
        self.addresses = addresses
        self.index = {t.id: i for i, t in enumerate(plan)}
        #: Per trial id, the trial as it stands (a new record at each step).
        self.by_id = {t.id: t for t in plan}
        self.files = files
        self.options = options
        self.reference = reference
        self.model_bytes = model_bytes
        self.say = say
        self.results: dict[int, dict[int, RankResult]] = {t.id: {} for t in plan}
        self.trial_timeout_s, self.timeout_s = timeouts(options, model_bytes, len(plan))
        self._last_progress = 0.0
        #: The emulated disk's request log, where the model lies on one that keeps it:
        #: the bytes the storage served per trial, which no kernel counter sees on FUSE.
        self.log = request_log_for(files[0].path) if files and addresses is None else None
        self.log_at: dict[int, int] = {}

    def _plan_json(self) -> str:
        o = self.options
        return json.dumps(
            {
                "files": [
                    {"path": str(f.path), "size_bytes": f.size_bytes}
                    if self.addresses is None
                    else {"path": a, "fetch_from": a, "size_bytes": f.size_bytes}
                    for f, a in zip(self.files, self.addresses or self.files, strict=True)
                ],
                "store_concurrency": o.store_concurrency,
                "trials": [
                    {"id": t.id, "mode": t.mode, "cache": t.cache, "repeat": t.repeat}
                    for t in self.plan
                ],
                "device": o.device,
                "backend": o.backend,
                # the parent's own timeout fires first, so a hang is reported by rank
                "collective_timeout_s": self.trial_timeout_s + 60,
                "allow_drop_caches": o.allow_drop_caches,
                "read_chunk_bytes": o.read_chunk_bytes,
                # CLOCK_MONOTONIC is the host's: the ranks read the parent's deadline.
                "deadline": o.deadline,
            }
        )

    def _env(self, rank: int, port: int) -> dict[str, str]:
        o = self.options
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(o.ranks),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(o.ranks),
            "MASTER_ADDR": o.master_addr,
            "MASTER_PORT": str(port),
        }
        if o.master_addr.startswith("127.") and "GLOO_SOCKET_IFNAME" not in env:
            env["GLOO_SOCKET_IFNAME"] = "lo"  # every rank is on this host
        return env

    def run(self) -> Outcome:
        o = self.options
        port = free_port(o.master_addr)
        plan_text = self._plan_json()
        with tempfile.TemporaryDirectory(prefix="loadscope-ranks-") as tmp:
            arg = plan_text
            if len(plan_text) > _INLINE_PLAN_CHARS:
                path = os.path.join(tmp, "plan.json")
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(plan_text)
                arg = "@" + path
            events: Events[_Item] = Events()
            ranks: list[_Rank] = []
            oom_before = oom_kills()
            try:
                for r in range(o.ranks):
                    ranks.append(_Rank(r, _spawn([arg], self._env(r, port)), events))
                return self._watch(ranks, events, oom_before)
            finally:
                reap([r.pipes for r in ranks])  # the ranks started before one that could not

    def _watch(self, ranks: list[_Rank], events: Events[_Item], oom_before: int | None) -> Outcome:
        out = Outcome(trials=self.by_id)
        started = time.monotonic()
        run_deadline = started + self.timeout_s
        self._last_progress = started

        def done() -> bool:
            # After the first failure, the others' reasons are awaited a moment only.
            if out.failure_at is not None and time.monotonic() - out.failure_at > FAILURE_GRACE_S:
                return True
            return all(r.exit_code is not None for r in ranks)

        def hung() -> str | None:
            now = time.monotonic()
            late = now > run_deadline or now - self._last_progress > self.trial_timeout_s
            if out.failure_at is not None or not late:
                return None
            limit = self.timeout_s if now > run_deadline else self.trial_timeout_s
            return self._hang_reason(ranks, out, limit)

        def take(rank_no: int, item: _Item) -> None:
            self._take(ranks[rank_no], item, out)

        reason = supervise(
            [r.pipes for r in ranks],
            events,
            take=take,
            exited=lambda rank_no, code: self._exited(ranks[rank_no], code, out, oom_before),
            done=done,
            limit=hung,
            cancel=self.options.cancel,
            cancelled=lambda: BroadcastCancelled("stopped: every rank's process group was killed"),
            exit_wait_s=10,
        )
        if reason is not None:
            out.problem(0, reason)
        return out

    def _exited(self, rank: _Rank, code: int, out: Outcome, oom_before: int | None) -> None:
        """The rank's stdout closed and it exited with ``code``: why it died when it had
        not finished the plan nor said it failed."""
        rank.exit_code = code
        if rank.done or rank.failed:
            return
        rank.pipes.join(1)  # its last stderr lines carry the reason
        # The trial it died in: the first it had not reported (none when it died starting
        # up, before it said it had joined).
        current = next((t for t in self.plan if rank.rank not in self.results[t.id]), None)
        if rank.rank not in out.infos:
            current = None
        out.problem(
            0,
            exit_reason(
                f"rank {rank.rank}",
                code,
                rank.pipes.stderr,
                oom_before,
                killed="was ",
                clean_exit="exited before finishing the plan",
                unclean_exit="without saying why",
                during=(
                    f"during trial #{current.id} ({current.mode}, {current.cache})"
                    if current is not None
                    else ""
                ),
            ),
        )

    def _take(self, rank: _Rank, item: RankEvent | RankProtocolError, out: Outcome) -> None:
        """One event from ``rank``, into the trials and ``out``."""
        if isinstance(item, RankProtocolError):
            out.protocol_errors.append(f"rank {rank.rank}: {item}")
        elif isinstance(item, RankStart):
            info = item.info()
            out.infos[item.rank] = info
            self.say(RankStarted(info))
        elif isinstance(item, RankCache):
            trial = self.by_id[item.trial] = replace(
                self.by_id[item.trial],
                cache_verified=item.verified,
                residency_before=item.residency,
                cache_note=item.note,
                cache_seconds=item.seconds,
            )
            if self.log is not None:  # the cache is set: this trial's requests follow
                self.log_at[item.trial] = self.log.end()
            self.say(BroadcastTrialStarted(trial, self.index[trial.id], len(self.plan)))
        elif isinstance(item, RankTrial):
            if self._add(item):
                out.complete.add(item.trial)
                self._last_progress = time.monotonic()
        elif isinstance(item, RankFailed):
            rank.failed = True
            where = f" in trial #{item.trial}" if item.trial is not None else " at start-up"
            reason = _SOURCE_LOCATION.sub("", item.reason)
            # A rank whose peer went away failed because that peer did: the peer's own
            # reason comes first in what is said, whichever arrived first.
            priority = 2 if _PEER_GONE.search(reason) else 1
            out.problem(priority, f"rank {rank.rank} failed{where}: {reason}"[:400])
        elif isinstance(item, RankDone):
            rank.done = True
            if item.trials < len(self.plan):
                out.out_of_time = True

    def _hang_reason(self, ranks: list[_Rank], out: Outcome, limit: float) -> str:
        current = next((t for t in self.plan if t.id not in out.complete), None)
        if current is None:
            waiting = [r.rank for r in ranks if r.exit_code is None]
            return f"timed out after {limit:.3g} s at the end: rank(s) {_list(waiting)} still ran"
        if not out.infos or len(out.infos) < len(ranks):
            missing = [r.rank for r in ranks if r.rank not in out.infos]
            return (
                f"timed out after {limit:.3g} s starting: rank(s) {_list(missing)} never joined"
                " the process group"
            )
        reported = self.results[current.id]
        late = [r for r in ranks if r.rank not in reported]
        states = ", ".join(f"rank {r.rank} {_proc_state(r.proc.pid)}" for r in late)
        return (
            f"timed out after {limit:.3g} s in trial #{current.id} ({current.mode},"
            f" {current.cache}): rank(s) {_list([r.rank for r in late])} had not finished it"
            f" ({states})"
            + (f"; rank(s) {_list(sorted(reported))} had" if reported else "")
            + "; every rank was killed"
        )

    def _add(self, event: RankTrial) -> bool:
        """Record one rank's result; True when every rank has reported this trial."""
        trial = self.by_id[event.trial]
        before, after = event.rss_before_bytes, event.rss_after_bytes
        if not self.reference:  # a store's model: the first rank's read is the reference
            self.reference = dict(event.digests)
        wrong = digest_mismatch(self.reference, event.digests)
        result = RankResult(
            **event.numbers(),
            rss_delta_bytes=None if before is None or after is None else after - before,
            rss_shared_delta_bytes=event.rss_shared_delta_bytes,
            verified=wrong is None,
            mismatch=wrong,
        )
        self.results[trial.id][event.rank] = result
        self.say(RankFinished(trial, result))
        if len(self.results[trial.id]) < self.options.ranks:
            return False
        served = (
            self.log.bytes_since(self.log_at[trial.id])
            if self.log is not None and trial.id in self.log_at
            else None
        )
        fetched = self.addresses is not None
        trial = self.by_id[trial.id] = _finished(
            trial, self.results[trial.id], self.model_bytes, served, fetched=fetched
        )
        self.say(BroadcastTrialFinished(trial))
        return True


#: gloo and c10 prefix errors with their source file: "[/__w/.../pair.cc:553] ".
_SOURCE_LOCATION = re.compile(r"\[[^\]\s]+\.(?:cc|cpp|h|hpp):\d+\] ")
#: What a rank says when another rank of its group died under it (gloo, NCCL, sockets).
_PEER_GONE = re.compile(
    r"closed by peer|reset by peer|remote worker crash|broken pipe|remote process exited",
    re.IGNORECASE,
)
_STATES = {
    "R": "running",
    "S": "waiting (on another rank?)",
    "D": "in uninterruptible I/O (storage?)",
    "T": "stopped",
    "t": "stopped by a debugger",
    "Z": "exited",
}


def _proc_state(pid: int) -> str:
    """What a late rank is doing, from ``/proc/<pid>/stat``: a hung read shows as D."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"
    return _STATES.get(state, f"in state {state}")


def _list(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) or "none"


def _finished(
    trial: BroadcastTrial,
    results: dict[int, RankResult],
    model_bytes: int,
    served: int | None = None,
    *,
    fetched: bool = False,
) -> BroadcastTrial:
    """The trial with every rank's numbers and their aggregate (``served``: the bytes the
    emulated disk's request log saw during it, where it keeps one; ``fetched``: the model
    is in an object store, and what the ranks read is what the node fetched from it)."""
    ranks = [results[r] for r in sorted(results)]
    slowest = max(ranks, key=lambda r: r.seconds)
    bytes_read = sum(r.bytes_read for r in ranks)
    storage = _total([r.storage_read_bytes for r in ranks])
    counter: str | None = "/proc/<pid>/io"
    if storage == 0 and bytes_read and trial.cache == "cold" and trial.cache_verified:
        # A load from a verified-cold cache fetched every byte from storage: a count of 0
        # is a counter that cannot see these reads (read_bytes counts block-layer reads:
        # FUSE, NFS, tmpfs have none), not 0 bytes. Unknown, not 0.0x.
        storage, counter = None, None
    if served is not None:
        storage, counter = served, "request log"
    if fetched:
        storage, counter = bytes_read, "object store"
    if storage is None:
        counter = None
    verified = all(r.verified for r in ranks)
    wrong = "; ".join(f"rank {r.rank}: {r.mismatch}" for r in ranks if not r.verified)
    return replace(
        trial,
        status=trial.status if verified else "failed",
        reason=trial.reason if verified else "wrong tensors: " + wrong,
        ranks=ranks,
        slowest_rank=slowest.rank,
        slowest_seconds=slowest.seconds,
        bytes_per_s=model_bytes / slowest.seconds if slowest.seconds > 0 else None,
        bytes_read_total=bytes_read,
        read_amplification=bytes_read / model_bytes if model_bytes else None,
        storage_read_bytes_total=storage,
        storage_amplification=(
            storage / model_bytes if storage is not None and model_bytes else None
        ),
        storage_counter=counter,
        peak_rss_bytes_total=_total([r.peak_rss_bytes for r in ranks]),
        rss_delta_bytes_total=_held(ranks),
        verified=verified,
    )


def _held(ranks: list[RankResult]) -> int | None:
    """What the node holds after a trial: each rank's private growth, plus the pages the
    ranks may share (a node-shared copy, the page cache) once, not once per rank."""
    grown = _total([r.rss_delta_bytes for r in ranks])
    shared = [r.rss_shared_delta_bytes for r in ranks]
    if grown is None or any(s is None for s in shared):
        return grown
    counted = [max(0, s or 0) for s in shared]
    return grown - sum(counted) + max(counted, default=0)


def _total(values: list[int | None]) -> int | None:
    """The sum, or None when any rank could not tell."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None
