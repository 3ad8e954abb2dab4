"""Rules on how the model is read: the loading code's fixes, each timed in a trial here.

Deep-parallel large reads instead of page faults, whole-file reads (only when RAM
allows the second copy), pinned staged copies to the GPU, and — with several
ranks — rank 0 reading once and broadcasting. Each fires only when its trial
beats the default load by ``WORTH_IT``.
May import: :mod:`loadscope.advice.facts`, :mod:`loadscope.advice.results`,
:mod:`loadscope.advice.snippets`, ``loadscope.engine`` (its report types),
``loadscope.base``, ``loadscope.loaders.strategies``.
"""

from __future__ import annotations

from loadscope.advice.facts import Facts
from loadscope.advice.results import (
    WORTH_IT,
    Evidence,
    Recommendation,
    gain_terms,
    ram_risk,
    reader_evidence,
    remeasure,
    slower_evidence,
    trial_evidence,
)
from loadscope.advice.snippets import command, fix_snippets, offered
from loadscope.base import fix_ids
from loadscope.engine.broadcast import STACK_MODES, BroadcastSummary
from loadscope.loaders.strategies import (
    DEFAULT,
    GPU_DEFAULT,
    GPU_INTERNAL_READER,
    INTERNAL_READERS,
    STRATEGIES,
    WHOLE_FILE_READ,
)

#: loadscope's own tuned readers (``INTERNAL_READERS``, from their declarations) are the
#: evidence that deep-parallel reads pay here. None is a route a user pastes; the fix's
#: number is its best route's (the public API, a flag, ``loadscope warm`` first), each
#: timed with that route's own code.


def rule_parallel(f: Facts) -> list[Recommendation]:
    """Deep-parallel large reads, when a route a user can apply beats mmap cold by WORTH_IT.

    The internal readers show what the storage gives to many large requests in flight;
    the recommendation's number, and the verdict's, is the best measured route's."""
    internal = max(
        (s for s in INTERNAL_READERS if f.speedup(s)),
        key=lambda s: f.speedup(s) or 0,
        default=None,
    )
    snippets, slower = offered(fix_snippets(fix_ids.PARALLEL_READS, f))
    measured = [s for s in snippets if s.speedup is not None and s.baseline == DEFAULT]
    best = max(measured, key=lambda s: s.speedup or 0.0, default=None)
    gain = best.speedup if best else None
    if best is None or gain is None or gain < WORTH_IT or best.strategy is None:
        return []
    route = best.strategy
    need = f.model_bytes if f.speedup(route) and STRATEGIES[route].own_copy else 0
    evidence = [
        trial_evidence(f, f"{route} cold ({best.what})", route),
        trial_evidence(f, f"{DEFAULT} load_file cold", DEFAULT),
    ]
    if internal is not None and internal != route:
        evidence.append(reader_evidence(f, internal))
    if f.parallel_scaling:
        evidence.append(
            Evidence(
                "probe: best parallel readers vs one reader", round(f.parallel_scaling, 2), "x"
            )
        )
    evidence.extend(slower_evidence(slower))
    how, confidence, how_field = gain_terms(f, route, gain)
    return [
        Recommendation(
            id=fix_ids.PARALLEL_READS,
            title="Read with many large requests in flight instead of page faults",
            action=f"{best.what} ({best.stack}): {f.seconds(route):.3g} s vs"
            f" {f.seconds(DEFAULT):.3g} s cold, {gain:.1f}x ({how})",
            strategy=route,
            route=f"{best.what} ({best.stack})",
            expected_speedup=gain,
            evidence=evidence,
            ram_bytes_needed=need or None,
            risk=ram_risk(f, need) if need else "reads into the page cache: no second copy",
            confidence=confidence,
            how=how_field,
            snippets=[
                *snippets,
                remeasure(f, "--strategies mmap,api,auto,prewarm,vllm-prefetch"),
            ],
        )
    ]


def rule_fullread(f: Facts) -> list[Recommendation]:
    """The maintainer's fix — only when the trials show it faster and RAM allows it."""
    gain = f.speedup(WHOLE_FILE_READ)
    if gain is None:
        return []
    need = 2 * f.model_bytes
    if gain < WORTH_IT:
        return []
    if f.headroom_bytes is not None and need > f.headroom_bytes:
        return []  # guarded: would not fit (see rule_fullread_contradiction for the note)
    how, _, how_field = gain_terms(f, WHOLE_FILE_READ, gain)
    return [
        Recommendation(
            id=fix_ids.READ_WHOLE_FILES,
            title="Read whole files instead of memory-mapping them",
            action=f"load(open(p,'rb').read()): {f.seconds(WHOLE_FILE_READ):.3g} s vs"
            f" {f.seconds(DEFAULT):.3g} s cold, {gain:.1f}x ({how})",
            strategy=WHOLE_FILE_READ,
            expected_speedup=gain,
            how=how_field,
            evidence=[
                trial_evidence(f, f"{WHOLE_FILE_READ} cold", WHOLE_FILE_READ),
                trial_evidence(f, f"{DEFAULT} cold", DEFAULT),
            ],
            ram_bytes_needed=need,
            risk="holds the file twice at the peak; with N ranks per node, N copies. "
            + ram_risk(f, need),
            confidence="medium",
            snippets=offered(fix_snippets(fix_ids.READ_WHOLE_FILES, f))[0],
        )
    ]


def rule_gpu_staged(f: Facts) -> list[Recommendation]:
    """Pinned, overlapped staging to the GPU, numbered by the route users paste
    (``loadscope.load_model(p, device="cuda")``, the ``api-cuda`` trial) against
    safetensors' own device load; loadscope's internal ``staged`` reader is evidence."""
    snippets, slower = offered(fix_snippets(fix_ids.GPU_STAGED, f))
    best = max(
        (s for s in snippets if s.speedup is not None), key=lambda s: s.speedup or 0, default=None
    )
    gain = best.speedup if best else None
    if best is None or gain is None or gain < WORTH_IT or best.strategy is None:
        return []
    route = best.strategy
    evidence = [
        trial_evidence(f, f"{route} cold ({best.what})", route),
        trial_evidence(f, f"{GPU_DEFAULT} cold (load_file(device='cuda'))", GPU_DEFAULT),
    ]
    if f.speedup(GPU_INTERNAL_READER, base_name=GPU_DEFAULT):
        evidence.append(reader_evidence(f, GPU_INTERNAL_READER))
    evidence.extend(slower_evidence(slower))
    how, confidence, how_field = gain_terms(f, route, gain, GPU_DEFAULT)
    return [
        Recommendation(
            id=fix_ids.GPU_STAGED,
            title="Stage reads through pinned memory with overlapped copies to the GPU",
            action=f"{best.what}: {f.seconds(route):.3g} s vs {f.seconds(GPU_DEFAULT):.3g} s"
            f" for load_file(device='cuda') cold, {gain:.1f}x ({how})",
            strategy=route,
            route=f"{best.what} ({best.stack})",
            expected_speedup=gain,
            evidence=evidence,
            risk="host memory bounded by the pinned ring; no full CPU copy of the model",
            confidence=confidence,
            how=how_field,
            snippets=[*snippets, remeasure(f, "--device cuda")],
        )
    ]


def _node_shared_fix(
    f: Facts,
    best: BroadcastSummary,
    indep: BroadcastSummary,
    cache: str,
    gain: float,
    amp: str,
) -> Recommendation:
    """The local ranks read the model once for the node: ``loadscope.load_model`` under
    torchrun or SLURM, the code the ``node-shared`` trials ran."""
    assert best.median_seconds is not None and indep.median_seconds is not None
    return Recommendation(
        id=fix_ids.READ_ONCE_PER_NODE,
        title="Read the model once per node, not once per rank",
        action=f"'node-shared' with {f.ranks} ranks: {best.median_seconds:.3g} s vs"
        f" {indep.median_seconds:.3g} s for independent reads ({cache}), {gain:.1f}x{amp}",
        strategy=best.mode,
        route="loadscope.load_model under torchrun/SLURM (safetensors)",
        expected_speedup=gain,
        evidence=[
            Evidence(f"node-shared {cache}, slowest rank", best.median_seconds, "s"),
            Evidence(f"independent {cache}, slowest rank", indep.median_seconds, "s"),
            Evidence("ranks", f.ranks),
        ],
        risk="needs /dev/shm room for the largest file; one copy of the model per node",
        confidence="high" if gain >= 2 else "medium",
        snippets=[
            command(
                "safetensors",
                "import loadscope  # under torchrun/srun: the local ranks read it once\n"
                f"state = loadscope.load_model({f.model_path!r})",
            ),
            remeasure(f, f"--ranks {f.ranks} --modes independent,node-shared"),
        ],
    )


def broadcast_code(mode: str) -> str:
    """Rank 0 reads each file once and broadcasts its bytes (sync, or overlapped)."""
    wait = (
        "    work = dist.broadcast(data, src=0, async_op=True)  # overlap with the next read\n"
        "    work.wait()\n"
        if mode == "broadcast-async"
        else "    dist.broadcast(data, src=0)\n"
    )
    return (
        "# rank 0 reads each file once; the other ranks receive its bytes\n"
        "# (gloo on CPU; with NCCL move `data` to the rank's GPU first)\n"
        "import torch, torch.distributed as dist\n"
        "from safetensors.torch import load\n"
        "state = {}\n"
        "for path in files:\n"
        "    if dist.get_rank() == 0:\n"
        "        raw = open(path, 'rb').read()\n"
        "        size = torch.tensor([len(raw)])\n"
        "    else:\n"
        "        size = torch.tensor([0])\n"
        "    dist.broadcast(size, src=0)\n"
        "    data = (torch.frombuffer(bytearray(raw), dtype=torch.uint8)\n"
        "            if dist.get_rank() == 0 else torch.empty(int(size), dtype=torch.uint8))\n"
        + wait
        + "    state.update(load(data.numpy().tobytes()))"
    )


def rank_comparison(f: Facts) -> tuple[str, BroadcastSummary | None, list[BroadcastSummary]]:
    """The cache state compared (cold when measured), independent reads, the other modes."""
    cache = "cold" if any(c == "cold" for _, c in f.rank_modes) else "warm"
    indep = f.rank_modes.get(("independent", cache))
    others = [
        s
        for (mode, c), s in f.rank_modes.items()
        if c == cache
        and mode != "independent"
        and mode not in STACK_MODES  # what a stack does: evidence, not loadscope's fix
        and s.speedup_vs_independent
    ]
    return cache, indep, others


def rule_broadcast(f: Facts) -> list[Recommendation]:
    """Rank 0 reads, the others receive: when the multi-rank trials show it faster."""
    if not f.ranks or not f.rank_modes:
        return []
    cache, indep, others = rank_comparison(f)
    best = max(others, key=lambda s: s.speedup_vs_independent or 0, default=None)
    if indep is None or best is None or not indep.median_seconds or not best.median_seconds:
        return []
    gain = best.speedup_vs_independent or 0
    if gain < WORTH_IT:
        return []
    amp = (
        f"; storage reads {best.read_amplification:.1f}x the model instead of"
        f" {indep.read_amplification:.1f}x"
        if best.read_amplification is not None and indep.read_amplification is not None
        else ""
    )
    if best.mode == "node-shared":
        return [_node_shared_fix(f, best, indep, cache, gain, amp)]
    return [
        Recommendation(
            id=fix_ids.BROADCAST,
            title="Read once on rank 0 and broadcast to the other ranks",
            action=f"'{best.mode}' with {f.ranks} ranks ({f.rank_backend}):"
            f" {best.median_seconds:.3g} s vs {indep.median_seconds:.3g} s for independent"
            f" reads ({cache}), {gain:.1f}x{amp}",
            strategy=best.mode,
            expected_speedup=gain,
            evidence=[
                Evidence(f"{best.mode} {cache}, slowest rank", best.median_seconds, "s"),
                Evidence(f"independent {cache}, slowest rank", indep.median_seconds, "s"),
                Evidence("ranks", f.ranks),
            ],
            ram_bytes_needed=int(best.rss_delta_bytes_total)
            if best.rss_delta_bytes_total
            else None,
            risk="every rank still holds its copy of the model; the gain is in reads",
            confidence="high" if gain >= 2 else "medium",
            snippets=[
                command("torch.distributed", broadcast_code(best.mode)),
                remeasure(f, f"--ranks {f.ranks} --modes independent,{best.mode}"),
            ],
        )
    ]
