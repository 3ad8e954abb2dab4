"""What every command shares: errors, checked number types, the option and command
declarations, output checks and writers, progress lines.

May import: ``loadscope.engine.bench``, ``loadscope.loaders.strategies``,
``loadscope.base`` (and, lazily, the engine to check a device).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from loadscope.base.errors import ExitCode, LoadscopeError, PathNotFound, PermissionDenied
from loadscope.base.safeio import STALL_TIMEOUT_S
from loadscope.base.units import parse_duration, parse_rate, parse_size

if TYPE_CHECKING:
    from pathlib import Path


PROG = "loadscope"


class UsageError(LoadscopeError):
    """An argument that parses but makes no sense."""

    exit_code = ExitCode.USAGE


class OutputError(LoadscopeError):
    """A report file that cannot be written."""

    exit_code = ExitCode.IO_ERROR


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so ``finally`` blocks clean up (temp checkpoints)."""


def on_sigterm(_signum: int, _frame: FrameType | None) -> NoReturn:
    raise Terminated


def duration_arg(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Number:
    """An argparse ``type``: a finite number within a declared range, checked as it is parsed.

    One declaration per option gives the conversion and the range; an error names what the
    option takes (``argument --threads: must be at least 1, not '0'``) and exits 2 before
    any work starts.
    """

    def __init__(
        self,
        kind: Callable[[str], float],
        lo: float | None = None,
        hi: float | None = None,
        *,
        above: float | None = None,
        what: str = "",
        why: str = "",
    ) -> None:
        self.kind, self.lo, self.hi, self.above = kind, lo, hi, above
        self.what, self.why = what, why

    def rule(self) -> str:
        def num(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"

        if self.above is not None:
            text = f"must be a {self.what or 'number'} above {num(self.above)}"
            if self.hi is not None:
                text += f" and at most {num(self.hi)}"
        elif self.lo is not None and self.hi is not None:
            text = f"must be between {num(self.lo)} and {num(self.hi)}"
        elif self.lo == 0:
            text = "cannot be negative"
        elif self.lo is not None:
            text = f"must be at least {num(self.lo)}"
        else:
            text = f"must be a {self.what or 'number'}"
        return text + (f" ({self.why})" if self.why else "")

    def __call__(self, text: str) -> float:
        try:
            value = self.kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{self.rule()}, not {text!r}") from None
        bad = (
            not math.isfinite(value)
            or (self.above is not None and value <= self.above)
            or (self.lo is not None and value < self.lo)
            or (self.hi is not None and value > self.hi)
        )
        if bad:
            raise argparse.ArgumentTypeError(f"{self.rule()}, not {text!r}")
        return value

    def __repr__(self) -> str:  # argparse names the type in some messages
        return self.what or "number"


def whole(text: str) -> int:
    return int(text.strip())


#: Positive seconds (budgets, timeouts): 30, 30s, 500ms; at most a year (a longer wait
#: overflows the platform's timeouts: an internal error, not a usage one).
SECONDS = Number(parse_duration, 0, 365 * 86400, above=0, what="number of seconds")


#: Rounds (--repeats): each is planned up front, so a huge count is memory, not time.
COUNT = Number(whole, 1, 1000, what="integer")


THREADS = Number(whole, 1, 1024, what="integer")


RANKS = Number(whole, 1, 1024, what="integer")


PORT = Number(whole, 1, 65535, what="port")


SEED = Number(whole, 0, 2**32 - 1, what="integer")


KIB = Number(whole, 0, 1 << 20, what="integer")


SERVER_THREADS = Number(whole, 1, 1024, what="integer", why="no thread would answer a read")


MAX_BACKGROUND = Number(whole, 1, 65535, what="integer")


MAX_READ = Number(whole, 4, 1024, what="integer", why="FUSE requests are 4 KiB to 1 MiB")


PROBABILITY = Number(float, 0, 1, what="probability")


SHARDS = Number(whole, 1, 100_000, what="integer")


BANDWIDTH = Number(parse_rate, above=0, what="rate")


BLOCK = Number(parse_size, 4096, 1 << 30, what="size", why="4KiB to 1GiB")


JOIN_TIMEOUT_S = 120.0


HEARTBEAT_TIMEOUT_S = 10.0


DEVICE_FORMS = "cpu, cuda or cuda:N"
#: ``doctor --device``'s choices as a picker offers them (the app's run dialog): the value
#: and its label. ``cuda:N`` is typed on the command line.
DEVICE_CHOICES = (("auto", "auto (GPU if usable)"), ("cpu", "CPU"), ("cuda", "GPU (cuda)"))


def device_arg(text: str) -> str:
    """``--device`` of bench: cpu, cuda, cuda:N."""
    value = text.strip().lower()
    if value in ("cpu", "cuda"):
        return value
    head, sep, index = value.partition(":")
    if head == "cuda" and sep and index.isdigit():
        return f"cuda:{int(index)}"
    raise argparse.ArgumentTypeError(f"unknown device {text!r} (expected {DEVICE_FORMS})")


def device_or_auto_arg(text: str) -> str:
    """``--device`` of doctor: auto, or what bench takes."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return device_arg(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"unknown device {text!r} (expected auto, {DEVICE_FORMS})"
        ) from None


def comma_list(text: str) -> list[str]:
    """The items of a comma-separated option (``A,B,...``), stripped, empty ones dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def check_device_usable(device: str) -> None:
    """A GPU device asked for explicitly must be one torch can use here, before any work.

    A worker answers (the parent never imports torch): the same check the GPU strategies
    make, so no run starts whose every trial would fail on it.
    """
    if not device.startswith("cuda"):
        return
    from loadscope.engine.bench import BenchError, describe_strategies
    from loadscope.loaders.strategies import GPU_DEFAULT

    try:
        info = describe_strategies().get(GPU_DEFAULT) or {}
    except BenchError as exc:
        raise UsageError(f"--device {device}: cannot check the GPU: {exc}") from None
    if info.get("unavailable"):
        raise UsageError(f"--device {device}: not usable here: {info['unavailable']}")


def emit(out: TextIO, json_path: str | None, json_text: str, summary: str) -> ExitCode:
    """The summary on stdout and the JSON in a file, or only the JSON with ``--json -``."""
    if json_path == "-":
        out.write(json_text + "\n")
        return ExitCode.OK
    if json_path:
        write_file(json_path, json_text + "\n")
    out.write(summary + "\n")
    if json_path:
        out.write(f"full result: {json_path}\n")
    return ExitCode.OK


def check_outputs(args: argparse.Namespace) -> None:
    """Refuse a report path that cannot be written before any work, not after it."""
    from pathlib import Path

    seen: dict[str, str] = {}
    for option in ("json", "md", "html", "log_requests", "output", "flamegraph"):
        path = getattr(args, option, None)
        if not isinstance(path, str) or path == "-":
            continue
        if not path.strip():
            dash = ", or '-'" if option in ("json", "md", "html") else ""
            raise UsageError(f"--{option.replace('_', '-')}: an empty path (name a file{dash})")
        # Two reports into one file: the second would silently overwrite the first.
        same = seen.setdefault(os.path.realpath(path), option)
        if same != option:
            flag = option.replace("_", "-")
            raise UsageError(f"--{same.replace('_', '-')} and --{flag} both name {path}")
        target = Path(path)
        parent = target.parent
        try:
            if target.is_dir():
                raise OutputError(f"cannot write {path}: it is a directory")
            if not target.exists() and not parent.is_dir():
                raise PathNotFound(f"cannot write {path}: no directory {parent}")
            if os.statvfs(parent).f_flag & os.ST_RDONLY:
                raise OutputError(f"cannot write {path}: {parent} is on a read-only filesystem")
            try_write(target)
        except PermissionError:
            raise PermissionDenied(f"cannot write {path}: permission denied") from None
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def try_write(target: Path) -> None:
    """Open ``target`` for writing the way the report will be, changing nothing: an existing
    file is opened without truncation; otherwise a probe file is created beside it and
    removed (root may still be refused by /sys or /proc, which access() does not show)."""
    if target.exists():
        os.close(os.open(target, os.O_WRONLY | os.O_CLOEXEC))
        return
    probe = target.parent / f".{target.name}.loadscope-write-check-{os.getpid()}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    os.close(fd)
    os.unlink(probe)


def write_file(path: str, text: str) -> None:
    created = not os.path.lexists(path)
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        if created and os.path.isfile(path):
            # A full disk: no empty or truncated report left under the name.
            with contextlib.suppress(OSError):
                os.unlink(path)
        if isinstance(exc, PermissionError):
            raise PermissionDenied(f"cannot write {path}: permission denied") from None
        raise OutputError(f"cannot write {path}: {exc.strerror}") from None


@dataclass(frozen=True, slots=True)
class Opt:
    """One command-line option or positional, declared once: argparse's own arguments."""

    flags: tuple[str, ...]
    kwargs: dict[str, Any]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*self.flags, **self.kwargs)


def opt(*flags: str, **kwargs: Any) -> Opt:
    return Opt(flags, kwargs)


@dataclass(frozen=True, slots=True)
class Command:
    """A subcommand as data: its help, its arguments (shared ones by name), what runs it.

    ``target`` is ``"required"`` or ``"optional"`` for a command taking TARGET (it then
    takes ``--synth-dir`` too and shows the TARGET forms in its epilog), else None.
    """

    name: str
    help: str
    description: str
    arguments: tuple[Opt, ...]
    run: Callable[[argparse.Namespace, TextIO], ExitCode] | None
    target: str | None = None
    defaults: dict[str, Any] = field(default_factory=dict)


#: --json FILE|- and --allow-drop-caches, shared by the measuring commands.
REPORT = (
    opt(
        "--json",
        metavar="FILE",
        help="also write the full result as JSON to FILE ('-' for stdout, instead of the summary)",
    ),
    opt(
        "--allow-drop-caches",
        action="store_true",
        help="write /proc/sys/vm/drop_caches when per-file eviction fails (host-wide; root)",
    ),
)
#: How a long command shows its progress on stderr (see loadscope.cli.progress).
PROGRESS = (
    opt("--quiet", action="store_true", help="no progress on stderr (errors still are)"),
    opt(
        "--no-progress",
        action="store_true",
        help="plain progress lines instead of one line redrawn in place",
    ),
)
#: --json FILE|- of the commands that act (warm, copy) rather than measure.
JSON_RESULT = opt("--json", metavar="FILE", help="also write the result as JSON ('-': stdout)")
SYNTH_DIR = opt(
    "--synth-dir",
    metavar="DIR",
    help="where a synthetic: target is built (default: the system temp dir)",
)


#: What the measuring commands (probe, bench, doctor) take first.
MEASURING = (SYNTH_DIR, *REPORT, *PROGRESS)
#: --max-background of the emulated disk (demo's, emulate's).
MAX_BACKGROUND_OPTION = opt(
    "--max-background",
    type=MAX_BACKGROUND,
    default=12,
    help="async requests in flight (default 12)",
)


def acting(*arguments: Opt) -> tuple[Opt, ...]:
    """The arguments of a command that acts on TARGET (warm, copy): --synth-dir and the
    progress options, then its own ``arguments``, then --json."""
    return (SYNTH_DIR, *PROGRESS, *arguments, JSON_RESULT)


def budget(text: str, default: float | None = None) -> Opt:
    """--budget SECONDS: a command's time budget (``text``, its help, says of what)."""
    return opt("--budget", type=SECONDS, default=default, metavar="SECONDS", help=text)


def stall_timeout(verb: str) -> Opt:
    return opt(
        "--stall-timeout",
        type=SECONDS,
        default=STALL_TIMEOUT_S,
        metavar="SECONDS",
        help=f"give up when no byte was {verb} for SECONDS (default {STALL_TIMEOUT_S:g})",
    )
