"""Running loadscope as user nobody in the tests: setpriv's arguments, and folders nobody
can reach (pytest's own tmp tree is private to root)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

SETPRIV = shutil.which("setpriv")
#: setpriv's arguments for user and group nobody, with no supplementary groups.
NOBODY = ["--reuid", "65534", "--regid", "65534", "--clear-groups"]


@contextlib.contextmanager
def reachable_dir(prefix: str, mode: int) -> Iterator[Path]:
    """A new folder with ``mode`` outside pytest's private (0700) tmp tree, so that nobody
    can reach it; removed, with what is in it, on the way out."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(mode)
    try:
        yield path
    finally:
        shutil.rmtree(path)
