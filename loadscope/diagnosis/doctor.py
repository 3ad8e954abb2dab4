"""``loadscope doctor``: probes, then the trials they call for, then the advice, in one budget.

The report is one JSON document (tool version, time, host facts, target,
probes, trials with downsampled series, recommendations, and every failed or
skipped step with its reason), rendered as a terminal summary or as Markdown
to paste into an issue.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import posixpath
import re
import shutil
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadscope.actions.convert import (
    ConversionFailed,
    ConversionTrial,
    conversion_folder,
    convert,
)
from loadscope.advice.rules import Advice, Evidence, Recommendation, advice_dict, advise
from loadscope.advice.snippets import short_label, snippet_heading
from loadscope.base._version import __version__
from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.base.units import format_bytes
from loadscope.engine.bench import (
    GPU_STRATEGIES,
    BenchCancelled,
    BenchError,
    BenchOptions,
    BenchReport,
    Listener,
    describe_strategies,
    run_bench,
)
from loadscope.engine.bench import to_text as bench_text
from loadscope.engine.broadcast import (
    BroadcastCancelled,
    BroadcastOptions,
    BroadcastReport,
    Mode,
    run_broadcast,
)
from loadscope.engine.broadcast import to_text as ranks_text
from loadscope.engine.planning import CostModel, plan_budget
from loadscope.engine.probing import ProbeReport, run_probes
from loadscope.engine.probing import to_text as probe_text
from loadscope.model.targets import Target
from loadscope.probes.system import memory_headroom
from loadscope.report.schema import SchemaError
from loadscope.report.schema import check as check_schema
from loadscope.report.sections import other_failures

SCHEMA_VERSION = 1
DEFAULT_BUDGET_S = 120.0


class ReportError(LoadscopeError):
    """A file that is not a loadscope doctor report."""

    exit_code = ExitCode.CORRUPT


#: A report larger than this is not one loadscope wrote (a 1,000-shard model's is ~10 MiB).
MAX_REPORT_BYTES = 256 << 20


def load_report(path: str, kind: str = "doctor") -> dict[str, Any]:
    """A saved report (JSON), checked against the published schema
    (:mod:`loadscope.report.schema`) before anything reads it: a bad file is one line
    naming it and the first offending path."""
    from loadscope.base.safeio import open_regular, pread_exact

    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_REPORT_BYTES:
            raise ReportError(
                f"not a loadscope report: {format_bytes(size)}, over the"
                f" {format_bytes(MAX_REPORT_BYTES)} a report can be",
                path=path,
            )
        raw = pread_exact(fd, size, 0, path=path)
    finally:
        os.close(fd)
    try:
        doc = json.loads(raw)
    except RecursionError:
        raise ReportError("not a loadscope report: JSON nested too deeply", path=path) from None
    except ValueError as exc:
        raise ReportError(f"not a JSON report ({exc})", path=path) from None
    try:
        check_schema(doc, kind)
    except SchemaError as exc:
        raise ReportError(f"not a loadscope {kind} report: {exc}", path=path) from None
    out: dict[str, Any] = doc
    return out


@dataclass(slots=True)
class DoctorReport:
    probe: ProbeReport
    bench: BenchReport | None
    advice: Advice
    created: str
    failures: list[str]
    #: Multi-rank trials (--ranks, or one rank per GPU when there are several).
    ranks: BroadcastReport | None = None
    #: A pickle-only model: a sample converted to safetensors and both timed.
    conversion: ConversionTrial | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "loadscope", "version": __version__},
            "created": self.created,
            "host": {"hostname": platform.node(), "kernel": platform.release()},
            "target": self.probe.target,
            "verdict": advice_dict(self.advice)["verdict"],
            "recommendations": advice_dict(self.advice)["recommendations"],
            "notes": self.advice.notes,
            "probe": self.probe.to_dict(),
            "bench": self.bench.to_dict() if self.bench else None,
            **({"ranks": self.ranks.to_dict()} if self.ranks else {}),
            **({"conversion": asdict(self.conversion)} if self.conversion else {}),
            "failures": self.failures,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, default=str)


#: The user's own load end to end (with transformers installed and a config.json beside
#: the weights): from_pretrained as is, and after loadscope warm (the no-code-change fix).
#: ``hf-load-model`` (from_config + load_state_dict) stays a bench strategy: from_config's
#: random init made it the slowest route here (benchmarks/RESULTS.md).
TRANSFORMERS_STRATEGIES = ("hf-pretrained", "hf-prewarm")


def builds_with_transformers(probe: ProbeReport) -> bool:
    """transformers is installed (found, not imported) and the model has a config.json."""
    import importlib.util

    root = str(probe.target.get("root", ""))
    return (
        bool(root)
        and os.path.isfile(os.path.join(root, "config.json"))
        and (importlib.util.find_spec("transformers") is not None)
    )


def choose_strategies(probe: ProbeReport) -> tuple[str, ...]:
    """The trials worth running here: the default, the parallel family (direct only where
    the filesystem takes O_DIRECT), then the folklore fix and prefetch.

    The order is the order they run in: when the budget runs out, what is cut is the
    buffered strategies, which cost the most on slow storage and rarely win there.
    """
    names = [
        "mmap",
        "auto",
        "parallel",
        # The fix in each stack's own terms (the snippets' numbers): the public API, the
        # no-code-change prewarm, vLLM's prefetch flag, then the peers where installed.
        "api",
        "prewarm",
        "vllm-prefetch",
        "fastsafetensors",
        "runai",
        *(TRANSFORMERS_STRATEGIES if builds_with_transformers(probe) else ()),
        "fullread",
        "prefetch",
    ]
    thr = probe.throughput.data
    if thr is not None and thr.method == "o_direct":
        names.insert(2, "direct")
    return tuple(names)


#: A trial's fixed cost beyond its load: the worker's fork, the cache put in the asked
#: state and verified (eviction, mincore), the digest check. Measured 0.2-0.5 s per
#: trial on this project's 2-core VM (a doctor of an 8 MiB model without a config.json:
#: 14 trials and the probes in 3.0 s of wall time).
TRIAL_OVERHEAD_S = 0.4
#: More for the trials that build a transformers model before their clock (the model's
#: code, on the meta device; the fork server imports transformers once, ~3.3 s here).
HF_TRIAL_OVERHEAD_S = 2.0
#: Once per run: the fork server starting (an interpreter importing torch, ~3 s here).
SERVER_START_S = 3.0
#: Warm trials that matter for the advice: the default (for prewarm) and the fast path.
WARM_STRATEGIES = ("mmap", "auto", "api", "pickle", "pickle-mmap", "mmap-cuda", "staged")
#: Broadcast modes worth a doctor's time: the baseline, the best single-reader variant,
#: and the sharded read.
RANK_MODES: tuple[Mode, ...] = ("independent", "broadcast-async", "sharded")
MIN_SAMPLE_BYTES = 8 << 20
#: The most rounds of trials a diagnosis runs when the measured ones show they fit.
MAX_ROUNDS = 3


#: Strategies that read through the page cache in the mount's readahead windows.
BUFFERED_STRATEGIES = (
    "mmap",
    "fullread",
    "prefetch",
    "vllm-prefetch",
    "pickle",
    "pickle-mmap",
    "mmap-cuda",
    "read-to-cuda",
)
#: Warm trials are memory copies; a deliberately slow figure for one.
WARM_RATE = 1e9


def estimate_rates(probe: ProbeReport) -> tuple[float, float]:
    """Slow-side cold rates (buffered, parallel) for planning, from the probe.

    A buffered load streams in readahead-sized requests, so its rate is the probe's
    single-reader rate at a block the size of the readahead (interpolated between the
    block sizes the probe measured; 4 KiB when readahead is off); the parallel family
    is planned at the 1 MiB single-reader rate, which it beats.
    """
    thr = probe.throughput.data
    if thr is None or not thr.sequential:
        return 50e6, 50e6
    bdi = probe.primary.storage.bdi.data
    ra = (bdi.read_ahead_kb or 0) * 1024 if bdi and bdi.read_ahead_kb is not None else 128 << 10
    window = max(4096, ra)
    points = sorted(thr.sequential, key=lambda p: p.block_bytes)
    under = [p for p in points if p.block_bytes <= window] or points[:1]
    over = [p for p in points if p.block_bytes > window]
    low = under[-1]
    buffered = low.bytes_per_s
    if over and low.block_bytes < window:
        # Latency-bound between two measured sizes: the rate grows with the request,
        # no faster than in proportion to it.
        high = over[0]
        step = (window - low.block_bytes) / (high.block_bytes - low.block_bytes)
        buffered = min(
            low.bytes_per_s * window / low.block_bytes,
            low.bytes_per_s + step * (high.bytes_per_s - low.bytes_per_s),
        )
    mib = [p.bytes_per_s for p in points if p.block_bytes >= 1 << 20] or [points[-1].bytes_per_s]
    return max(buffered, 1.0), max(min(mib), 1.0)


def cost_model(probe: ProbeReport, trials: list[tuple[str, str]]) -> CostModel:
    """The planner's cost model before any trial has run: rates from the probe."""
    buffered, parallel = estimate_rates(probe)

    def rate(strategy: str, cache: str) -> float:
        if cache == "warm":
            return WARM_RATE
        return buffered if strategy in BUFFERED_STRATEGIES else parallel

    return CostModel(
        seconds_per_byte={(s, c): 1.0 / rate(s, c) for s, c in trials},
        fixed_s=TRIAL_OVERHEAD_S,
        fixed_s_for=dict.fromkeys(TRANSFORMERS_STRATEGIES, HF_TRIAL_OVERHEAD_S),
        # Warm trials' page cache is filled as `loadscope warm` fills it: parallel reads.
        fill_s_per_byte=1.0 / parallel,
        start_s=SERVER_START_S,
    )


def plan_trials(
    probe: ProbeReport, trials: list[tuple[str, str]], budget_s: float
) -> tuple[int, int | None, dict[str, int]]:
    """Repeats and (when full loads cannot fit) a sample size for ``(strategy, cache)``
    trials, with the bytes each strategy's sample may hold: the planner
    (:func:`~loadscope.engine.planning.plan_budget`) on the probe's rates."""
    plan = plan_budget(
        cost_model(probe, trials),
        trials,
        probe.target["total_bytes"],
        budget_s,
        repeats=(2, 1),
        floor_bytes=MIN_SAMPLE_BYTES,
    )
    return plan.repeats, plan.sample, plan.sizes


def gpu_count(probe: ProbeReport) -> int:
    """NVIDIA GPUs the probe saw (nvidia-smi rows, else PCI functions)."""
    g = probe.gpus.data
    return max(len(g.smi), len(g.pci)) if g else 0


def resolve_device(device: str, probe: ProbeReport) -> tuple[str, str | None]:
    """``auto``: cuda when the probe saw a GPU and a worker can use it; else cpu, and why."""
    if device != "auto":
        return device, None
    if gpu_count(probe) == 0:
        return "cpu", None
    try:
        info = describe_strategies().get("mmap-cuda") or {}
    except BenchError as exc:
        return "cpu", f"GPU trials not run: {exc}"
    if info.get("unavailable"):
        return "cpu", f"a GPU is present but not usable from torch: {info['unavailable']}"
    return "cuda", None


def hints_from(probe: ProbeReport) -> dict[str, Any]:
    """What ``auto`` should use for cold files: the reader count the parallel probe found best."""
    thr = probe.throughput.data
    if thr is None or not thr.parallel:
        return {}
    best = max(thr.parallel, key=lambda p: p.bytes_per_s)
    return {"threads": max(4, best.readers), "block_bytes": best.block_bytes}


def run_doctor(
    target: Target,
    *,
    budget_s: float = DEFAULT_BUDGET_S,
    try_readahead: bool = False,
    listener: Listener | None = None,
    on_probes: Callable[[ProbeReport], None] | None = None,
    progress: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
    device: str = "auto",
    ranks: int | None = None,
    fio: bool = False,
) -> DoctorReport:
    """Probes, trials, advice. ``listener`` gets the trial events, ``on_probes`` the probe
    report as soon as it exists, ``progress`` each step's name; setting ``cancel``
    stops the run (BenchCancelled) with no worker left behind.

    ``device`` "auto" loads to the GPU when there is a usable one (else the CPU);
    ``ranks`` N >= 2 adds multi-rank trials (independent reads vs rank-0 read +
    broadcast vs sharded) in the last 40% of the trial budget; None means one rank
    per GPU when there are several. ``fio`` also runs the fio jobs that reproduce the
    probe's measurements (up to ~30 s, outside the budget)."""
    started = time.monotonic()
    failures: list[str] = []

    def step(name: str) -> None:
        if cancel is not None and cancel.is_set():
            raise BenchCancelled(f"stopped during {name}")
        if progress is not None:
            progress(name)

    probe = run_probes(target, budget_s=min(15.0, budget_s * 0.15), progress=step, run_fio=fio)
    if on_probes is not None:
        on_probes(probe)
    step("trials")
    for name, result in (("latency", probe.latency), ("throughput", probe.throughput)):
        if not result.ok:
            failures.append(f"probe {name}: {result.status.value}: {result.reason}")
    bench: BenchReport | None = None
    formats = target.formats
    device, device_note = resolve_device(device, probe)
    if device_note:
        failures.append(device_note)
    if formats != {"safetensors"}:
        strategies: tuple[str, ...] = ("pickle", "pickle-mmap")
        device = "cpu"
    elif device != "cpu":
        strategies = GPU_STRATEGIES
    else:
        strategies = choose_strategies(probe)
    trials = [(s, "cold") for s in strategies]
    trials += [(s, "warm") for s in strategies if s in WARM_STRATEGIES]
    if ranks is None and device != "cpu" and gpu_count(probe) >= 2:
        ranks = gpu_count(probe)
    multi = ranks is not None and ranks >= 2 and formats == {"safetensors"}
    remaining = max(10.0, budget_s - probe.elapsed_s - 2.0) * (0.6 if multi else 1.0)
    if formats == {"torch"}:
        # Half for converting a sample to safetensors and timing both: what makes
        # "convert to safetensors" a measured number.
        remaining *= 0.5
    repeats, sample, sample_sizes = plan_trials(probe, trials, remaining)
    if formats != {"safetensors"}:
        sample, sample_sizes = None, {}  # torch checkpoints load whole
    if device == "cpu" and formats == {"safetensors"} and target.alternates:
        # The same model as pickles beside the safetensors: measure the formats side by
        # side (seed 000) when whole loads fit; they cannot be sampled.
        # torch.load(weights_only=True), with and without mmap=True, beside load_file.
        torch_ways = ("pickle", "pickle-mmap")
        if sample is None:
            strategies = (*strategies, *torch_ways)
            trials += [(s, c) for s in torch_ways for c in ("cold", "warm")]
            repeats, sample, sample_sizes = plan_trials(probe, trials, remaining)
        if sample is not None:
            if any(s in strategies for s in torch_ways):
                strategies = tuple(x for x in strategies if x not in torch_ways)
                repeats, sample, sample_sizes = plan_trials(
                    probe, [t for t in trials if t[0] not in torch_ways], remaining
                )
            failures.append(
                "torch files beside the safetensors: not measured (loaded whole, they do not"
                f" fit {budget_s:g} s; `loadscope bench {target.spec} --strategies"
                " mmap,pickle` measures them)"
            )
    hints = hints_from(probe)
    try:
        if probe.stalled:
            # Trials would wait on the same storage: say so rather than time out each one.
            raise BenchError(f"not run: {probe.stalled}")
        bench = run_bench(
            target,
            BenchOptions(
                strategies=strategies,
                cache=("cold", "warm"),
                warm_strategies=WARM_STRATEGIES,
                hints=hints,
                repeats=repeats,
                # The plan is drawn before any trial, from the probe's rates; rounds
                # that the measured ones show still fit are run too (up to 3).
                more_rounds=max(0, MAX_ROUNDS - repeats),
                warmup=False,
                sample_bytes=sample,
                sample_bytes_for=sample_sizes,
                sample_reason=f"full loads of every strategy would not fit {budget_s:g} s",
                trial_timeout_s=max(30.0, remaining),
                deadline=time.monotonic() + remaining,
                cancel=cancel,
                device=device,
            ),
            listener,
        )
        failures += [f"{k}: skipped: {v}" for k, v in bench.skipped.items()]
        failures += [
            f"trial #{t.id} {t.strategy} {t.cache}: {t.reason}"
            for t in bench.trials
            if t.status == "failed"
        ]
    except BenchError as exc:
        failures.append(f"bench: {exc}")
    conversion = None
    if formats == {"torch"} and not probe.stalled:
        step("conversion")
        total_left = max(10.0, budget_s - (time.monotonic() - started) - 1.0)
        conversion = measure_conversion(
            target, bench, time.monotonic() + total_left, listener, cancel
        )
        if conversion is not None and conversion.reason:
            failures.append(f"conversion to safetensors: not measured: {conversion.reason}")
    rank_report = None
    if multi and ranks is not None and not probe.stalled:
        step("ranks")
        rank_report = _rank_trials(target, ranks, device, budget_s, started, cancel, failures)
    step("advice")
    advice = advise(probe, bench, rank_report, failures, conversion=conversion)
    rec = next((r for r in advice.recommendations if r.id == "raise-readahead"), None)
    if rec is not None and bench is not None:
        if try_readahead:
            verify_readahead(target, probe, bench, rec, sample, failures)
        else:
            rec.evidence.append(
                Evidence("not verified here", "rerun with --try-readahead (root) to measure it")
            )
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return DoctorReport(probe, bench, advice, created, failures, rank_report, conversion)


def measure_conversion(
    target: Target,
    bench: BenchReport | None,
    deadline: float,
    listener: Listener | None,
    cancel: threading.Event | None,
) -> ConversionTrial | None:
    """The smallest torch file converted to safetensors in a folder loadscope makes and
    removes, then loaded both ways, interleaved, cold and warm, digests checked; the
    reason instead when it does not fit the time, the memory or the disk."""
    if not target.files:
        return None
    src = min(target.files, key=lambda f: f.size_bytes)
    trial = ConversionTrial(str(src.path), src.size_bytes)
    base = next(
        (
            s
            for s in (bench.summary if bench else [])
            if s.strategy == "pickle" and s.cache == "cold"
        ),
        None,
    )
    if base is None or not base.median_seconds:
        trial.reason = "no cold torch.load trial completed to compare with"
        return trial
    per_byte = base.median_seconds / max(target.total_bytes, 1)
    # Converting reads and writes it (about two loads), then four timed loads.
    estimate = 6 * per_byte * src.size_bytes + 5 * TRIAL_OVERHEAD_S
    left = deadline - time.monotonic()
    if estimate > left:
        trial.reason = (
            f"converting and timing {src.path.name} ({format_bytes(src.size_bytes)}) would take"
            f" ~{estimate:.0f} s, over the {max(0.0, left):.0f} s the budget leaves"
        )
        return trial
    if 2 * src.size_bytes > memory_headroom():
        trial.reason = f"converting {src.path.name} would hold it twice in RAM"
        return trial
    folder: Path | None = None
    try:
        folder, trial.where = conversion_folder(target.root, src.size_bytes)
        converted, trial.convert_seconds = convert(src, folder, timeout_s=max(10.0, left))
        sample = Target(
            f"{src.path.name} converted", "directory", folder, (converted,), alternates=(src,)
        )
        report = run_bench(
            sample,
            BenchOptions(
                strategies=("mmap", "pickle"),
                cache=("cold", "warm"),
                repeats=1,
                more_rounds=2,
                warmup=False,
                deadline=deadline,
                trial_timeout_s=max(30.0, left),
                cancel=cancel,
            ),
            listener,
        )
        med = {(x.strategy, x.cache): x.median_seconds for x in report.summary}
        trial.pickle_cold_s, trial.safetensors_cold_s = (
            med.get(("pickle", "cold")),
            med.get(("mmap", "cold")),
        )
        trial.pickle_warm_s, trial.safetensors_warm_s = (
            med.get(("pickle", "warm")),
            med.get(("mmap", "warm")),
        )
        ok = [t for t in report.trials if t.status == "ok"]
        trial.trial_ids = [t.id for t in ok]
        trial.verified = bool(ok) and all(t.verified for t in ok)
        if trial.speedup is None:
            trial.reason = "no cold trial of both formats completed"
    except (ConversionFailed, BenchError) as exc:
        trial.reason = str(exc)
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            trial.removed = not folder.exists()
    return trial


def _rank_trials(
    target: Target,
    ranks: int,
    device: str,
    budget_s: float,
    started: float,
    cancel: threading.Event | None,
    failures: list[str],
) -> BroadcastReport | None:
    """One cold round of the broadcast modes, in what is left of the budget."""
    left = budget_s - (time.monotonic() - started)
    if left < RANKS_MIN_S:
        failures.append(
            f"ranks: not run: {left:.0f} s of the budget left, they need {RANKS_MIN_S:.0f} s"
            " (raise --budget)"
        )
        return None
    try:
        return run_broadcast(
            target,
            BroadcastOptions(
                ranks=ranks,
                modes=RANK_MODES,
                cache=("cold",),
                repeats=1,
                warmup=False,
                device="cuda" if device != "cpu" else "cpu",
                timeout_s=left,
                trial_timeout_s=left,
                cancel=cancel,
            ),
        )
    except BroadcastCancelled as exc:
        raise BenchCancelled(str(exc)) from None
    except LoadscopeError as exc:
        failures.append(f"ranks: {exc}")
        return None


#: The least budget left for the multi-rank round (start-up of N ranks and three loads).
RANKS_MIN_S = 10.0

TRY_READAHEAD_KB = 8192
TRY_MAX_BACKGROUND = 64


def verify_readahead(
    target: Target,
    probe: ProbeReport,
    bench: BenchReport,
    rec: Recommendation,
    sample: int | None,
    failures: list[str],
) -> None:
    """Re-run the mmap trial with the mount's readahead raised, then put it back.

    The recommendation then carries the measured gain instead of the FUSE figure
    from elsewhere. Writes sysfs (root), for this mount only, and always restores.
    """
    from loadscope.probes.blockdev import fuse_connection_id

    storage = probe.primary.storage
    bdi = storage.bdi.data
    before = next((s for s in bench.summary if s.strategy == "mmap" and s.cache == "cold"), None)
    if bdi is None or before is None or not before.median_seconds:
        failures.append("readahead check: no bdi or no cold mmap trial to compare with")
        return
    knobs = [(Path(bdi.path) / "read_ahead_kb", TRY_READAHEAD_KB)]
    mount = storage.mount.data
    if mount is not None and mount.fstype.startswith("fuse") and mount.device:
        major, minor = (int(x) for x in mount.device.split(":"))
        conn = Path("/sys/fs/fuse/connections") / str(fuse_connection_id(major, minor))
        knobs.append((conn / "max_background", TRY_MAX_BACKGROUND))
    saved: list[tuple[Path, str]] = []
    try:
        for path, value in knobs:
            if path.exists():
                saved.append((path, path.read_text().strip()))
                path.write_text(f"{value}\n")
        after = run_bench(
            target,
            BenchOptions(strategies=("mmap",), repeats=2, warmup=False, sample_bytes=sample),
        )
    except (OSError, BenchError) as exc:
        failures.append(f"readahead check: {exc}")
        rec.evidence.append(Evidence("not verified", f"could not set readahead: {exc}"))
        return
    finally:
        for path, old in reversed(saved):
            try:
                path.write_text(f"{old}\n")
            except OSError as exc:
                failures.append(f"readahead check: could not restore {path} to {old}: {exc}")
    summary = next((s for s in after.summary if s.cache == "cold"), None)
    if summary is None or not summary.median_seconds:
        failures.append("readahead check: the mmap trial with raised readahead failed")
        return
    old_s = before.extrapolated_median_seconds or before.median_seconds
    new_s = summary.extrapolated_median_seconds or summary.median_seconds
    rec.expected_speedup = old_s / new_s
    rec.confidence = "high"
    rec.measured = True
    rec.evidence.append(
        Evidence(
            f"mmap cold with read_ahead_kb={TRY_READAHEAD_KB} (restored afterwards)",
            new_s,
            "s",
            [t.id for t in after.trials],
        )
    )
    rec.action += f"; measured here: mmap {old_s:.3g} s -> {new_s:.3g} s ({old_s / new_s:.1f}x)"


def to_text(report: DoctorReport) -> str:
    a = report.advice
    lines = [f"verdict: {a.verdict.headline}", ""]
    for i, r in enumerate(a.recommendations, 1):
        tag = " (optional)" if r.optional else ""
        lines.append(f"{i}. {r.title}{tag}")
        lines.append(_indent(r.action))
        if r.risk:
            lines.append(_indent(f"cost/risk: {r.risk}"))
        lines += _snippet_lines([asdict(snip) for snip in r.snippets])
    for note in a.notes:
        lines.append(textwrap.fill(f"note: {note}", 80, subsequent_indent="      "))
    lines += ["", "evidence:", "", probe_text(report.probe)]
    if report.bench is not None:
        lines += ["", bench_text(report.bench)]
    if report.ranks is not None:
        lines += ["", ranks_text(report.ranks)]
    if steps := other_failures(report.failures, report.bench.skipped if report.bench else {}):
        lines += ["", "failed or skipped steps:"] + [f"  {f}" for f in steps]
    return "\n".join(lines)


def redact(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy without the hostname or the model's paths (for reports shared outside a team).

    Hidden in every string of the report, wherever it is nested (recommendations'
    actions, evidence, snippets and apply, notes, failures, the conversion, the probes):
    the model's paths (``<model>``) and the folders above it (``<model>/..``, as a
    conversion beside the model names its parent), the model's folder name where a copy
    destination repeats it (``.../loadscope-copies/<model>``), the mounts it is served
    from (``<mount>``), the user's home (``~``) and name (``<user>``) as path components,
    the local-disk folders the probe measured that are not conventional ones
    (``<local-disk-N>``), and the hostname (``<host>``).

    Reports never hold environment variables or tokens in the first place.
    """
    host = str((doc.get("host") or {}).get("hostname", ""))
    target = doc.get("target") or {}
    labels = {
        str(target.get(key, "")): "<model>" for key in ("root", "spec", "source") if key in target
    }
    # Where the model's filesystems come from (an NFS server and export, a FUSE daemon's
    # source, a device): names and paths too.
    for f in (doc.get("probe") or {}).get("files") or []:
        mount = f.get("mount") if isinstance(f, dict) else None
        if isinstance(mount, dict):
            for key in ("source", "mount_point"):
                if isinstance(mount.get(key), str) and mount[key] not in labels:
                    labels[mount[key]] = "<mount>"
    labels[host] = "<host>"
    # Replaced as whole paths (not inside a longer name): the folders above the model,
    # the home folder, the local disks' folders; checked after the labels above.
    paths: dict[str, str] = {}
    home = posixpath.normpath(os.path.expanduser("~"))
    public = _public_dirs(home)
    for key in ("root", "source"):
        if isinstance(target.get(key), str) and target[key].startswith("/"):
            for above, label in _folders_above(target[key], public):
                paths.setdefault(above, label)
    if home.count("/") >= 1 and len(home) > 2:
        paths.setdefault(home, "~")
    local = ((doc.get("probe") or {}).get("local_disks") or {}).get("disks") or []
    folders = {d.get("directory") for d in local if isinstance(d, dict)}
    for folder in sorted(posixpath.normpath(f) for f in folders if isinstance(f, str)):
        if folder not in public and folder not in paths and folder not in labels:
            paths[folder] = (
                f"<local-disk-{sum(v.startswith('<local') for v in paths.values()) + 1}>"
            )
    subs: list[tuple[str, re.Pattern[str], str]] = [
        (s, re.compile(re.escape(s)), labels[s]) for s in labels if len(s) > 2
    ]
    subs += [
        (s, re.compile(rf"(?<![\w.~/-]){re.escape(s)}(?![\w.-])"), label)
        for s, label in paths.items()
        if s not in labels
    ]
    subs.sort(key=lambda sub: len(sub[0]), reverse=True)
    # After the paths: what is left of a name is a path component, never a word.
    for key in ("root", "source"):
        name = posixpath.basename(str(target.get(key, "")).rstrip("/"))
        if len(name) > 2:
            subs.append(
                (
                    name,
                    re.compile(rf"(?<=/loadscope-copies/){re.escape(name)}(?![\w.-])"),
                    "<model>",
                )
            )
    user = _user_name(home)
    if user:
        subs.append((user, re.compile(rf"(?<=/){re.escape(user)}(?![\w.-])"), "<user>"))

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            for _, pattern, label in subs:
                value = pattern.sub(label, value)  # labels hold no backslash
            return value
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    out: dict[str, Any] = clean(json.loads(json.dumps(doc, default=str)))
    # The fields that hold the hostname, whatever its length (substring replacement
    # above skips names too short to be told from ordinary words).
    for holder in (out.get("host"), (out.get("probe") or {}).get("system")):
        if isinstance(holder, dict) and "hostname" in holder:
            holder["hostname"] = "<host>"
    return out


def _public_dirs(home: str) -> set[str]:
    """Folders every machine has (the temp dirs, the conventional local disks, the home
    folder and those above it): no secret, and where redacting the folders above the
    model stops."""
    import tempfile

    from loadscope.engine.probing import CONVENTIONAL_LOCAL_DIRS

    public = {"/", "/tmp", "/var/tmp", "/dev/shm", *CONVENTIONAL_LOCAL_DIRS}
    public.add(posixpath.normpath(tempfile.gettempdir()))
    folder = home
    while folder not in ("/", ""):
        public.add(folder)
        folder = posixpath.dirname(folder)
    return public


def _folders_above(path: str, public: set[str]) -> list[tuple[str, str]]:
    """The folders above the model's ``path`` as ``<model>/..``, ``<model>/../..``, up to
    a top-level folder (``/data``) or a public one (the temp dir, the home folder)."""
    out: list[tuple[str, str]] = []
    label, folder = "<model>", posixpath.normpath(path)
    while True:
        folder, label = posixpath.dirname(folder), label + "/.."
        if folder in public or folder.count("/") < 2:
            return out
        out.append((folder, label))


def _user_name(home: str) -> str | None:
    """The user's login name when it could be told from other words in a path (a
    folder named after the user elsewhere: /scratch/alice); root's is no secret."""
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = posixpath.basename(home)
    return user if len(user) > 2 and user != "root" else None


def _snippet_lines(snippets: list[dict[str, Any]]) -> list[str]:
    """Per stack, its best measured snippet in full, the other routes in one line each."""
    lines: list[str] = []
    shown: set[str] = set()
    for snip in snippets:
        stack = str(snip["stack"])
        if snip.get("strategy") and stack in shown:
            continue  # folded into the "also here" line below
        shown.add(stack)
        lines.append(f"   {snippet_heading(snip)}:")
        lines += [f"     {line}" for line in str(snip["code"]).splitlines()]
        if not snip.get("strategy"):
            continue
        others = [
            s for s in snippets if s["stack"] == stack and s is not snip and s.get("strategy")
        ]
        if others:
            also = "; ".join(short_label(s) for s in others)
            lines.append(
                textwrap.fill(
                    f"other routes: {also}",
                    80,
                    initial_indent="     ",
                    subsequent_indent="       ",
                )
            )
    return lines


def _indent(text: str) -> str:
    return textwrap.fill(text, 80, initial_indent="   ", subsequent_indent="   ")
