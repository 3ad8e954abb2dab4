"""Multi-rank loading with ``torch.distributed``: every rank reads, or rank 0 reads and broadcasts.

With several ranks on a node (one per GPU), the question is whether each rank
should read the checkpoint itself (``independent``: N times the reads, N
readers on the storage at once) or one rank should read and broadcast
(``broadcast``, ``broadcast-async``), or the files should be split between the
ranks and shared (``sharded``). This module answers it by measurement, the way
the FastVideo A/B benchmark does: one launch of N real ranks (gloo on CPU,
NCCL on CUDA; see ``loaders/rank.py``) runs an interleaved plan (mode x cache x
repeat, one warm-up round first) with barriers between trials, rank 0 putting
the page cache in the asked state and verifying it before each trial.

Per trial the report gives every rank's time, the slowest rank (the load is done
when the last rank has every tensor), the bytes the ranks read in total and the
read amplification (total bytes read / model bytes: ~N for independent, ~1 for
broadcast and sharded), the bytes that really reached storage (``/proc/<pid>/io``,
a cross-check: ranks on one node share the page cache, so concurrent independent
reads may hit storage only once), peak RSS summed over ranks, GB/s (model bytes /
slowest rank's time), and whether every rank's tensors match a reference read.
The summary takes medians over repeats (warm-up excluded) and the speed-up of
each mode over ``independent`` in the same cache state.

The parent never imports torch: the ranks do. A rank that dies, fails or hangs
ends the launch: every rank's process group is killed, the trial it was in is
failed with a reason that names the rank, and later trials are marked not run.

Owns the run: the options checked, the memory guard, the plan, the launch's outcome
turned into the report. The launch is :mod:`loadscope.engine.rank_launch`'s, the
records :mod:`loadscope.engine.rank_records`', the summaries
:mod:`loadscope.engine.summaries`'; their public names are importable from here too (the
text and the tables are :mod:`loadscope.report.rank_text`'s).

May import: those, ``loadscope.engine.trials``, ``loadscope.loaders.rank_events``
(``RankInfo``), ``loadscope.model``, ``loadscope.probes``,
``loadscope.engine.rank_launch``, ``loadscope.engine.rank_records``,
``loadscope.engine.summaries``, ``loadscope.loaders.mapped``, ``loadscope.base``.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import replace

from loadscope.base.units import format_bytes
from loadscope.engine.rank_launch import (
    FAILURE_GRACE_S,
    SLOWEST_EXPECTED_BYTES_PER_S,
    Launch,
    Outcome,
    free_port,
    timeouts,
)
from loadscope.engine.rank_records import (
    OUT_OF_TIME,
    SCHEMA_VERSION,
    BroadcastCancelled,
    BroadcastError,
    BroadcastEvent,
    BroadcastListener,
    BroadcastOptions,
    BroadcastReport,
    BroadcastSummary,
    BroadcastTrial,
    BroadcastTrialFinished,
    BroadcastTrialStarted,
    Device,
    NotEnoughMemory,
    RankFinished,
    RankResult,
    RankStarted,
)
from loadscope.engine.summaries import rank_summaries
from loadscope.engine.trials import (
    interleaved,
    ram_refusal,
    reference_digests,
    target_record,
)
from loadscope.loaders import mapped
from loadscope.loaders.rank_events import MODES, STACK_MODES, Mode, RankInfo
from loadscope.model.targets import Target, WeightFile
from loadscope.probes.memory import memory_headroom

__all__ = [
    "FAILURE_GRACE_S",
    "MODES",
    "RANK_OVERHEAD_BYTES",
    "SCHEMA_VERSION",
    "SLOWEST_EXPECTED_BYTES_PER_S",
    "STACK_MODES",
    "STORE_MODES",
    "BroadcastCancelled",
    "BroadcastError",
    "BroadcastEvent",
    "BroadcastListener",
    "BroadcastOptions",
    "BroadcastReport",
    "BroadcastSummary",
    "BroadcastTrial",
    "BroadcastTrialFinished",
    "BroadcastTrialStarted",
    "Device",
    "Mode",
    "NotEnoughMemory",
    "RankFinished",
    "RankInfo",
    "RankResult",
    "RankStarted",
    "free_port",
    "memory_guard",
    "memory_need",
    "plan_trials",
    "run_broadcast",
    "timeouts",
]

#: The modes a model in an object store runs: every rank fetches it, or the node fetches
#: it once (rank 0, or each file's owner) and the ranks exchange it.
STORE_MODES: tuple[Mode, ...] = ("independent", "broadcast", "broadcast-async", "sharded")

#: Memory a rank needs beyond the tensors it holds: measured ~230 MB RSS per rank after
#: init_process_group (torch, gloo), much of it shared with the fork server; rounded up.
RANK_OVERHEAD_BYTES = 256 << 20


# -- planning -----------------------------------------------------------------------------------


def memory_need(mode: Mode, files: list[WeightFile], options: BroadcastOptions) -> tuple[int, str]:
    """Peak host memory a trial of ``mode`` needs, and how it was counted."""
    model = sum(f.size_bytes for f in files)
    largest = max((f.size_bytes for f in files), default=0)
    n = options.ranks
    runtime = n * RANK_OVERHEAD_BYTES
    if mode == "node-shared":
        # One copy in shared memory that every rank maps (copies only of pages written).
        need, how = model + runtime, f"one shared copy of the {format_bytes(model)} model"
    elif mode in (mapped.NAME, "warm-node"):
        # Every rank maps the page cache's one copy.
        need, how = model + runtime, f"the page cache's one copy of the {format_bytes(model)} model"
    elif options.device == "cpu" or mode == "direct":
        # every mode ends with every rank holding the whole model
        need, how = n * model + runtime, f"{n} ranks x the {format_bytes(model)} model"
    else:
        # host buffers are staging only (one file per reading rank at a time)
        readers = 1 if mode in ("broadcast", "broadcast-async") else min(n, max(1, len(files)))
        need = readers * largest + runtime
        how = f"{readers} reading rank(s) x the largest file ({format_bytes(largest)})"
    if "warm" in options.cache:
        need += model
        how += f" + the page cache holding the model for warm trials ({format_bytes(model)})"
    return need, how + f" + {format_bytes(RANK_OVERHEAD_BYTES)} per rank of runtime"


def memory_guard(
    files: list[WeightFile], options: BroadcastOptions, available: int
) -> dict[str, str]:
    """Modes that would not fit in ``available`` bytes, with the numbers."""
    out: dict[str, str] = {}
    for mode in options.modes:
        need, how = memory_need(mode, files, options)
        if why := ram_refusal(need, how, available, "available"):
            out[mode] = why
    return out


def plan_trials(options: BroadcastOptions, modes: tuple[Mode, ...]) -> list[BroadcastTrial]:
    """Interleaved: round by round, every cache state, every mode (round 0 is the warm-up)."""
    plan = interleaved(
        range(0 if options.warmup else 1, options.repeats + 1),
        options.cache,
        modes,
        lambda r, cache, mode: BroadcastTrial(0, mode, cache, r, r == 0),
    )
    return [replace(trial, id=i) for i, trial in enumerate(plan, 1)]


def check(target: Target, options: BroadcastOptions) -> None:
    """Refuse (BroadcastError) a plan that cannot run on ``target``, before anything starts."""
    if options.ranks < 1:
        raise BroadcastError(f"ranks must be at least 1, not {options.ranks}")
    if options.repeats < 1:
        raise BroadcastError(f"repeats must be at least 1, not {options.repeats}")
    if not options.modes:
        raise BroadcastError("no mode to run")
    for mode in options.modes:
        if mode not in MODES:
            raise BroadcastError(f"unknown mode {mode!r} (known: {', '.join(MODES)})")
        if not target.on_files and mode not in STORE_MODES:
            raise BroadcastError(
                f"mode {mode} reads files; a model in an object store runs {', '.join(STORE_MODES)}"
            )
    for cache in options.cache:
        if cache not in ("cold", "warm"):
            raise BroadcastError(f"unknown cache state {cache!r} (cold or warm)")
    if not options.cache:
        raise BroadcastError("no cache state to run (cold, warm)")
    if target.formats != {"safetensors"}:
        raise BroadcastError(
            "multi-rank loading reads safetensors checkpoints; this target is "
            + " and ".join(sorted(target.formats))
            + _safetensors_hint(target)
        )
    if not target.files:
        raise BroadcastError("the target has no weight files")
    if options.device == "cuda":
        gpus = _visible_nvidia_gpus()
        if gpus is None and not os.path.exists("/dev/kfd"):
            raise BroadcastError(
                "device cuda needs a GPU driver (no /proc/driver/nvidia, /dev/kfd)"
            )
        backend = options.backend or "nccl"
        if gpus is not None and backend == "nccl" and gpus < options.ranks:
            raise BroadcastError(
                f"NCCL needs one GPU per rank: {options.ranks} ranks, {gpus} GPU(s) here"
            )


def _visible_nvidia_gpus() -> int | None:
    """GPUs the NVIDIA driver lists (not narrowed by CUDA_VISIBLE_DEVICES); None: no driver."""
    try:
        count = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip()]))
    return count


# -- the report ---------------------------------------------------------------------------------


def run_broadcast(
    target: Target, options: BroadcastOptions, listener: BroadcastListener | None = None
) -> BroadcastReport:
    """Run the multi-rank plan on ``target`` with ``options.ranks`` real ranks; the report."""
    say = listener or (lambda _e: None)
    check(target, options)
    files = list(target.files)
    model_bytes = target.total_bytes
    available = (options.memory_available or memory_headroom)()
    skipped = memory_guard(files, options, available)
    modes = tuple(m for m in options.modes if m not in skipped)
    if not modes:
        raise NotEnoughMemory(
            f"{options.ranks} ranks cannot load this model here: "
            + "; ".join(f"{m}: {why}" for m, why in skipped.items())
        )
    notes: list[str] = []
    if options.device == "cuda":
        notes.append(
            "GPU memory was not checked before the run: each rank holds the whole model on its GPU"
        )
    addresses = None if target.on_files else [target.address(f) for f in files]
    if addresses is None:
        reference = reference_digests(files, {})
    else:  # no second fetch of the model for a reference: the ranks' reads agree or not
        reference = {}
        notes.append(
            "an object store's model: each rank's tensors checked against the first rank's"
            " read (no separate reference fetch); 'stor' is what the ranks fetched from it"
        )
    plan = plan_trials(options, modes)
    launch = Launch(plan, files, options, reference, model_bytes, say, addresses)
    outcome = launch.run()
    if outcome.problems and not outcome.infos and _port_taken(outcome):
        # Another process took the free port between our check and rank 0's bind: once more.
        notes.append("the rendezvous port was taken; the ranks were started again")
        outcome = Launch(plan, files, options, reference, model_bytes, say, addresses).run()
    failures = [text for _p, _o, text in sorted(outcome.problems)]
    trials = _mark_unfinished([outcome.trials.get(t.id, t) for t in plan], outcome, failures)
    if outcome.protocol_errors:
        notes.append(
            f"{len(outcome.protocol_errors)} line(s) from the ranks were not events"
            f" (first: {outcome.protocol_errors[0]})"
        )
    if any(r.peak_rss_scope == "process" for t in trials for r in t.ranks):
        notes.append(
            "peak RSS is the rank's lifetime peak (ru_maxrss) in some trials:"
            " /proc/self/clear_refs refused the reset"
        )
    infos = [outcome.infos[r] for r in sorted(outcome.infos)]
    return BroadcastReport(
        target=target_record(target),
        options={
            "ranks": options.ranks,
            "modes": list(modes),
            "cache": list(options.cache),
            "repeats": options.repeats,
            "warmup": options.warmup,
            "device": options.device,
            "backend": infos[0].backend if infos else options.backend,
            "timeout_s": launch.timeout_s,
            "trial_timeout_s": launch.trial_timeout_s,
        },
        model_bytes=model_bytes,
        tensors=len(reference),
        ranks=infos,
        trials=trials,
        summary=rank_summaries(trials),
        skipped=skipped,
        failures=failures,
        notes=notes,
    )


def _port_taken(outcome: Outcome) -> bool:
    text = " ".join(p[2] for p in outcome.problems).lower()
    return "address already in use" in text or "eaddrinuse" in text


def _mark_unfinished(
    trials: list[BroadcastTrial], outcome: Outcome, failures: list[str]
) -> list[BroadcastTrial]:
    """The trials as the report gives them: the one the launch died in failed with the
    reasons, the ones after it not run; those the budget left no time for, skipped."""
    out: list[BroadcastTrial] = []
    stopped_at: BroadcastTrial | None = None
    for trial in trials:
        if trial.id in outcome.complete:
            out.append(trial)
        elif outcome.out_of_time and not failures:
            out.append(replace(trial, status="skipped", reason=OUT_OF_TIME))
        elif stopped_at is None:
            stopped_at = trial
            reason = "; ".join(failures) or "the ranks stopped without finishing it"
            out.append(replace(trial, status="failed", reason=reason))
        else:
            reason = f"not run: the ranks were stopped in trial #{stopped_at.id}"
            out.append(replace(trial, status="skipped", reason=reason))
    return out


def _safetensors_hint(target: Target) -> str:
    """Where the same model is as safetensors beside a torch target, what to name."""
    beside = [f.path for f in target.alternates if f.format == "safetensors"]
    if not beside:
        return ""
    name = beside[0] if len(beside) == 1 else target.alternates_index or target.root
    return f"; the same model is beside it as safetensors: name {shlex.quote(str(name))}"
