"""``loadscope cluster``: every node diagnoses itself; rank 0 writes the fleet comparison.

Run one process per node under torchrun::

    torchrun --nnodes=N --nproc-per-node=1 --node-rank=I \\
        --master-addr=HOST0 --master-port=29500 -m loadscope cluster TARGET --out DIR

Each node runs the doctor (probes and a short set of trials within ``--budget``)
on its own copy of TARGET (a path every node sees, or ``synthetic:SIZE`` built
on each node). Reports travel through torch.distributed's c10d ``TCPStore`` —
the one torchrun's agent already hosts (or rank 0's when run without torchrun)
— rather than one ``gather_object`` collective: a collective is all-or-nothing,
so one killed node would cost every other node's report. Here each node posts
its report (or its failure) under its own key and a heartbeat while it works;
rank 0 waits for each, and a node that stops beating for ``HEARTBEAT_TIMEOUT_S``
or never joins is reported failed with that reason, while the others still
report. Rank 0 writes one JSON report per node plus ``fleet.md``,
``fleet.html`` and ``fleet.json`` with outliers marked.

torch is imported only here, at the exchange, never before a node's trials
(its workers are separate processes anyway).

Owns the launch (the environment torchrun or srun set, the line to run on each host),
what one node does, the exchange through the store (join, heartbeat, rank 0's word,
results and their acknowledgement) and the run; the fleet report is
:mod:`~loadscope.diagnosis.fleet`'s (its names are importable from here too).
May import: ``loadscope.model``, ``loadscope.base``, torch (at the exchange), and
:mod:`~loadscope.diagnosis.doctor` and :mod:`~loadscope.diagnosis.fleet`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import platform
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from loadscope.base.errors import ExitCode, LoadscopeError, PermissionDenied
from loadscope.diagnosis.doctor import DEFAULT_BUDGET_S, DoctorOptions, run_doctor
from loadscope.diagnosis.fleet import Fleet, NodeResult, exit_code, fleet_text, write_fleet
from loadscope.model.inspection import open_checked

__all__ = [
    "DEFAULT_PORT",
    "GO_KEY",
    "HEARTBEAT_S",
    "HEARTBEAT_TIMEOUT_S",
    "PREFIX",
    "STOP_NOTICE_S",
    "ClusterEnv",
    "ClusterError",
    "Fleet",
    "FleetUnwritable",
    "NodeResult",
    "check_out_dir",
    "collect",
    "diagnose_node",
    "exit_code",
    "fleet_text",
    "run_cluster",
    "torchrun_lines",
    "valid_host",
    "wait_for_ack",
    "write_fleet",
]


PREFIX = "loadscope/cluster"
HEARTBEAT_S = 1.0
#: A node whose heartbeat has not moved for this long is reported failed.
HEARTBEAT_TIMEOUT_S = 10.0
DEFAULT_PORT = 29500


class ClusterError(LoadscopeError):
    """Not under torchrun, or the rendezvous could not be reached."""


@dataclass(frozen=True, slots=True)
class ClusterEnv:
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    #: torchrun's agent hosts the store: every rank is a client of it.
    agent_store: bool

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> ClusterEnv:
        """The rendezvous from torchrun's variables, else from SLURM's (``srun``: rank,
        world size, the first node of the job's node list as the master), else a clear
        error saying how to launch it."""
        torchrun = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
        if all(k in environ for k in torchrun):
            try:
                return cls(
                    rank=int(environ["RANK"]),
                    world_size=int(environ["WORLD_SIZE"]),
                    master_addr=environ["MASTER_ADDR"],
                    master_port=int(environ["MASTER_PORT"]),
                    agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
                )
            except ValueError as exc:
                raise ClusterError(f"bad torchrun environment: {exc}") from None
        if "SLURM_PROCID" in environ and "SLURM_NTASKS" in environ:
            return cls._from_slurm(environ)
        missing = [k for k in torchrun if k not in environ]
        raise ClusterError(
            f"not launched by torchrun ({', '.join(missing)} not set) nor by srun"
            " (SLURM_PROCID, SLURM_NTASKS): run `loadscope cluster --hosts HOST0,HOST1,..."
            " TARGET` for the line to run on each node, `srun --nodes=N --ntasks-per-node=1"
            " loadscope cluster TARGET`, or `loadscope cluster --k8s N TARGET` for a manifest"
        )

    @classmethod
    def _from_slurm(cls, environ: Mapping[str, str]) -> ClusterEnv:
        import hostlist

        nodes_text = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or ""
        try:
            nodes = hostlist.expand_hostlist(nodes_text) if nodes_text else []
        except hostlist.BadHostlist as exc:
            raise ClusterError(f"bad SLURM node list {nodes_text!r}: {exc}") from None
        if not nodes:
            raise ClusterError("launched by srun, but SLURM_JOB_NODELIST is not set")
        try:
            rank, world = int(environ["SLURM_PROCID"]), int(environ["SLURM_NTASKS"])
            port = int(environ.get("MASTER_PORT") or DEFAULT_PORT)
        except ValueError as exc:
            raise ClusterError(f"bad SLURM environment: {exc}") from None
        if world != len(nodes):
            raise ClusterError(
                f"srun started {world} tasks on {len(nodes)} node(s): run one task per node"
                " (srun --nodes=N --ntasks-per-node=1 loadscope cluster TARGET)"
            )
        return cls(rank, world, environ.get("MASTER_ADDR") or nodes[0], port, False)


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


def valid_host(text: str) -> bool:
    """A host name (RFC 1123 labels) or an IPv4/IPv6 address: what --master-addr may be."""
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    return 0 < len(text) <= 253 and all(_HOST_LABEL.fullmatch(p) for p in text.split("."))


def torchrun_lines(
    hosts: list[str],
    target: str,
    *,
    out: str = "loadscope-fleet",
    port: int = DEFAULT_PORT,
    budget_s: float | None = None,
    options: Sequence[str] = (),
) -> list[str]:
    """The command to run on each host (the first one is the master and writes the fleet).

    ``options`` are further ``loadscope cluster`` arguments every node must get; every
    word is shell-quoted, so a path with spaces or a hostile name pastes as one argument.
    """
    extra = ["--budget", f"{budget_s:g}"] if budget_s else []
    return [
        shlex.join(
            [
                "torchrun",
                f"--nnodes={len(hosts)}",
                "--nproc-per-node=1",
                f"--node-rank={i}",
                f"--master-addr={hosts[0]}",
                f"--master-port={port}",
                "-m",
                "loadscope",
                "cluster",
                target,
                "--out",
                out,
                *extra,
                *options,
            ]
        )
        for i in range(len(hosts))
    ]


# -- what one node does ----------------------------------------------------------------------------


def _unmeasured(doc: dict[str, Any]) -> str | None:
    """Why a node's report measured nothing to compare (None when it did): the doctor
    could not measure, the storage stopped answering, or no trial gave a time."""
    verdict = doc.get("verdict") or {}
    headline = str(verdict.get("headline") or "no verdict")
    if verdict.get("status") == "unmeasured":
        return headline
    stalled = (doc.get("probe") or {}).get("stalled")
    if stalled:
        return f"the storage stopped answering: {stalled}"
    summary = (doc.get("bench") or {}).get("summary") or []
    if not any(isinstance(s, dict) and s.get("median_seconds") for s in summary):
        return f"no trial gave a time ({headline})"
    return None


def diagnose_node(
    rank: int,
    target: str,
    budget_s: float,
    synth_dir: str | None = None,
    doctor: Callable[..., Any] = run_doctor,
    stacks: tuple[str, ...] = (),
    **watch: Any,
) -> NodeResult:
    """This node's diagnosis as a result for rank 0; ``watch`` (``listener``, ``progress``)
    goes to the doctor for the node's own progress line; ``stacks`` (``--stack``) scope
    its trials."""
    host = platform.node()
    try:
        with open_checked(target, synth_dir=synth_dir, loads=True) as t:
            report = doctor(t, DoctorOptions(budget_s=budget_s, stacks=stacks), **watch)
        doc = json.loads(report.to_json())
        if (why := _unmeasured(doc)) is not None:
            # Its storage stalled, or no trial completed: a node that measured nothing is a
            # failed node in the fleet's count (its report is kept, saying why).
            return NodeResult(rank, host, "failed", reason=why, report=doc)
        return NodeResult(rank, host, "ok", report=doc)
    except LoadscopeError as exc:
        return NodeResult(rank, host, "failed", reason=str(exc))
    except Exception as exc:  # noqa: BLE001  (reported to rank 0 as this node's failure)
        return NodeResult(
            rank, host, "failed", reason=f"internal error: {type(exc).__name__}: {exc}"
        )


# -- the exchange ----------------------------------------------------------------------------------


def _store(env: ClusterEnv, timeout_s: float) -> Any:
    try:
        import torch.distributed as dist
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        raise ClusterError(f"torch.distributed is not available: {exc}") from None
    try:
        return dist.TCPStore(  # type: ignore[attr-defined]
            env.master_addr,
            env.master_port,
            env.world_size,
            is_master=env.rank == 0 and not env.agent_store,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
    except (RuntimeError, OSError) as exc:
        raise ClusterError(
            f"cannot reach the rendezvous store at {env.master_addr}:{env.master_port}: {exc}"
        ) from None


class _Heartbeat:
    """Bumps this node's counter every HEARTBEAT_S while it works (its own store client)."""

    def __init__(self, env: ClusterEnv, timeout_s: float) -> None:
        self._store = _store(
            ClusterEnv(env.rank, env.world_size, env.master_addr, env.master_port, True), timeout_s
        )
        self._stop = threading.Event()
        self._key = f"{PREFIX}/beat/{env.rank}"
        self._store.add(self._key, 1)
        self._thread = threading.Thread(target=self._run, daemon=True, name="heartbeat")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._store.add(self._key, 1)
            except Exception:  # noqa: BLE001  (the master went away: nothing to tell)
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


#: Rank 0's word to every node once it checked --out: "go", or why the fleet stops.
GO_KEY = f"{PREFIX}/go"
#: How long rank 0 keeps the store up for the nodes to read a stop (its own store dies
#: with it when it is the rendezvous host).
STOP_NOTICE_S = 30.0


def _wait_for_go(store: Any, rank: int) -> None:
    """Block until rank 0's word (the store's timeout bounds it); ClusterError on a stop."""
    try:
        word = store.get(GO_KEY).decode(errors="replace")
    except Exception as exc:  # noqa: BLE001  (the store's errors: timeout, master gone)
        why = f"rank 0 never said to start ({_first_line(exc)})"
        # Said to rank 0 too, should it come late: this node's reason, not "stopped answering".
        with contextlib.suppress(Exception):
            failed = NodeResult(rank, platform.node(), "failed", reason=why)
            store.set(f"{PREFIX}/result/{rank}", failed.to_json())
        raise ClusterError(f"node-{rank}: {why}") from None
    if word != "go":
        raise ClusterError(f"node-{rank}: rank 0 stopped the fleet before any work: {word}")


def _stay_until_joined(store: Any, world_size: int, timeout_s: float) -> None:
    """Rank 0, stopping the fleet: until every node joined (so it read why) or timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if all(store.add(f"{PREFIX}/beat/{r}", 0) > 0 for r in range(1, world_size)):
                time.sleep(0.5)  # their get of the word is in flight
                return
        except Exception:  # noqa: BLE001  (a node's store error is not rank 0's to report)
            return
        time.sleep(0.2)


def wait_for_ack(store: Any, rank: int, timeout_s: float) -> None:
    """Until rank 0 confirms it has this node's result, or ClusterError saying it did not."""
    try:
        store.wait([f"{PREFIX}/ack/{rank}"], timedelta(seconds=timeout_s))
    except Exception as exc:  # noqa: BLE001  (the store's errors: timeout, master gone)
        raise ClusterError(
            f"node-{rank}: rank 0 did not confirm it received this node's report within"
            f" {timeout_s:.0f} s ({_first_line(exc)}); it may be lost"
        ) from None


def _first_line(exc: BaseException) -> str:
    """A store error's first line (c10d appends its C++ stack), or its type."""
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def collect(
    store: Any,
    world_size: int,
    *,
    join_timeout_s: float,
    heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S,
    poll_s: float = 0.25,
    clock: Callable[[], float] = time.monotonic,
) -> list[NodeResult]:
    """Every node's result, in rank order; a node that never joined within
    ``join_timeout_s`` or whose heartbeat stalled is a failed result saying so."""
    start = clock()
    results: dict[int, NodeResult] = {}
    beats: dict[int, tuple[int, float]] = {}  # rank -> (last counter, when it last moved)
    while len(results) < world_size:
        now = clock()
        for rank in range(world_size):
            if rank in results:
                continue
            key = f"{PREFIX}/result/{rank}"
            if store.check([key]):
                results[rank] = NodeResult.from_json(store.get(key).decode(errors="replace"), rank)
                # The node says "sent" only once rank 0 has it.
                store.set(f"{PREFIX}/ack/{rank}", "1")
                continue
            beat_key = f"{PREFIX}/beat/{rank}"
            if not store.check([beat_key]):
                if now - start > join_timeout_s:
                    results[rank] = NodeResult(
                        rank,
                        "?",
                        "failed",
                        reason=f"never joined within {join_timeout_s:.0f} s"
                        " (not started, or it could not reach the master)",
                    )
                continue
            count = int(store.add(beat_key, 0))
            last = beats.get(rank)
            if last is None or count != last[0]:
                beats[rank] = (count, now)
            elif now - last[1] > heartbeat_timeout_s:
                results[rank] = NodeResult(
                    rank,
                    "?",
                    "failed",
                    reason=f"stopped answering (no heartbeat for {now - last[1]:.0f} s):"
                    " its process died or was killed, or the node went down",
                )
        if len(results) < world_size:
            time.sleep(poll_s)
    return [results[r] for r in range(world_size)]


def run_cluster(
    target: str,
    *,
    out_dir: Path,
    budget_s: float = DEFAULT_BUDGET_S,
    env: ClusterEnv | None = None,
    synth_dir: str | None = None,
    stacks: tuple[str, ...] = (),
    join_timeout_s: float = 120.0,
    heartbeat_timeout_s: float = HEARTBEAT_TIMEOUT_S,
    **watch: Any,
) -> Fleet | None:
    """This node's part; on rank 0 also the fleet (returned), elsewhere None. ``watch``
    (``listener``, ``progress``) follows this node's diagnosis, ``stacks`` scope it."""
    env = env or ClusterEnv.from_environ()
    refused: LoadscopeError | None = None
    if env.rank == 0:
        try:
            check_out_dir(out_dir)  # before any node works: not after the whole fleet ran
        except (ClusterError, PermissionDenied) as exc:
            refused = exc
    try:
        store = _store(env, timeout_s=join_timeout_s)
    except ClusterError:
        if refused is not None:
            raise refused from None  # the user's --out is the first thing to mend
        raise
    if env.rank == 0:
        # Every node waits for this word before it works: "go", or why the fleet stops.
        store.set(GO_KEY, "go" if refused is None else str(refused))
        if refused is not None:
            _stay_until_joined(store, env.world_size, min(join_timeout_s, STOP_NOTICE_S))
            raise refused
    # Joined: counted from here, so a node stopped before its heartbeat thread starts is
    # reported after the heartbeat timeout, not the join timeout.
    store.add(f"{PREFIX}/beat/{env.rank}", 1)
    if env.rank != 0:
        _wait_for_go(store, env.rank)
    beat = _Heartbeat(env, timeout_s=join_timeout_s)
    try:
        mine = diagnose_node(env.rank, target, budget_s, synth_dir, stacks=stacks, **watch)
        store.set(f"{PREFIX}/result/{env.rank}", mine.to_json())
        if env.rank != 0:
            # Rank 0 reads the results after its own diagnosis: wait that long for it to
            # confirm (beating meanwhile), so "sent" is never said of a lost report.
            if "progress" in watch:
                watch["progress"]("report posted; waiting for rank 0 to confirm it")
            wait_for_ack(store, env.rank, budget_s + join_timeout_s)
    finally:
        beat.stop()
    if env.rank != 0:
        return None
    if "progress" in watch:
        watch["progress"]("waiting for every node's report")
    nodes = collect(
        store,
        env.world_size,
        join_timeout_s=join_timeout_s,
        heartbeat_timeout_s=heartbeat_timeout_s,
    )
    try:
        return write_fleet(nodes, out_dir)
    except OSError as exc:  # the disk filled up, or --out went away meanwhile
        raise FleetUnwritable(
            f"--out {out_dir}: writing the fleet report failed ({exc.strerror or exc});"
            " every node's result was collected but could not be saved"
        ) from None


def check_out_dir(out_dir: Path) -> None:
    """``--out`` made and proven writable (a probe file created and removed), or one line."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".loadscope-write-check-{os.getpid()}"
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except PermissionError:
        raise PermissionDenied(
            f"--out {out_dir}: cannot write the fleet report there (permission denied)"
        ) from None
    except OSError as exc:
        raise FleetUnwritable(
            f"--out {out_dir}: cannot write the fleet report there ({exc.strerror or exc})"
        ) from None


class FleetUnwritable(ClusterError):
    exit_code = ExitCode.IO_ERROR
