"""The ``loadscope`` command: the terminal app when asked for (or no arguments), else the CLI.

It lives with the app so that the core never imports the TUI; it imports the app only
inside :func:`main`, when the app is asked for, so that the CLI never imports Textual.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from loadscope.base.errors import ExitCode

PROG = "loadscope"
NOT_A_TERMINAL = (
    f"{PROG}: not a terminal: the app needs one (try it over ssh -t);"
    f" headless, run '{PROG} doctor TARGET' (or '{PROG} demo')"
)


def _stopped_by(signum: int) -> str:
    """What the signal ``signum`` did to the command, as its one line says it."""
    if signum == signal.SIGINT:
        return "interrupted"
    if signum in (signal.SIGTERM, signal.SIGHUP):
        return "terminated"
    if signum == signal.SIGKILL:
        return "killed (SIGKILL: out of memory, or killed by hand)"
    try:
        return f"killed by {signal.Signals(signum).name}"
    except ValueError:
        return f"killed by signal {signum}"


def _stop_while_starting(signum: int, _frame: FrameType | None) -> None:
    """Ctrl-C, SIGTERM or SIGHUP while the engine is still importing: nothing started,
    nothing to undo."""
    os.write(2, f"{PROG}: {_stopped_by(signum)}\n".encode())
    os._exit(ExitCode.INTERRUPTED if signum == signal.SIGINT else ExitCode.TERMINATED)


#: Commands that read the model: a read the storage never answers cannot be killed, so
#: they run in a child the command can leave behind (see :func:`_supervise`).
SUPERVISED = frozenset({"inspect", "probe", "bench", "doctor", "warm", "copy"})
_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD}
_PR_SET_PDEATHSIG = 1


def _supervise() -> tuple[int | None, int | None]:
    """Fork: the child runs the command, this process waits for it.

    Returns (exit code, None) in the parent and (None, the early-exit pipe) in the child.

    A read a stalled FUSE daemon or hard NFS mount never answers keeps its thread in
    the kernel, unkillable, and a process cannot exit before all its threads have:
    the command would hang after it already said what happened. The child reports
    its exit code over a pipe when it finished with such reads still stuck, and this
    parent exits with that code at once, leaving the child to end when the storage
    answers. Signals sent to this process (kill) are passed on; the terminal's own
    Ctrl-C reaches both, so it is not passed twice. The child dies with the parent.
    """
    r, w = os.pipe()
    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)  # none lost between fork and wait
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(ExitCode.TERMINATED)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
        return None, w
    os.close(w)
    while True:
        info = signal.sigtimedwait(_SIGNALS, 0.1)
        if info is not None and info.si_signo != signal.SIGCHLD and _pass_on(info):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, info.si_signo)
        if select.select([r], [], [], 0)[0] and (data := os.read(r, 1)):
            return data[0], None  # finished, but reads still stuck keep it from exiting
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            if code < 0:
                _say_killed(-code)
            return _exit_code_of(code), None


def _exit_code_of(code: int) -> int:
    """The command's exit code from its child's (negative: the signal that ended it).
    A hang-up passed on while the child was already exiting (its handlers gone) ends it by
    the signal's default action: the command was stopped as by SIGTERM, and says so with
    SIGTERM's code, as it does when its handler catches the hang-up."""
    if code >= 0:
        return code
    if -code == signal.SIGHUP:
        return int(ExitCode.TERMINATED)
    return 128 - code


def _pass_on(info: signal.struct_siginfo) -> bool:
    """Whether a signal this process got is the child's too. One sent by a process (kill, a
    scheduler: si_code <= 0) is; the terminal's Ctrl-C is not (it reaches both). The
    terminal's hang-up always is: the kernel sends it to this process alone when it leads
    the session (a command run straight from tmux or ssh), and a second copy to the child is
    harmless (the command takes one SIGHUP, whatever follows is ignored)."""
    return info.si_code <= 0 or info.si_signo == signal.SIGHUP


def _say_killed(signum: int) -> None:
    """The command's child died of a signal (one that came as it was exiting, after its
    handlers were gone, or SIGKILL): say so in one line, as the child would have."""
    with contextlib.suppress(OSError):
        os.write(2, f"{PROG}: {_stopped_by(signum)}\n".encode())


def _report_early_exit(code: int, fd: int | None) -> None:
    """In the supervised child: let the parent exit now if stuck reads will hold us."""
    if fd is None:
        return
    from loadscope.base.safeio import stuck_reads

    if stuck_reads():
        sys.stdout.flush()
        sys.stderr.flush()
        # Let go of the terminal or pipe (a `| tee` waits for every writer to close it).
        null = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(null, std)
        os.write(fd, bytes([code & 0xFF]))


def _on_a_terminal() -> bool:
    """The app's condition: stdin and stdout are both a terminal."""
    return sys.stdout.isatty() and sys.stdin.isatty()


def main(argv: Sequence[str] | None = None) -> int:
    # Installed before the heavy imports (a second of them on a busy machine): a signal
    # in that window is a clean exit, not a KeyboardInterrupt traceback from an import.
    # The CLI installs its own handlers once it runs, the app its own.
    args_list = list(sys.argv[1:] if argv is None else argv)
    early_exit: int | None = None
    if argv is None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _stop_while_starting)
        supervise = os.environ.get("LOADSCOPE_SUPERVISE", "1") != "0"
        if supervise and args_list and args_list[0] in SUPERVISED:
            code, early_exit = _supervise()
            if code is not None:
                return code
    from loadscope.cli import build_parser
    from loadscope.cli import main as cli_main

    if args_list and args_list[0] != "tui":
        code = cli_main(args_list)
        _report_early_exit(code, early_exit)
        return code
    if not args_list:
        if not _on_a_terminal():
            build_parser().print_help()
            print(f"\n{NOT_A_TERMINAL}", file=sys.stderr)
            return int(ExitCode.OK)
        args_list = ["tui"]
    args = build_parser().parse_args(args_list)
    if not _on_a_terminal():
        print(NOT_A_TERMINAL, file=sys.stderr)
        return int(ExitCode.USAGE)
    from loadscope.tui.app import run_app

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

    return run_app(
        target=args.target,
        budget_s=args.budget,
        emulate=args.emulate,
        report=args.report,
        synth_dir=args.synth_dir,
        stacks=tuple(dict.fromkeys(args.stack or ())),
    )
