"""Child processes started the one way loadscope starts them.

Owns :func:`popen`: piped text output, a session of its own (so that the child and all
it spawns can be killed as one group). May import: the standard library only.
"""

from __future__ import annotations

import subprocess


def popen(command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``command`` with piped text stdout and stderr (``OSError`` when it cannot start)."""
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: killable with all it spawns
    )
