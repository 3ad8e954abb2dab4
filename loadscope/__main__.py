"""``python -m loadscope``: the same as the ``loadscope`` command.

May import: ``loadscope.tui.launch`` (which starts the app or the CLI).
"""

import sys

from loadscope.tui.launch import main

sys.exit(main())
