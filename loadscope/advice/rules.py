"""The advice engine: rules over probes and trials that yield ranked, evidenced recommendations.

Every recommendation rests on numbers measured here — the trial ids and times
it compares, the probe figures it reads — and never on folklore alone: where a
rule of thumb is contradicted by the trials (a full read slower than mmap on
this mount), the advice follows the measurement and says so. "Nothing to fix"
is a verdict of its own: when the default load already runs near the storage's
measured limit on local or memory storage, smaller gains are optional tips.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from loadscope.actions.convert import ConversionTrial
from loadscope.advice.snippets import Snippet, command, commands, load_snippets
from loadscope.base.units import format_bytes, format_rate
from loadscope.engine.bench import GPU_STRATEGIES, BenchReport, Summary
from loadscope.engine.broadcast import BroadcastReport, BroadcastSummary
from loadscope.engine.probing import ProbeReport

Confidence = Literal["high", "medium", "low"]
#: A strategy must beat mmap by this much before it is worth a change of code.
WORTH_IT = 1.5
#: The default load is "healthy" at this fraction of the storage's measured limit.
HEALTHY_FRACTION = 0.5


@dataclass(slots=True)
class Evidence:
    what: str
    value: float | str | None = None
    unit: str = ""
    trial_ids: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Recommendation:
    id: str
    title: str
    action: str
    strategy: str | None = None
    #: Measured speed-up over the default (mmap load_file), cold; None when not measured.
    expected_speedup: float | None = None
    evidence: list[Evidence] = field(default_factory=list)
    ram_bytes_needed: int | None = None
    risk: str = ""
    confidence: Confidence = "medium"
    #: The change in each stack's own terms, each with the trial of its own code.
    snippets: list[Snippet] = field(default_factory=list)
    #: An optional tip on healthy storage, not a problem.
    optional: bool = False
    #: False when the gain is estimated from probes rather than timed in a trial here;
    #: estimated gains rank after measured ones.
    measured: bool = True
    #: What loadscope's own apply does for this fix, so that the app, the CLI and the
    #: snippet name one source and one destination: {"kind": "warm", "source": ...} or
    #: {"kind": "copy", "source": ..., "dest": ...}; None for a fix it does not apply.
    apply: dict[str, str] | None = None


@dataclass(slots=True)
class Verdict:
    #: "unmeasured": no trial (or no cold trial of the default load) completed, so there is
    #: no evidence to call the storage healthy or to rank a fix on.
    status: Literal["healthy", "problem", "unmeasured"]
    headline: str


@dataclass(slots=True)
class Advice:
    verdict: Verdict
    recommendations: list[Recommendation]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class LocalDiskFacts:
    directory: str
    free_bytes: int
    write_bytes_per_s: float
    cold_read_bytes_per_s: float
    cold_verified: bool


@dataclass(slots=True)
class Facts:
    """What the rules read, extracted once from the reports."""

    storage_class: str
    model_bytes: int
    headroom_bytes: int | None
    cgroup_limit_bytes: int | None
    limit_bytes_per_s: float | None  # best measured probe throughput (sequential or parallel)
    sequential_limit_bytes_per_s: float | None  # best single-reader probe throughput
    parallel_scaling: float | None  # best parallel rate / one reader
    read_ahead_kb: int | None
    bdi_path: str | None
    fuse: bool
    formats: set[str]
    cold: dict[str, Summary]
    warm: dict[str, Summary]
    trial_ids: dict[tuple[str, str], list[int]]
    #: Where the model is (for the snippets) and the fastest local disk with room for a copy.
    model_root: str = "MODEL_DIR"
    #: What the user would name the model in their stack: the folder, the file, org/name.
    model_path: str = "MODEL_DIR"
    #: Strategies the bench skipped or whose every trial failed, with the reason.
    not_run: dict[str, str] = field(default_factory=dict)
    local_disk: LocalDiskFacts | None = None
    #: Multi-rank trials (``--ranks``): per (mode, cache), and the rank count.
    ranks: int | None = None
    rank_modes: dict[tuple[str, str], BroadcastSummary] = field(default_factory=dict)
    rank_backend: str | None = None
    #: GPUs whose PCIe link trained below its maximum (address, current, max).
    degraded_links: list[tuple[str, str, str]] = field(default_factory=list)
    #: A read of the model that got no answer during the probes (what, and for how long).
    stalled: str | None = None
    #: The run's failed and skipped steps, in order (why nothing was measured, if so).
    failures: list[str] = field(default_factory=list)
    #: Median cold 4 KiB read latency the probe measured (None: not measured).
    latency_p50_us: float | None = None
    #: A pickle-only model: a sample converted to safetensors and both formats timed.
    conversion: ConversionTrial | None = None
    #: The FUSE mount's fusectl folder (/sys/fs/fuse/connections/N), when the probe found it.
    fuse_connection_path: str | None = None

    def speedup(self, strategy: str, cache: str = "cold", base_name: str = "mmap") -> float | None:
        """Whole-model time of ``base_name`` over ``strategy``'s (measured, or extrapolated
        from a sample: sampled strategies read samples of their own sizes, so their sample
        times cannot be compared)."""
        base, other = self.seconds(base_name, cache), self.seconds(strategy, cache)
        if not base or not other:
            return None
        return base / other

    def rate(self, strategy: str, cache: str = "cold") -> float | None:
        """The whole model's bytes per second of ``strategy`` (measured or extrapolated)."""
        secs = self.seconds(strategy, cache)
        return self.model_bytes / secs if secs else None

    def cold_trial_ids(self, strategy: str) -> list[int]:
        return list(self.trial_ids.get((strategy, "cold"), []))

    def why_not_measured(self, strategy: str) -> str | None:
        return self.not_run.get(strategy)

    def seconds(self, strategy: str, cache: str = "cold") -> float | None:
        table = self.cold if cache == "cold" else self.warm
        s = table.get(strategy)
        return (s.extrapolated_median_seconds or s.median_seconds) if s else None


def copy_destination(directory: str, model_root: str) -> str:
    """Where a copy to the local disk ``directory`` goes: one folder per model under
    ``loadscope-copies`` (the advice's snippet and the app's apply dialog agree)."""
    name = os.path.basename(model_root.rstrip("/")) or "model"
    return f"{directory.rstrip('/')}/loadscope-copies/{name}"


def _model_path(probe: ProbeReport) -> str:
    """How the user names the model: ``org/name`` from the HF cache, the file, the folder."""
    target = probe.target
    if target.get("kind") == "hf-cache":
        return str(target["spec"])
    # Served by the emulator: the model's own folder (the mount is gone after the run).
    root = str(target.get("source") or target["root"])
    if target.get("kind") == "file" and probe.files:
        return os.path.join(root, os.path.basename(probe.files[0].path))
    return root


def _not_run(bench: BenchReport | None) -> dict[str, str]:
    """Why a strategy has no cold trial: skipped (not installed, would not fit), or failed."""
    if bench is None:
        return {}
    out = {name: f"skipped: {why}" for name, why in bench.skipped.items()}
    for t in bench.trials:
        if t.status == "failed" and t.cache == "cold" and t.strategy not in out:
            out[t.strategy] = f"its trial failed: {t.reason}"
    return out


def facts_from(
    probe: ProbeReport,
    bench: BenchReport | None,
    ranks: BroadcastReport | None = None,
    failures: Sequence[str] = (),
    conversion: ConversionTrial | None = None,
) -> Facts:
    primary = probe.primary
    mount = primary.storage.mount.data
    system = probe.system.data
    thr = probe.throughput.data
    rates = [p.bytes_per_s for p in (list(thr.sequential) + list(thr.parallel))] if thr else []
    scaling = None
    if thr and thr.parallel and thr.parallel[0].bytes_per_s > 0:
        scaling = max(p.bytes_per_s for p in thr.parallel) / thr.parallel[0].bytes_per_s
    bdi = primary.storage.bdi.data
    local = None
    disks = [d for d in (probe.local_disks.data or []) if d.speed is not None]
    if disks:
        best = max(disks, key=lambda d: d.speed.cold_read_bytes_per_s if d.speed else 0.0)
        assert best.speed is not None
        local = LocalDiskFacts(
            best.directory,
            best.free_bytes,
            best.speed.write_bytes_per_s,
            best.speed.cold_read_bytes_per_s,
            best.speed.cold_verified,
        )
    cold: dict[str, Summary] = {}
    warm: dict[str, Summary] = {}
    ids: dict[tuple[str, str], list[int]] = {}
    if bench is not None:
        for s in bench.summary:
            if s.median_seconds is not None:
                (cold if s.cache == "cold" else warm)[s.strategy] = s
        for t in bench.trials:
            if t.status == "ok" and not t.warmup:
                ids.setdefault((t.strategy, t.cache), []).append(t.id)
    return Facts(
        model_path=_model_path(probe),
        failures=list(failures),
        not_run=_not_run(bench),
        storage_class=mount.storage_class if mount else "unknown",
        latency_p50_us=probe.latency.data.p50_us if probe.latency.data else None,
        stalled=probe.stalled,
        model_bytes=probe.target["total_bytes"],
        headroom_bytes=system.memory_headroom_bytes if system else None,
        cgroup_limit_bytes=system.cgroup.limit_bytes if system and system.cgroup else None,
        limit_bytes_per_s=max(rates) if rates else None,
        sequential_limit_bytes_per_s=max((p.bytes_per_s for p in thr.sequential), default=None)
        if thr
        else None,
        parallel_scaling=scaling,
        read_ahead_kb=bdi.read_ahead_kb if bdi else None,
        bdi_path=bdi.path if bdi else None,
        fuse=mount is not None and mount.fstype.startswith("fuse"),
        fuse_connection_path=primary.storage.fuse.data.path if primary.storage.fuse.data else None,
        formats=set(bench.target["formats"]) if bench else {"safetensors"},
        cold=cold,
        warm=warm,
        trial_ids=ids,
        model_root=str(probe.target.get("source") or probe.target["root"]),
        local_disk=local,
        ranks=len(ranks.ranks) or int(ranks.options.get("ranks") or 0) if ranks else None,
        rank_modes={(m.mode, m.cache): m for m in ranks.summary} if ranks else {},
        rank_backend=str(ranks.options.get("backend")) if ranks else None,
        degraded_links=_degraded(probe),
        conversion=conversion,
    )


def _degraded(probe: ProbeReport) -> list[tuple[str, str, str]]:
    gpus = probe.gpus.data
    out = []
    for g in gpus.pci if gpus else ():
        if g.link_degraded:
            cur, top = g.current_link, g.max_link
            out.append((g.address, f"{cur.speed} x{cur.width}", f"{top.speed} x{top.width}"))
    return out


def _remeasure(f: Facts, options: str) -> Snippet:
    return command("shell", f"loadscope bench {shlex.quote(f.model_path)} {options}  # re-measure")


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


# -- rules ----------------------------------------------------------------------------------

Rule = Callable[[Facts], list[Recommendation]]


def _ids(f: Facts, *keys: tuple[str, str]) -> list[int]:
    return [i for k in keys for i in f.trial_ids.get(k, [])]


def rule_parallel(f: Facts) -> list[Recommendation]:
    """Deep-parallel large reads, when a parallel strategy beats mmap cold by WORTH_IT."""
    best = max(
        (s for s in ("auto", "direct", "parallel") if f.speedup(s)),
        key=lambda s: f.speedup(s) or 0,
        default=None,
    )
    gain = f.speedup(best) if best else None
    if best is None or gain is None or gain < WORTH_IT:
        return []
    need = f.model_bytes
    evidence = [
        Evidence(f"{best} cold", f.seconds(best), "s", _ids(f, (best, "cold"))),
        Evidence("mmap load_file cold", f.seconds("mmap"), "s", _ids(f, ("mmap", "cold"))),
    ]
    if f.parallel_scaling:
        evidence.append(
            Evidence(
                "probe: best parallel readers vs one reader", round(f.parallel_scaling, 2), "x"
            )
        )
    return [
        Recommendation(
            id="parallel-reads",
            title="Read with many large requests in flight instead of page faults",
            action=f"load with deep-parallel large reads (loadscope's '{best}' strategy):"
            f" {f.seconds(best):.3g} s vs {f.seconds('mmap'):.3g} s cold, {gain:.1f}x",
            strategy=best,
            expected_speedup=gain,
            evidence=evidence,
            ram_bytes_needed=need,
            risk=_ram_risk(f, need),
            confidence="high" if gain >= 2 else "medium",
            snippets=[
                *load_snippets("parallel-reads", f, f.model_path),
                _remeasure(f, "--strategies mmap,api,auto,prewarm,vllm-prefetch"),
            ],
        )
    ]


def rule_fullread(f: Facts) -> list[Recommendation]:
    """The maintainer's fix — only when the trials show it faster and RAM allows it."""
    gain = f.speedup("fullread")
    if gain is None:
        return []
    need = 2 * f.model_bytes
    if gain < WORTH_IT:
        return []
    if f.headroom_bytes is not None and need > f.headroom_bytes:
        return []  # guarded: would not fit (see rule_fullread_contradiction for the note)
    return [
        Recommendation(
            id="read-whole-files",
            title="Read whole files instead of memory-mapping them",
            action=f"load(open(p,'rb').read()): {f.seconds('fullread'):.3g} s vs"
            f" {f.seconds('mmap'):.3g} s cold, {gain:.1f}x",
            strategy="fullread",
            expected_speedup=gain,
            evidence=[
                Evidence(
                    "fullread cold", f.seconds("fullread"), "s", _ids(f, ("fullread", "cold"))
                ),
                Evidence("mmap cold", f.seconds("mmap"), "s", _ids(f, ("mmap", "cold"))),
            ],
            ram_bytes_needed=need,
            risk="holds the file twice at the peak; with N ranks per node, N copies. "
            + _ram_risk(f, need),
            confidence="medium",
            snippets=load_snippets("read-whole-files", f, f.model_path),
        )
    ]


def rule_readahead(f: Facts) -> list[Recommendation]:
    """Raise a small readahead on network or FUSE storage where mmap is latency-bound."""
    if f.storage_class not in ("fuse", "network-fs", "network-block", "wsl"):
        return []
    if f.read_ahead_kb is None or f.read_ahead_kb >= 4096:
        return []
    mmap_bps = f.rate("mmap")
    if f.limit_bytes_per_s and mmap_bps and mmap_bps >= HEALTHY_FRACTION * f.limit_bytes_per_s:
        return []
    cmd = f"echo 8192 | sudo tee {shlex.quote(f.bdi_path + '/read_ahead_kb')}" if f.bdi_path else ""
    if f.fuse:
        # The mount's own fusectl folder when the probe found it (its number changes at
        # every mount); else where to look it up.
        conn = f.fuse_connection_path
        if conn:
            cmd += f"\n# and for FUSE: echo 64 | sudo tee {shlex.quote(conn + '/max_background')}"
        else:
            cmd += (
                "\n# and for FUSE (N: the mount's device minor, mountpoint -d MOUNT):"
                "\n# echo 64 | sudo tee /sys/fs/fuse/connections/N/max_background"
            )
    return [
        Recommendation(
            id="raise-readahead",
            title="Raise the mount's readahead",
            action=f"readahead is {f.read_ahead_kb} KiB on {f.storage_class} storage; raise it"
            " to 8 MiB so mmap streams in large requests (host-wide setting for this mount)",
            evidence=[
                Evidence("read_ahead_kb", f.read_ahead_kb, "KiB"),
                Evidence("mmap cold throughput", format_rate(mmap_bps) if mmap_bps else None),
                Evidence(
                    "probe: storage limit",
                    format_rate(f.limit_bytes_per_s) if f.limit_bytes_per_s else None,
                ),
            ],
            risk="host-wide for this mount; root; resets at remount",
            confidence="medium",
            measured=False,
            snippets=[command("shell", cmd)],
        )
    ]


def rule_prewarm(f: Facts) -> list[Recommendation]:
    """Prewarm the page cache when loads repeat, RAM holds the model and warm is much faster."""
    cold, warm = f.seconds("mmap"), f.seconds("mmap", "warm")
    if not cold or not warm or cold / warm < 3:
        return []
    if f.headroom_bytes is not None and f.model_bytes > f.headroom_bytes:
        return []
    return [
        Recommendation(
            id="prewarm",
            title="Prewarm the page cache before loads that repeat",
            action=f"a warm load took {warm:.3g} s vs {cold:.3g} s cold ({cold / warm:.0f}x):"
            " read the files once ahead of time (the page cache decays, so shortly before)",
            evidence=[
                Evidence("mmap warm", warm, "s", _ids(f, ("mmap", "warm"))),
                Evidence("mmap cold", cold, "s", _ids(f, ("mmap", "cold"))),
            ],
            ram_bytes_needed=f.model_bytes,
            risk="page cache is shared and reclaimable: other memory pressure evicts it",
            confidence="medium",
            snippets=load_snippets("prewarm", f, f.model_path),
            apply={"kind": "warm", "source": f.model_path},
            optional=True,
        )
    ]


def rule_copy_local(f: Facts) -> list[Recommendation]:
    """Copy to a local disk with room when it is measured faster, with the break-even.

    The local load time is estimated from the candidate's measured cold read rate
    (the copy does not exist yet, so it cannot be trialled); the copy's cost from
    the slower of the fastest measured cold read here and the candidate's write rate.
    """
    disk, mmap_s = f.local_disk, f.seconds("mmap")
    if disk is None or not mmap_s or f.storage_class in ("local-block", "memory"):
        return []
    # A load is never faster than the same load from the page cache (the warm trials).
    warm_floor = min((t for s in f.warm if (t := f.seconds(s, "warm"))), default=0.0)
    local_s = max(f.model_bytes / disk.cold_read_bytes_per_s, warm_floor)
    gain = mmap_s / local_s
    if gain < WORTH_IT:
        return []
    in_place = {s: t for s in f.cold if (t := f.seconds(s))}
    best_name = min(in_place, key=lambda s: in_place[s])
    best_s = in_place[best_name]
    copy_rate = min(f.model_bytes / best_s, disk.write_bytes_per_s)
    copy_s = f.model_bytes / copy_rate
    saved = mmap_s - local_s
    break_even = max(1, math.ceil(copy_s / saved))
    beats_in_place = local_s * WORTH_IT <= best_s
    dest = copy_destination(disk.directory, f.model_root)
    action = (
        f"copy the model to {disk.directory} (local disk, {format_bytes(disk.free_bytes)} free):"
        f" a cold load there ~{local_s:.3g} s vs {mmap_s:.3g} s here, {gain:.1f}x; the copy"
        f" takes ~{copy_s:.3g} s, repaid after {break_even} cold load(s)"
    )
    if not beats_in_place:
        action += (
            f" (but '{best_name}' already loads in {best_s:.3g} s in place: a copy gains"
            f" {best_s / local_s:.1f}x over that)"
        )
    return [
        Recommendation(
            id="copy-to-local-disk",
            title="Copy the model to a local disk",
            action=action,
            expected_speedup=gain,
            evidence=[
                Evidence(
                    f"probe: {disk.directory} cold read"
                    + ("" if disk.cold_verified else " (cold not verified)"),
                    round(disk.cold_read_bytes_per_s),
                    "B/s",
                ),
                Evidence(f"probe: {disk.directory} write", round(disk.write_bytes_per_s), "B/s"),
                Evidence(
                    "estimated cold load there (its read rate, floored at the warm load)",
                    round(local_s, 4),
                    "s",
                ),
                Evidence("mmap cold here", mmap_s, "s", _ids(f, ("mmap", "cold"))),
                Evidence(
                    f"fastest in place ({best_name})", best_s, "s", _ids(f, (best_name, "cold"))
                ),
                Evidence("break-even", break_even, "cold loads"),
            ],
            risk=f"needs {format_bytes(f.model_bytes)} of disk space; the copy goes stale when"
            " the model is updated",
            confidence="medium",
            snippets=commands(
                [
                    (
                        "shell",
                        f"loadscope copy {shlex.quote(f.model_root)} {shlex.quote(dest)}"
                        "   # verified, resumable; or: rsync -a"
                        f" {shlex.quote(f.model_root + '/')} {shlex.quote(dest + '/')}",
                    ),
                    ("transformers", f"model = AutoModelForCausalLM.from_pretrained({dest!r})"),
                    ("vllm", f"vllm serve {shlex.quote(dest)}"),
                    ("sglang", f"python -m sglang.launch_server --model-path {shlex.quote(dest)}"),
                ]
            ),
            optional=not beats_in_place,
            measured=False,
            apply={"kind": "copy", "source": f.model_root, "dest": dest},
        )
    ]


def rule_wsl(f: Facts) -> list[Recommendation]:
    if f.storage_class != "wsl":
        return []
    return [
        Recommendation(
            id="move-off-wsl-drive",
            title="Move the model off the Windows drive",
            action="the files are on a Windows drive seen through WSL's 9P/drvfs; copy them"
            " into the Linux filesystem (e.g. ~/models)",
            evidence=[Evidence("storage class", "wsl")],
            risk="needs disk space in the WSL virtual disk",
            confidence="high",
            snippets=[command("shell", f"cp -r {shlex.quote(f.model_root)} ~/models/")],
        )
    ]


def rule_stalled(f: Facts) -> Recommendation:
    """No speed advice means anything while reads go unanswered: fix the storage first."""
    assert f.stalled is not None
    return Recommendation(
        id="storage-stalled",
        title="Find out why the storage stopped answering",
        action=f"{f.stalled}; until reads come back no load can finish here: check the"
        " server or FUSE daemon (dmesg, its logs), then run the diagnosis again",
        evidence=[Evidence("stalled read", f.stalled)],
        risk="a hard NFS mount waits forever by design; 'soft,timeo=' makes reads fail instead",
        confidence="high",
        snippets=[
            command(
                "shell",
                "dmesg | tail -50            # 'server not responding', hung tasks\n"
                "grep -E 'nfs|fuse' /proc/mounts   # mount options: hard/soft, timeo\n"
                "cat /sys/fs/fuse/connections/*/waiting  # FUSE requests not answered",
            )
        ],
        measured=False,
    )


def rule_memory_fit(f: Facts) -> list[Recommendation]:
    """The model is bigger than the memory this process may use: a CPU load will not fit."""
    if f.headroom_bytes is None or f.model_bytes <= f.headroom_bytes:
        return []
    if set(f.cold) & set(GPU_STRATEGIES):
        return []  # measured on a GPU: the weights need not all sit in host RAM
    limit = (
        f" under the {format_bytes(f.cgroup_limit_bytes)} cgroup limit"
        if f.cgroup_limit_bytes
        else ""
    )
    return [
        Recommendation(
            id="memory-limit",
            title="Give the load more memory than the model",
            action=f"the model is {format_bytes(f.model_bytes)} but only"
            f" {format_bytes(f.headroom_bytes)} is free for this process{limit}: a load that"
            " materialises the weights in RAM will be OOM-killed, and the page cache cannot"
            " keep the files warm; raise the limit, or load straight to the GPU",
            evidence=[
                Evidence("model size", f.model_bytes, "B"),
                Evidence("memory headroom", f.headroom_bytes, "B"),
                *(
                    [Evidence("cgroup limit", f.cgroup_limit_bytes, "B")]
                    if f.cgroup_limit_bytes
                    else []
                ),
            ],
            ram_bytes_needed=f.model_bytes,
            risk="a higher limit takes memory from other tenants of the node",
            confidence="high",
            snippets=commands(
                [
                    (
                        "shell",
                        "# docker: docker run --memory=<model size + 4g> ...\n"
                        "# kubernetes: resources.limits.memory: <model size + 4Gi>",
                    ),
                    (
                        "safetensors",
                        "from safetensors.torch import load_file\n"
                        "sd = load_file(path, device='cuda:0')  # tensor by tensor, not all in RAM",
                    ),
                ]
            ),
            measured=False,
        )
    ]


def rule_pickle(f: Facts) -> list[Recommendation]:
    if "torch" not in f.formats:
        return []
    conv = f.conversion
    gain = conv.speedup if conv is not None else None
    action = (
        "safetensors loads without unpickling (no code execution) and can be"
        " memory-mapped; convert once and load the .safetensors files"
    )
    evidence = [Evidence("format", "torch pickle")]
    if conv is not None and gain is not None:
        name = conv.source.rsplit("/", 1)[-1]
        action += (
            f"; measured here on {name} ({format_bytes(conv.sample_bytes)}) converted"
            f" {conv.where}: load_file {conv.safetensors_cold_s:.3g} s vs torch.load"
            f" {conv.pickle_cold_s:.3g} s cold ({gain:.1f}x{', slower here' if gain < 1 else ''})"
            + (
                f", warm {conv.safetensors_warm_s:.3g} s vs {conv.pickle_warm_s:.3g} s"
                if conv.safetensors_warm_s and conv.pickle_warm_s
                else ""
            )
            + ("; the same tensors, digests checked" if conv.verified else "")
            + ("; the converted sample was removed" if conv.removed else "")
        )
        evidence += [
            Evidence("torch.load cold, converted sample", conv.pickle_cold_s, "s"),
            Evidence("load_file cold, converted sample", conv.safetensors_cold_s, "s"),
        ]
    elif conv is not None and conv.reason:
        evidence.append(Evidence("conversion not measured", conv.reason))
    return [
        Recommendation(
            id="convert-to-safetensors",
            title="Convert torch pickles to safetensors",
            action=action,
            evidence=evidence,
            risk="writes a copy; needs the disk space of the model",
            confidence="high",
            expected_speedup=gain,
            measured=gain is not None,
            snippets=[
                command(
                    "safetensors",
                    "import torch; from safetensors.torch import save_file\n"
                    "sd = torch.load('pytorch_model.bin', weights_only=True)\n"
                    "save_file({k: v.contiguous() for k, v in sd.items()}, 'model.safetensors')",
                )
            ],
            # A measured gain worth having is a fix, not an option.
            optional=gain is None or gain < WORTH_IT,
        )
    ]


def _rank_modes(f: Facts) -> tuple[str, BroadcastSummary | None, list[BroadcastSummary]]:
    """The cache state compared (cold when measured), independent reads, the other modes."""
    cache = "cold" if any(c == "cold" for _, c in f.rank_modes) else "warm"
    indep = f.rank_modes.get(("independent", cache))
    others = [
        s
        for (mode, c), s in f.rank_modes.items()
        if c == cache and mode != "independent" and s.speedup_vs_independent
    ]
    return cache, indep, others


def rule_broadcast(f: Facts) -> list[Recommendation]:
    """Rank 0 reads, the others receive: when the multi-rank trials show it faster."""
    if not f.ranks or not f.rank_modes:
        return []
    cache, indep, others = _rank_modes(f)
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
    return [
        Recommendation(
            id="broadcast",
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
                _remeasure(f, f"--ranks {f.ranks} --modes independent,{best.mode}"),
            ],
        )
    ]


def rule_gpu_staged(f: Facts) -> list[Recommendation]:
    """Pinned, overlapped staging to the GPU, when it beats safetensors' own device load."""
    gain = f.speedup("staged", base_name="mmap-cuda")
    if gain is None or gain < WORTH_IT:
        return []
    return [
        Recommendation(
            id="gpu-staged",
            title="Stage reads through pinned memory with overlapped copies to the GPU",
            action=f"loadscope's 'staged' path: {f.seconds('staged'):.3g} s vs"
            f" {f.seconds('mmap-cuda'):.3g} s for load_file(device='cuda') cold, {gain:.1f}x",
            strategy="staged",
            expected_speedup=gain,
            evidence=[
                Evidence("staged cold", f.seconds("staged"), "s", _ids(f, ("staged", "cold"))),
                Evidence(
                    "mmap-cuda cold", f.seconds("mmap-cuda"), "s", _ids(f, ("mmap-cuda", "cold"))
                ),
            ],
            risk="host memory bounded by the pinned ring; no full CPU copy of the model",
            confidence="high" if gain >= 2 else "medium",
            snippets=[
                command("peers", "pip install fastsafetensors  # or runai-model-streamer"),
                _remeasure(f, "--device cuda"),
            ],
        )
    ]


RULES: tuple[Rule, ...] = (
    rule_parallel,
    rule_readahead,
    rule_fullread,
    rule_prewarm,
    rule_copy_local,
    rule_broadcast,
    rule_gpu_staged,
    rule_wsl,
    rule_pickle,
    rule_memory_fit,
)


def _ram_risk(f: Facts, need: int) -> str:
    if f.headroom_bytes is None:
        return f"needs ~{format_bytes(need)} of RAM (free memory unknown)"
    limit = f" (cgroup limit {format_bytes(f.cgroup_limit_bytes)})" if f.cgroup_limit_bytes else ""
    return f"needs ~{format_bytes(need)} of RAM; {format_bytes(f.headroom_bytes)} free{limit}"


def contradictions(f: Facts) -> list[str]:
    """Where the measurements here contradict a rule of thumb."""
    notes = []
    gain = f.speedup("fullread")
    if gain is not None and gain < 1:
        notes.append(
            f"the folklore fix (read whole files instead of mmap) measured {1 / gain:.1f}x"
            " slower than mmap here: not recommended on this storage"
        )
    elif (
        gain is not None
        and gain >= WORTH_IT
        and f.headroom_bytes is not None
        and 2 * f.model_bytes > f.headroom_bytes
    ):
        notes.append(
            f"reading whole files was {gain:.1f}x faster, but needs"
            f" ~{format_bytes(2 * f.model_bytes)}"
            f" of RAM and only {format_bytes(f.headroom_bytes)} is free: not recommended"
        )
    if f.ranks and f.rank_modes:
        cache, indep, others = _rank_modes(f)
        best = max(others, key=lambda s: s.speedup_vs_independent or 0, default=None)
        if indep and best and best.speedup_vs_independent and best.speedup_vs_independent < 1:
            notes.append(
                f"rank-0 read + broadcast ({best.mode}, the best of the broadcast modes) measured"
                f" {1 / best.speedup_vs_independent:.1f}x slower than {f.ranks} ranks reading"
                f" independently ({cache}): ranks on one node share its page cache, so"
                " independent reads hit storage once; broadcast pays where every rank"
                " would otherwise go to storage (across nodes, no shared cache)"
            )
    for address, current, top in f.degraded_links:
        notes.append(
            f"GPU {address}: PCIe link at {current}, below its maximum {top}: host-to-device"
            " copies are capped by the slower link (reseat the card, check the slot and BIOS)"
        )
    return notes


def advise(
    probe: ProbeReport,
    bench: BenchReport | None,
    ranks: BroadcastReport | None = None,
    failures: Sequence[str] = (),
    *,
    conversion: ConversionTrial | None = None,
) -> Advice:
    """The verdict and ranked fixes; ``failures`` (the doctor's failed steps) say why,
    when nothing could be measured; ``conversion`` measures "convert to safetensors"."""
    return advise_facts(facts_from(probe, bench, ranks, failures, conversion))


#: The default load each kind of run is judged against: without its cold trial there is
#: no baseline, so neither "healthy" nor a speed-up can be said.
BASELINES: tuple[str, ...] = ("mmap", "mmap-cuda", "pickle")


def unmeasured_reason(f: Facts) -> str | None:
    """Why there is no evidence for a verdict (no trial, no cold baseline), or None."""
    if any(b in f.cold for b in BASELINES):
        return None
    if f.storage_class == "memory" and any(b in f.warm for b in BASELINES):
        return None  # files in RAM are never cold: the warm default load is the baseline
    if not f.cold and not f.warm:
        what, default_why = "no trial completed", "no trial ran"
    else:
        what = "no cold trial of the default load (mmap) completed"
        default_why = "its cold trials could not be verified cold"
    return f"{what} ({f.failures[0] if f.failures else default_why})"


def advise_facts(f: Facts) -> Advice:
    if f.stalled:
        return Advice(
            Verdict("problem", "the storage stopped answering: a read got no reply"),
            [rule_stalled(f)],
            [],
        )
    recs = [r for rule in RULES for r in rule(f)]
    recs.sort(
        key=lambda r: (
            r.id != "memory-limit",  # first: without the memory, no other fix matters
            r.optional,
            not r.measured,
            -(r.expected_speedup or 0),
            r.confidence != "high",
        )
    )
    if recs and recs[0].id == "memory-limit":
        headline = (
            f"memory: the {format_bytes(f.model_bytes)} model does not fit in the"
            f" {format_bytes(f.headroom_bytes or 0)} this process may use"
        )
        return Advice(Verdict("problem", headline), recs, contradictions(f))
    missing = unmeasured_reason(f)
    if missing is not None:
        return Advice(Verdict("unmeasured", f"could not measure: {missing}"), [], [])
    if f.storage_class == "memory":
        for r in recs:
            r.optional = True
        headline = "healthy: the files live in RAM (tmpfs/ramfs); loading is a memory copy at most"
        return Advice(Verdict("healthy", headline), recs, contradictions(f))
    mmap_bps = f.rate("mmap")
    limit = f.sequential_limit_bytes_per_s
    near_limit = bool(limit and mmap_bps and mmap_bps >= HEALTHY_FRACTION * limit)
    healthy = (
        f.storage_class in ("local-block", "memory", "overlay")
        and near_limit
        and not network_like(f)
    )
    if healthy:
        for r in recs:
            r.optional = True
        assert mmap_bps is not None and limit
        headline = (
            f"healthy: {f.storage_class} storage, the default load runs at"
            f" {format_rate(mmap_bps)},"
            f" {mmap_bps / limit:.0%}"
            " of the measured sequential limit; nothing to fix"
        )
        return Advice(Verdict("healthy", headline), recs, contradictions(f))
    problems = [r for r in recs if not r.optional]
    if problems:
        top = problems[0]
        est = "" if top.measured else " (estimated)"
        gain = f", {top.expected_speedup:.1f}x faster{est}" if top.expected_speedup else ""
        headline = f"{_kind(f)}: {top.title.lower()}{gain}"
        return Advice(Verdict("problem", headline), recs, contradictions(f))
    headline = f"{_kind(f)}: no measured fix beats the default by {WORTH_IT:g}x"
    return Advice(Verdict("healthy", headline), recs, contradictions(f))


#: A cold 4 KiB read this slow is not a local SSD's (NVMe answers in ~0.1 ms, SATA SSDs
#: in ~0.2 ms, a virtio disk served from its host's cache in ~0.5 ms here); network
#: volumes take 0.5-2 ms and more.
NETWORK_LIKE_LATENCY_US = 1000.0


def network_like(f: Facts) -> bool:
    """A disk named local whose measured latency is a network volume's."""
    return (
        f.storage_class == "local-block"
        and f.latency_p50_us is not None
        and f.latency_p50_us >= NETWORK_LIKE_LATENCY_US
    )


def _kind(f: Facts) -> str:
    p50 = f"cold 4 KiB reads p50 {f.latency_p50_us / 1000:.2g} ms" if f.latency_p50_us else ""
    lat = f" ({p50})" if p50 else ""
    if network_like(f):
        return f"local disk behaving like a network volume ({p50}; a local disk answers in ~0.1 ms)"
    name = {
        "fuse": "FUSE storage, latency-bound",
        "network-fs": "network filesystem, latency-bound",
        "network-block": "network block volume",
        "wsl": "Windows drive under WSL",
        "local-block": "local disk",
        "memory": "memory-backed storage",
    }.get(f.storage_class, f"{f.storage_class} storage")
    return name + (lat if f.storage_class == "network-block" else "")


def advice_dict(a: Advice) -> dict[str, Any]:
    from dataclasses import asdict

    return {
        "verdict": asdict(a.verdict),
        "recommendations": [asdict(r) for r in a.recommendations],
        "notes": a.notes,
    }
