"""The doctor's multi-rank round: N real ranks (``engine/broadcast.py``) loading the
model by each mode, one cold round each, in what is left of the budget. On files, the
modes of :data:`~loadscope.diagnosis.device_plan.RANK_MODES`; on a model in an object
store, every rank fetching it against the node fetching it once and the ranks exchanging
it, each trial's fetched bytes counted: how many times the node fetches the model with
each route.

May import: ``loadscope.engine``, ``loadscope.loaders.rank_events``,
``loadscope.diagnosis.device_plan``, ``loadscope.model``, ``loadscope.base``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from loadscope.base.errors import LoadscopeError
from loadscope.diagnosis.device_plan import RANK_MODES, hints_from, rank_target
from loadscope.engine.bench import BenchCancelled, BenchReport
from loadscope.engine.broadcast import (
    BroadcastCancelled,
    BroadcastOptions,
    BroadcastReport,
    Device,
    run_broadcast,
)
from loadscope.engine.probing import ProbeReport
from loadscope.loaders.rank_events import Mode
from loadscope.model.targets import Target

#: The least budget left for the multi-rank round (start-up of N ranks and three loads).
RANKS_MIN_S = 10.0
#: What the store's round runs: every rank fetching the model, rank 0 fetching and
#: broadcasting it (the next file fetched while one is on the wire), each file's owner
#: fetching it and broadcasting.
STORE_RANK_MODES: tuple[Mode, ...] = ("independent", "broadcast-async", "sharded")
#: The share of the budget kept for the store's round (at least :data:`RANKS_MIN_S`).
STORE_ROUND_SHARE = 0.25


def _no_time(left: float) -> str:
    """Why the round did not run: the budget's seconds left (none, not a negative)."""
    had = f"{left:.0f} s of the budget left" if left >= 0.5 else "no budget left"
    return f"ranks: not run: {had}, they need {RANKS_MIN_S:.0f} s (raise --budget)"


def store_round_s(budget_s: float) -> float:
    """The seconds of the budget the doctor keeps for the store's ranks' round."""
    return max(RANKS_MIN_S, STORE_ROUND_SHARE * budget_s)


def file_rank_round(
    target: Target,
    bench: BenchReport | None,
    ranks: int,
    device: str,
    budget_s: float,
    started: float,
    cancel: threading.Event | None,
    failures: list[str],
) -> BroadcastReport | None:
    """One cold round of the broadcast modes on files, in what is left of the budget."""
    left = budget_s - (time.monotonic() - started)
    if left < RANKS_MIN_S:
        failures.append(_no_time(left))
        return None
    loads = rank_target(target)
    if loads is None:  # the plan found them: they went since
        failures.append("ranks: not run: the safetensors beside the torch model are gone")
        return None
    differ = bench.other_format_differs() if bench is not None else None
    if loads is not target and differ:
        failures.append(f"ranks: not run: {differ}")
        return None
    device_kind: Device = "cuda" if device != "cpu" else "cpu"
    report = _one_round(loads, ranks, RANK_MODES, left, cancel, failures, device=device_kind)
    if report is not None and loads is not target:
        named = loads.index or Path(loads.files[0].path)
        report.notes.insert(
            0,
            f"ran on the safetensors beside the torch model ({named.name}): multi-rank"
            " loading reads safetensors",
        )
    return report


def store_rank_round(
    target: Target,
    probe: ProbeReport,
    options: Any,
    deadline: float,
    failures: list[str],
) -> BroadcastReport | None:
    """One cold round of :data:`STORE_RANK_MODES` on a model in an object store, each
    reading rank keeping the GETs in flight its probe found best, before ``deadline``
    (``time.monotonic()``); None with a failure line where it did not run."""
    left = deadline - time.monotonic()
    if left < RANKS_MIN_S:
        failures.append(_no_time(left))
        return None
    cancel: threading.Event | None = options.cancel
    concurrency = int(hints_from(probe).get("concurrency") or BroadcastOptions().store_concurrency)
    return _one_round(
        target, int(options.ranks), STORE_RANK_MODES, left, cancel, failures,
        store_concurrency=concurrency,
    )  # fmt: skip


def _one_round(
    target: Target,
    ranks: int,
    modes: tuple[Mode, ...],
    left: float,
    cancel: threading.Event | None,
    failures: list[str],
    **more: Any,
) -> BroadcastReport | None:
    """One cold round of ``modes`` by ``ranks`` ranks within ``left`` seconds (stopping
    between trials at the budget's end rather than being killed at it); a failure line
    where it could not run, a Stop raised as the bench's."""
    try:
        return run_broadcast(
            target,
            BroadcastOptions(
                ranks=ranks, modes=modes, cache=("cold",), repeats=1, warmup=False,
                timeout_s=left, trial_timeout_s=left, deadline=time.monotonic() + left,
                cancel=cancel, **more,
            ),
        )  # fmt: skip
    except BroadcastCancelled as exc:
        raise BenchCancelled(str(exc)) from None
    except LoadscopeError as exc:
        failures.append(f"ranks: {exc}")
        return None


def fetches(report: BroadcastReport) -> dict[str, float]:
    """Each mode's fetches of the model by the node in its cold trial: the bytes the
    ranks fetched from the store over the model's size."""
    out: dict[str, float] = {}
    for t in report.trials:
        if t.status == "ok" and t.storage_amplification is not None:
            out.setdefault(t.mode, t.storage_amplification)
    return out


#: How the store round's modes are said: what does it, in a user's terms.
_STORE_SAID = {
    "independent": "every rank fetching it (Run:ai's streamer, load_model in each rank)",
    "broadcast-async": "rank 0 fetching it and broadcasting",
    "sharded": "each file's owner rank fetching it and broadcasting",
}


def ranks_said(report: BroadcastReport | None, advice: Any) -> None:
    """The store round in the advice's notes: how many times the node fetched the model
    with each route, and how fast each was against every rank fetching it."""
    if report is None:
        return
    times: dict[str, float | None] = {
        str(t.mode): t.slowest_seconds for t in report.trials if t.status == "ok"
    }
    counted = fetches(report)
    base = times.get("independent")
    parts = []
    for mode, said in _STORE_SAID.items():
        seconds = times.get(mode)
        if mode not in counted or not seconds:
            continue
        faster = f", {base / seconds:.2f}x faster" if base and mode != "independent" else ""
        parts.append(f"{counted[mode]:.2f}x with {said} ({seconds:.3g} s{faster})")
    if parts:
        ranks = report.options.get("ranks")
        advice.notes.append(
            f"with {ranks} ranks on this node, the node fetched the model (measured): "
            + "; ".join(parts)
        )
