"""``python -m loadscope``: the same as the ``loadscope`` command."""

import sys

from loadscope.tui.launch import main

sys.exit(main())
