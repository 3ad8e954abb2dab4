"""``loadscope time``: the user's own command, cold, and after each no-code fix.

Every other number loadscope prints comes from its re-enactment of a stack's loading;
this one is the user's real load. Each run is :func:`loadscope.engine.usercmd.run_once`
after the model's files were evicted and verified cold. The variants:

- ``as-is``: the command, cold;
- ``readahead``: the mount's ``read_ahead_kb`` raised to 8192 KiB (and FUSE's
  ``max_background`` to 64) for the run, put back after it (root; the journal and the
  mount's lock the doctor uses, so a killed run's values come back on the next
  loadscope command);
- ``warm``: ``loadscope warm MODEL`` and then the command, timed together (what a user
  runs: ``loadscope warm M && CMD``);
- ``copy``: the command with its ``{model}`` placeholder pointing at a verified copy on a
  local disk (``copy_to``), the copy's pages evicted before each run; the copy is made
  once, its time said apart, and removed at the end. loadscope never rewrites a command
  silently: without ``{model}`` there is no copy variant.

The runs are interleaved (each round runs every variant once) and each variant's median
is compared with the as-is median. Without a model named, a first run (not cold, not in
the table) finds the weight files the command opened, and later runs evict those.

May import: ``loadscope.engine``, ``loadscope.actions``, ``loadscope.model``,
``loadscope.probes``, ``loadscope.advice.results``, ``loadscope.report.flamegraph``,
``loadscope.base``.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from loadscope.actions.hostsettings import MountLock, changed, mount_key
from loadscope.base import fix_ids
from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.base.units import format_bytes
from loadscope.engine.phase_recorder import Recorder
from loadscope.engine.phases import PhaseTable, cross_check
from loadscope.engine.usercmd import RunResult, RunSpec, run_once
from loadscope.probes.blockdev import bdi_settings, fuse_connection_id
from loadscope.probes.pagecache import ColdCache
from loadscope.probes.result import Unavailable
from loadscope.report.flamegraph import flame_svg

PLACEHOLDER = "{model}"
#: The readahead the variant tries, and FUSE's requests in flight beside it (the doctor's).
READAHEAD_KB = 8192
MAX_BACKGROUND = 64
FIXES = ("readahead", "warm", "copy")
LABELS = {
    "as-is": "as is, cold",
    "readahead": f"readahead {READAHEAD_KB} KiB",
    "warm": "loadscope warm first",
    "copy": "local copy",
}


class TimeError(LoadscopeError):
    exit_code = ExitCode.USAGE


class TimeCancelled(LoadscopeError):
    """Stopped from outside (the app's Stop) between or during runs."""

    exit_code = ExitCode.INTERRUPTED


#: A command that read less of the model than this did not load it (transformers 5 maps
#: the weights and reads them at first use; ``sleep 1`` reads nothing): its times are
#: shown, but no ratio is printed as a fix's gain.
READ_AT_LEAST = 0.5


@dataclass(slots=True)
class Variant:
    name: str
    #: What it changes, in a sentence (host-wide or not, disk used).
    changes: str = ""
    #: Why it was not run here ("" when it was).
    skipped: str = ""
    runs: list[RunResult] = field(default_factory=list)
    #: Whether each run started verified cold.
    cold: list[bool] = field(default_factory=list)
    #: For ``warm``: the seconds ``loadscope warm`` took before each run.
    before_s: list[float] = field(default_factory=list)

    def times(self) -> list[float]:
        """Each timed run's seconds (``warm``: with the warm-up it needs)."""
        extra = self.before_s or [0.0] * len(self.runs)
        pairs = zip(self.runs, extra, strict=True)
        return [r.seconds + e for r, e in pairs if r.seconds is not None]

    def median(self) -> float | None:
        t = self.times()
        return statistics.median(t) if t and len(t) == len(self.runs) else None


@dataclass(slots=True)
class TimeReport:
    argv: list[str]
    files: list[str]
    total_bytes: int
    rounds: int
    variants: list[Variant]
    notes: list[str] = field(default_factory=list)
    #: Weight files the discovery run found (no ``--model``).
    discovered: list[str] = field(default_factory=list)
    #: ``--profile``: one more cold run of the command as it is, by phase (py-spy).
    phases: PhaseTable | None = None
    #: ``--profile``: that run's flame graph (SVG; not in the JSON), "" when none.
    flame_svg: str = ""

    def baseline(self) -> Variant:
        return self.variants[0]

    def exit_code(self) -> ExitCode:
        base = self.baseline()
        if base.median() is None:
            return ExitCode.FAILURE
        return ExitCode.OK

    def read_share(self) -> float | None:
        """The share of the model the command as it is read in its median run (the page
        cache's residency of the weight files as it ended, having started evicted);
        None where that could not be read."""
        base = self.baseline()
        runs = sorted((r for r in base.runs if r.seconds is not None), key=lambda r: r.seconds or 0)
        return runs[len(runs) // 2].resident_after if runs else None

    def lazy(self) -> bool:
        """Whether the command read under :data:`READ_AT_LEAST` of the model: its time is
        not the load's, and no fix's gain is taken from it."""
        share = self.read_share()
        return share is not None and share < READ_AT_LEAST

    def to_dict(self) -> dict[str, Any]:
        base = self.baseline().median()
        return {
            "schema_version": 1,
            "kind": "time",
            "argv": self.argv,
            "files": self.files,
            "total_bytes": self.total_bytes,
            "rounds": self.rounds,
            "discovered": self.discovered,
            "notes": self.notes,
            "phases": self.phases.to_dict() if self.phases is not None else None,
            "variants": [
                {
                    "name": v.name,
                    "changes": v.changes,
                    "skipped": v.skipped,
                    "median_seconds": v.median(),
                    "speedup": (base / m)
                    if base and (m := v.median()) and not self.lazy()
                    else None,
                    "cold": v.cold,
                    "before_seconds": v.before_s,
                    "runs": [r.to_dict() for r in v.runs],
                }
                for v in self.variants
            ],
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TimeReport:
        """A report read back from ``time --json`` (checked against its schema first)."""
        variants = [
            Variant(
                name=str(v["name"]),
                changes=str(v.get("changes") or ""),
                skipped=str(v.get("skipped") or ""),
                runs=[RunResult.from_dict(r) for r in v.get("runs") or []],
                cold=[bool(c) for c in v.get("cold") or []],
                before_s=[float(b) for b in v.get("before_seconds") or []],
            )
            for v in doc["variants"]
        ]
        return cls(
            argv=[str(a) for a in doc["argv"]],
            files=[str(f) for f in doc["files"]],
            total_bytes=int(doc["total_bytes"]),
            rounds=int(doc.get("rounds") or 0),
            variants=variants,
            notes=[str(n) for n in doc.get("notes") or []],
            discovered=[str(f) for f in doc.get("discovered") or []],
            phases=PhaseTable.from_dict(doc["phases"]) if doc.get("phases") else None,
        )


@dataclass(frozen=True, slots=True)
class TimeOptions:
    argv: tuple[str, ...]
    #: The model as the user named it (a folder or a file); None: found by a first run.
    model: str | None = None
    until: str | None = None
    ready_url: str | None = None
    timeout_s: float = 3600.0
    rounds: int = 3
    fixes: tuple[str, ...] = FIXES
    copy_to: str | None = None
    allow_drop_caches: bool = False
    output: IO[bytes] | None = None
    #: False where the caller already holds the mount's lock (the doctor).
    lock: bool = True
    #: Set from another thread to stop (the app's Stop): :class:`TimeCancelled`.
    cancel: threading.Event | None = None
    #: One more cold run of the command as it is, sampled by py-spy: its time by phase.
    profile: bool = False


def _substitute(argv: Sequence[str], model: str) -> tuple[str, ...]:
    return tuple(a.replace(PLACEHOLDER, model) for a in argv)


def _weight_files(model: str) -> tuple[list[str], int]:
    from loadscope.model.inspection import open_checked

    with open_checked(model) as target:
        files = [str(f.path) for f in target.files]
        return files, target.total_bytes


def _evict(files: Sequence[str], allow_drop_caches: bool, notes: list[str]) -> bool:
    """Evict ``files`` and say whether every one is verified cold (a reason, once)."""
    cache = ColdCache(allow_drop_caches=allow_drop_caches)
    ok = True
    for path in files:
        e = cache.evict(path)
        if not e.verified:
            ok = False
            why = e.note or "eviction not verified"
            line = f"{path}: not cold before the run ({why})"
            if e.memory_backed:
                line = f"{e.memory_backed}: memory-backed storage has no cold state"
            if line not in notes:
                notes.append(line)
    return ok


def _readahead_knobs(path: str) -> tuple[list[tuple[Path, str]], str]:
    """The sysfs files the readahead variant writes for the mount under ``path``, or why
    it cannot run here."""
    if os.geteuid() != 0:
        return [], "not run: needs root (it writes the mount's read_ahead_kb)"
    dev = os.stat(path).st_dev
    major, minor = os.major(dev), os.minor(dev)
    try:
        bdi = bdi_settings(major, minor)
    except Unavailable as exc:
        return [], f"not run: {exc}"
    if bdi.read_ahead_kb is None:
        return [], f"not run: {bdi.path}/read_ahead_kb cannot be read"
    if bdi.read_ahead_kb >= READAHEAD_KB:
        return [], f"not run: readahead is already {bdi.read_ahead_kb} KiB"
    knobs = [(Path(bdi.path) / "read_ahead_kb", str(READAHEAD_KB))]
    conn = Path("/sys/fs/fuse/connections") / str(fuse_connection_id(major, minor))
    if major == 0 and (conn / "max_background").exists():
        knobs.append((conn / "max_background", str(MAX_BACKGROUND)))
    return knobs, ""


def _device(path: str) -> tuple[int, int]:
    dev = os.stat(path).st_dev
    return os.major(dev), os.minor(dev)


class _Timer:
    """One ``loadscope time`` run: the variants, their runs, the copy it made."""

    def __init__(self, options: TimeOptions, progress: Callable[[str], None]) -> None:
        self.o = options
        self.say = progress
        self.notes: list[str] = []
        self.copy_dir: Path | None = None
        self.copy_model: str | None = None
        self.flame_svg = ""

    def spec(
        self, argv: tuple[str, ...], watch: Sequence[str], recorder: Recorder | None = None
    ) -> RunSpec:
        import re

        until = re.compile(self.o.until) if self.o.until else None
        return RunSpec(
            argv, tuple(watch), until, self.o.ready_url, self.o.timeout_s, self.o.output,
            self.o.cancel, recorder,
        )  # fmt: skip

    def profiled(self, files: Sequence[str], total_bytes: int) -> PhaseTable:
        """One more cold run of the command as it is, py-spy sampling its tree."""
        if (why := Recorder.unavailable()) is not None:
            return PhaseTable(reason=why)
        self.say("profiled run (py-spy): the command as it is, cold")
        cold = _evict(files, self.o.allow_drop_caches, self.notes)
        recorder = Recorder()
        run = run_once(self.spec(_substitute(self.o.argv, self.o.model or ""), files, recorder))
        if run.status != "ok" or run.seconds is None:
            return PhaseTable(reason=f"the profiled run: {run.reason or run.status}")
        table = recorder.table(run.seconds)
        cross_check(table, recorder.parts, recorder.offset_s, run.samples, total_bytes)
        if not table.reason:
            argv = shlex.join(self.o.argv)
            title = f"{argv}: {table.wall_s:.3g} s, cold (loadscope time --profile)"
            self.flame_svg = flame_svg(recorder.parts, title)
        if not cold:
            table.reason = table.reason or "the profiled run did not start cold"
        return table

    def discover(self) -> list[str]:
        """A first run, not cold and not in the table: the weight files the command opened."""
        self.say("run 0 (finding the files the command reads; not timed)")
        result = run_once(self.spec(self.o.argv, ()))
        if result.status != "ok":
            raise TimeError(f"the first run: {result.reason or result.status}")
        if not result.opened:
            raise TimeError(
                "the command opened no weight file of 1 MiB or more (.safetensors, .bin, .pt,"
                " .pth, .ckpt, .gguf, .h5, .msgpack): name the model with --model"
            )
        return result.opened

    def variants(self, files: Sequence[str], total: int) -> list[Variant]:
        out = [Variant("as-is", "nothing")]
        for fix in self.o.fixes:
            if fix == "readahead":
                knobs, why = _readahead_knobs(files[0])
                old = ", ".join(f"{p} {p.read_text().strip()}" for p, _ in knobs)
                out.append(
                    Variant(
                        fix,
                        f"host-wide, for the mount: {old} raised for each run and put back"
                        " after (a remount undoes it; `loadscope doctor` prints ways to keep"
                        " it)",
                        why,
                    )
                )
            elif fix == "warm":
                out.append(
                    Variant(
                        fix,
                        "nothing lasting: the page cache filled before the command (memory"
                        " the kernel takes back when it needs it)",
                    )
                )
            elif fix == "copy":
                out.append(self._copy_variant(total))
        return out

    def _copy_variant(self, total: int) -> Variant:
        v = Variant("copy")
        if not any(PLACEHOLDER in a for a in self.o.argv):
            v.skipped = (
                f"not run: the command has no {PLACEHOLDER} to point at a copy (loadscope"
                " never rewrites a command silently)"
            )
        elif self.o.copy_to is None:
            v.skipped = "not run: --copy-to DIR names the local disk to copy to"
        else:
            v.changes = f"{format_bytes(total)} of disk in {self.o.copy_to} (removed after)"
        return v

    def make_copy(self, model: str) -> str:
        """The verified copy the ``copy`` variant runs on: its model path."""
        from loadscope.actions.localcopy import copy_model
        from loadscope.model.inspection import open_checked

        assert self.o.copy_to is not None
        self.copy_dir = Path(self.o.copy_to) / f"loadscope-time-{os.getpid()}"
        self.say(f"copying the model to {self.copy_dir} (once, not timed with the runs)")
        with open_checked(model) as target:
            report = copy_model(target, self.copy_dir)
            root = target.root if target.root.is_dir() else target.root.parent
            rel = Path(model).resolve().relative_to(root.resolve())
        self.notes.append(
            f"local copy: {format_bytes(report.bytes_copied)} copied and verified in"
            f" {report.seconds:.1f} s (once; not in the times)"
        )
        return str(self.copy_dir / rel) if str(rel) != "." else str(self.copy_dir)

    def remove_copy(self) -> None:
        if self.copy_dir is not None:
            shutil.rmtree(self.copy_dir, ignore_errors=True)
            self.copy_dir = None

    def one(self, v: Variant, files: Sequence[str], copy_files: Sequence[str]) -> None:
        model = self.o.model or ""
        argv = _substitute(self.o.argv, model)
        watch = files
        if v.name == "copy":
            assert self.copy_model is not None
            argv, watch = _substitute(self.o.argv, self.copy_model), copy_files
        v.cold.append(_evict(watch, self.o.allow_drop_caches, self.notes))
        if v.name == "readahead":
            knobs, _ = _readahead_knobs(files[0])
            ran = len(v.runs)
            try:
                with changed(mount_key(_device(files[0])), knobs):
                    v.runs.append(run_once(self.spec(argv, watch)))
                self.output_note(v.runs[-1])
            except OSError as exc:
                if len(v.runs) > ran:
                    raise  # it ran, and the old value could not be put back: said loudly
                # Not set at all (a read-only /sys in a container, a mount gone).
                v.skipped = f"not run: could not set the readahead: {exc.strerror or exc}"
            return
        if v.name == "warm":
            t0 = time.perf_counter()
            # The model as named; found files one by one (each is a TARGET warm takes).
            for target in [model] if model else files:
                warm = [sys.executable, "-m", "loadscope", "warm", "--quiet", target]
                done = subprocess.run(warm, capture_output=True, check=False)
                if done.returncode != 0:
                    out = done.stderr.decode(errors="replace").strip().splitlines()
                    v.skipped = f"loadscope warm failed: {(out or [''])[-1]}"
                    return
            v.before_s.append(time.perf_counter() - t0)
        v.runs.append(run_once(self.spec(argv, watch)))
        self.output_note(v.runs[-1])

    def output_note(self, run: RunResult) -> None:
        if run.output_error:
            note = f"the command's output could not all be written: {run.output_error}"
            if note not in self.notes:
                self.notes.append(note)


def time_command(
    options: TimeOptions, progress: Callable[[str], None] = lambda _s: None
) -> TimeReport:
    """Run the command cold and after each fix, interleaved (see the module docstring)."""
    if any(PLACEHOLDER in a for a in options.argv) and options.model is None:
        raise TimeError(f"{PLACEHOLDER} in the command needs --model (what it stands for)")
    timer = _Timer(options, progress)
    discovered: list[str] = []
    if options.model is not None:
        files, total = _weight_files(options.model)
    else:
        files = discovered = timer.discover()
        total = sum(os.path.getsize(f) for f in files)
    variants = timer.variants(files, total)
    report = TimeReport(list(options.argv), files, total, options.rounds, variants)
    report.discovered = discovered
    lock = MountLock(_device(files[0]), on_wait=progress) if options.lock else None
    with lock or contextlib.nullcontext(), _cleanup(timer):
        copy_files: list[str] = []
        copy = next((v for v in variants if v.name == "copy" and not v.skipped), None)
        if copy is not None and options.model is not None:
            try:
                timer.copy_model = timer.make_copy(options.model)
                copy_files = _weight_files(timer.copy_model)[0]
            except LoadscopeError as exc:  # no room, an unwritable DIR: the others still run
                copy.skipped = f"not run: the copy failed: {exc}"
                timer.remove_copy()
        active = [v for v in variants if not v.skipped]
        n, total_runs = 0, options.rounds * len(active)
        for _ in range(options.rounds):
            for v in active:
                if v.skipped:
                    continue
                n += 1
                progress(f"run {n}/{total_runs}: {LABELS[v.name]}")
                timer.one(v, files, copy_files)
                if options.cancel is not None and options.cancel.is_set():
                    raise TimeCancelled("stopped: the command's runs so far are not reported")
                last = v.runs[-1] if v.runs else None
                if v is variants[0] and last is not None and last.status != "ok":
                    report.notes.extend(timer.notes)
                    return report  # the command as it is fails: nothing to compare
        if options.profile:
            report.phases = timer.profiled(files, total)
            report.flame_svg = timer.flame_svg
    report.notes.extend(timer.notes)
    return report


@contextlib.contextmanager
def _cleanup(timer: _Timer) -> Iterator[None]:
    try:
        yield
    finally:
        timer.remove_copy()


@dataclass(frozen=True, slots=True)
class UserCommand:
    """``doctor --cmd``: the command and how to tell it is ready."""

    argv: tuple[str, ...]
    until: str | None = None
    ready_url: str | None = None
    #: ``--profile``: one more cold run sampled by py-spy, its time by phase.
    profile: bool = False


#: The run of the user's command that stands for each recommendation (``doctor --cmd``).
FIX_OF_RECOMMENDATION = {fix_ids.RAISE_READAHEAD: "readahead", fix_ids.PREWARM: "warm"}


def for_doctor(
    model: str,
    argv: Sequence[str],
    *,
    until: str | None = None,
    ready_url: str | None = None,
    progress: Callable[[str], None] = lambda _s: None,
    lock: bool = False,
    cancel: threading.Event | None = None,
    profile: bool = False,
) -> TimeReport:
    """``doctor --cmd`` and the app's "time my command": the command once as it is and
    once after each no-code fix, cold, its output kept out of the report's stdout (the
    last lines are kept for a failure). The doctor holds the mount's lock already
    (``lock`` False); the app's job takes it."""
    with open(os.devnull, "wb") as sink:
        options = TimeOptions(
            tuple(argv),
            model=model,
            until=until,
            ready_url=ready_url,
            rounds=1,
            fixes=("readahead", "warm"),
            output=sink,
            lock=lock,
            cancel=cancel,
            profile=profile,
        )
        return time_command(options, progress)


def quote_in_advice(recommendations: Sequence[Any], report: TimeReport) -> None:
    """Each recommendation whose fix the command was run after gets that measured gain
    as evidence: the user's own load, not a re-enactment."""
    from loadscope.advice.results import Evidence

    base = report.baseline().median()
    if base is None or report.lazy():
        return  # no gain is claimed for weights the command did not read
    by_name = {v.name: v for v in report.variants}
    for rec in recommendations:
        v = by_name.get(FIX_OF_RECOMMENDATION.get(rec.id, ""))
        after = v.median() if v is not None else None
        if after:
            rec.evidence.append(
                Evidence(
                    f"your command after this fix ({shlex.join(report.argv)})",
                    f"{after:.3g} s vs {base:.3g} s as is, cold: {base / after:.2f}x"
                    " (one run each, outside the budget)",
                )
            )
