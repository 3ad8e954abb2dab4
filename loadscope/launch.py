"""The ``loadscope`` command: the terminal app when asked for (or no arguments), else the CLI.

The only core module that may reach the TUI, and only inside :func:`main`, so
that importing the engine never imports Textual.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from loadscope.cli import PROG, build_parser
from loadscope.cli import main as cli_main
from loadscope.errors import ExitCode

NOT_A_TERMINAL = (
    f"{PROG}: not a terminal: the app needs one (try it over ssh -t);"
    f" headless, run '{PROG} doctor TARGET' (or '{PROG} demo')"
)


def main(argv: Sequence[str] | None = None) -> int:
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

    return run_app(
        target=args.target,
        budget_s=args.budget,
        emulate=args.emulate,
        report=args.report,
        synth_dir=args.synth_dir,
    )
