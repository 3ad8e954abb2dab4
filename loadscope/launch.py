"""The ``loadscope`` command: the terminal app when asked for (or no arguments), else the CLI.

The only core module that may reach the TUI, and only inside :func:`main`, so
that importing the engine never imports Textual.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from loadscope.errors import ExitCode

PROG = "loadscope"
NOT_A_TERMINAL = (
    f"{PROG}: not a terminal: the app needs one (try it over ssh -t);"
    f" headless, run '{PROG} doctor TARGET' (or '{PROG} demo')"
)


def _stop_while_starting(signum: int, _frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM while the engine is still importing: nothing started, nothing to undo."""
    os.write(2, f"{PROG}: {'interrupted' if signum == signal.SIGINT else 'terminated'}\n".encode())
    os._exit(ExitCode.INTERRUPTED if signum == signal.SIGINT else ExitCode.TERMINATED)


def main(argv: Sequence[str] | None = None) -> int:
    # Installed before the heavy imports (a second of them on a busy machine): a signal
    # in that window is a clean exit, not a KeyboardInterrupt traceback from an import.
    # The CLI installs its own handlers once it runs, the app its own.
    if argv is None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _stop_while_starting)
    from loadscope.cli import build_parser
    from loadscope.cli import main as cli_main

    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] != "tui":
        return cli_main(args_list)
    if not args_list:
        if not (sys.stdout.isatty() and sys.stdin.isatty()):
            build_parser().print_help()
            print(f"\n{NOT_A_TERMINAL}", file=sys.stderr)
            return int(ExitCode.OK)
        args_list = ["tui"]
    args = build_parser().parse_args(args_list)
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        print(NOT_A_TERMINAL, file=sys.stderr)
        return int(ExitCode.USAGE)
    from loadscope.tui.app import run_app

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return run_app(
        target=args.target,
        budget_s=args.budget,
        emulate=args.emulate,
        report=args.report,
        synth_dir=args.synth_dir,
    )
