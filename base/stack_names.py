"""The stacks loadscope writes a fix for, by name: what ``--stack`` takes, and the order
the answers show them in. Spelled here once, where the command line can read it without
importing the advice and the strategies behind it (every ``loadscope`` command parses
``--stack``: its start-up should not pay for them).

May import: nothing.
"""

from __future__ import annotations

#: The stacks a load snippet is written for, in the order they are shown.
STACKS = ("safetensors", "transformers", "diffusers", "vllm", "sglang", "shell")
