"""The command line: one module per command, each declaring its arguments as data.

Each ``loadscope/cli/<command>.py`` holds a ``COMMAND`` (its help, its arguments —
the shared ones declared once in :mod:`loadscope.cli.common` — and the function that
runs it); :func:`build_parser` assembles them and :func:`main` runs one, turning every
:class:`~loadscope.base.errors.LoadscopeError` into its one line and exit code.
May import: everything in the core below it (the commands import their engine lazily,
so ``loadscope --help`` stays light); never Textual.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, TextIO

from loadscope.base._version import __version__
from loadscope.base.errors import ExitCode, LoadscopeError
from loadscope.base.safeio import stuck_reads
from loadscope.base.stack_names import STACKS
from loadscope.cli import (
    bench,
    cluster,
    compare,
    copy,
    demo,
    doctor,
    emulate,
    inspect,
    probe,
    report,
    synth,
    timecmd,
    warm,
)
from loadscope.cli.common import (
    PROG,
    SYNTH_DIR,
    Command,
    Terminated,
    UsageError,
    budget,
    check_outputs,
    on_sigterm,
    opt,
)
from loadscope.cli.doctor import doctor_exit_code

__all__ = ["PROG", "UsageError", "build_parser", "doctor_exit_code", "main"]

_DESCRIPTION = """\
Why does this model load slowly here, and what should change?
loadscope inspects checkpoints, probes the storage under them, benchmarks the
ways to load them and recommends the fix the numbers support.

TARGET is any of:
  path/to/model.safetensors        one safetensors file
  path/to/pytorch_model.bin        a torch checkpoint (.bin, .pt, .pth; never unpickled)
  path/to/model-dir                all shards (follows model.safetensors.index.json)
  path/to/*.safetensors.index.json the shards that index names
  org/name[@revision]              a Hugging Face repo from the LOCAL cache only
                                   (also gpt2, hf://org/name, models--org--name)
  synthetic:SIZE[,shards=N][,format=safetensors|torch|both][,seed=S]
                                   a synthetic checkpoint, removed afterwards
"""

_EXIT_CODES = "\n".join(
    f"  {code.value:>3}  {code.name.lower().replace('_', '-')}" for code in ExitCode
)
_EPILOG = f"""\
examples:
  loadscope doctor ~/models/llama --md report.md
  loadscope inspect synthetic:1GiB
  loadscope probe ~/models/llama --json probe.json
  loadscope inspect ~/models/llama --json
  loadscope synth /tmp/model --size 2GiB --shards 4 --format both
  loadscope time --model ~/models/llama -- python load.py

exit codes:
{_EXIT_CODES}
"""

TUI = Command(
    name="tui",
    help="the terminal app: onboarding, live throughput charts, advice, export",
    description="Open the Textual app (also: loadscope with no arguments). With TARGET it"
    " starts the diagnosis at once; without, a guided onboarding picks the model. Needs a"
    " terminal; headless, use 'loadscope doctor'.",
    arguments=(
        SYNTH_DIR,
        budget("time budget of the diagnosis (default 120 s)"),
        opt(
            "--emulate",
            action="store_true",
            help="serve the model through the emulated slow network disk (FUSE, root)",
        ),
        opt("--report", metavar="FILE.json", help="open a saved doctor report instead"),
        opt(
            "--stack",
            action="append",
            choices=STACKS,
            metavar="NAME",
            help="the stack you run (repeatable): the diagnosis times only its routes, as"
            f" doctor --stack does (default: every stack's): {', '.join(STACKS)}",
        ),
    ),
    run=None,
    target="optional",
    defaults={"tui": True},
)

#: Every subcommand, in the order ``--help`` lists them.
COMMANDS = (
    inspect.COMMAND,
    probe.COMMAND,
    bench.COMMAND,
    doctor.COMMAND,
    report.COMMAND,
    compare.COMMAND,
    warm.COMMAND,
    copy.COMMAND,
    timecmd.COMMAND,
    cluster.COMMAND,
    demo.COMMAND,
    TUI,
    emulate.COMMAND,
    synth.COMMAND,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        extra: dict[str, Any] = {}
        if command.target is not None:
            extra = {
                "formatter_class": argparse.RawDescriptionHelpFormatter,
                "epilog": _DESCRIPTION.split("\n\n", 1)[1],
            }
        p = sub.add_parser(
            command.name, help=command.help, description=command.description, **extra
        )
        if command.target is not None:
            p.add_argument(
                "target",
                metavar="TARGET",
                nargs="?" if command.target == "optional" else None,
                help="file, directory, org/name or synthetic:SIZE",
            )
        for argument in command.arguments:
            argument.add_to(p)
        if command.run is not None:
            p.set_defaults(run=command.run)
        p.set_defaults(**command.defaults)
    return parser


class _StopOnce:
    """The handler of SIGINT, SIGTERM and SIGHUP while a command runs. The first stops the
    command (KeyboardInterrupt, :class:`Terminated`); a second, of either kind, does not break
    into the cleanup the first started (a traceback, files left behind): it says the
    cleanup is under way; a third ends the command by the signal, cleaned up or not (what
    it started that would outlive it, an emulator's server, goes down with its parent).

    A stop raised where Python cannot raise (a weakref callback, a ``__del__``: a Ctrl-C
    during ``copy`` landed in one) is swallowed with an "Exception ignored" traceback and
    the command goes on as if never stopped. :meth:`unraisable`, installed as
    ``sys.unraisablehook`` while the command runs, arms a 10 ms timer (no thread, no
    lock: it may run inside the garbage collector) whose SIGALRM, handled by
    :meth:`alarm`, raises the stop again from wherever the main thread then is, also out
    of a blocking call. ``main`` disarms the timer when the command ends.
    """

    def __init__(self) -> None:
        self.first: dict[int, Callable[[int, FrameType | None], Any]] = {
            signal.SIGINT: signal.default_int_handler,
            signal.SIGTERM: on_sigterm,
            # The terminal closed (an SSH session dropped): stop and clean up as SIGTERM.
            signal.SIGHUP: on_sigterm,
        }
        self.seen = 0
        self.pending: int | None = None
        self.previous_hook = sys.unraisablehook

    def __call__(self, signum: int, frame: FrameType | None) -> Any:
        if signum == signal.SIGHUP and self.seen:
            # A terminal hangs up once, but the hang-up can come twice or three times (to
            # the session's leader, passed on, then to the group as the leader exits):
            # none of the later copies is a user asking to stop at once.
            return None
        self.seen += 1
        if self.seen == 1:
            return self.first[signum](signum, frame)
        if self.seen == 2:
            with contextlib.suppress(OSError):
                os.write(2, f"{PROG}: cleaning up; once more to stop at once\n".encode())
            return None
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return None

    def unraisable(self, info: Any) -> None:
        exc = info.exc_value
        if self.seen == 1 and isinstance(exc, KeyboardInterrupt | Terminated):
            self.seen = 0  # the stop did not happen: the next one is the first again
            self.pending = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            return
        self.previous_hook(info)

    def alarm(self, _signum: int, frame: FrameType | None) -> Any:
        pending, self.pending = self.pending, None
        if pending is None or self.seen:  # nothing swallowed, or a new signal came first
            return None
        return self(pending, frame)


def _stop_once() -> _StopOnce:
    return _StopOnce()


#: Errors of a write that could not be done (every write of a report file is checked
#: where it is made; this is stdout's).
_WRITE_FAILURES = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def _stdout_to_devnull() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``loadscope`` console script and ``python -m loadscope``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace, TextIO], ExitCode] | None = getattr(args, "run", None)
    if getattr(args, "tui", False):
        print(f"{PROG}: the app starts from the '{PROG}' command", file=sys.stderr)
        return int(ExitCode.USAGE)
    if run is None:
        parser.print_help()
        return ExitCode.OK
    stop = _stop_once()
    previous = signal.signal(signal.SIGTERM, stop)
    previous_int = signal.signal(signal.SIGINT, stop)
    previous_hup = signal.signal(signal.SIGHUP, stop)
    previous_alarm = signal.signal(signal.SIGALRM, stop.alarm)
    sys.unraisablehook = stop.unraisable
    try:
        # A run killed outright (SIGKILL) left a raised readahead behind: put it back first.
        from loadscope.actions.hostsettings import restore_stale

        for line in restore_stale():
            print(f"{PROG}: host settings: {line}", file=sys.stderr)
        # Ranks killed outright left a model-sized file in /dev/shm: remove it first.
        from loadscope.loaders.shmgroup import reap_stale

        if reaped := reap_stale():
            print(f"{PROG}: shared memory: {reaped}", file=sys.stderr)
        check_outputs(args)
        code = int(run(args, sys.stdout))
        sys.stdout.flush()  # a write that fails fails here, said below, not at exit
        return code
    except LoadscopeError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Terminated:
        print(f"{PROG}: terminated", file=sys.stderr)
        return int(ExitCode.TERMINATED)
    except BrokenPipeError:
        # stdout closed early (| head): not an error worth a message.
        _stdout_to_devnull()
        return int(ExitCode.OK)
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in _WRITE_FAILURES:
            # stdout on a full disk (> /dev/full), over a quota, on a failing device: the
            # output is incomplete; said once, and not again as the interpreter exits.
            _stdout_to_devnull()
            what = exc.filename or "the output"
            print(f"{PROG}: cannot write {what}: {exc.strerror}", file=sys.stderr)
            return int(ExitCode.IO_ERROR)
        if os.environ.get("LOADSCOPE_DEBUG"):
            raise
        print(
            f"{PROG}: internal error: {type(exc).__name__}: {exc}"
            " (a bug: please report it; LOADSCOPE_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return int(ExitCode.INTERNAL)
    finally:
        sys.unraisablehook = stop.previous_hook
        signal.setitimer(signal.ITIMER_REAL, 0)  # a stop still pending: the command is over
        signal.signal(signal.SIGALRM, previous_alarm)
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGHUP, previous_hup)
        if stuck := stuck_reads():
            print(
                f"{PROG}: {len(stuck)} read(s) still wait in the kernel (first: {stuck[0]}),"
                " unkillable: they end when the storage answers, or at once when it is"
                " unmounted (umount -f; FUSE: echo 1 > /sys/fs/fuse/connections/N/abort)",
                file=sys.stderr,
            )
