"""``python -m loadscope``: the same as the ``loadscope`` command."""

import sys

from loadscope.cli import main

sys.exit(main())
