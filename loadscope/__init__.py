"""loadscope: why a model loads slowly here, and what to change.

The core (target resolution, inspection, synthetic checkpoints, CLI) lives in this
package; ``loadscope.probes``, ``loadscope.loaders`` and ``loadscope.tui`` are the
``probes/``, ``loaders/`` and ``tui/`` folders at the repository root, mapped under
this namespace by setuptools' ``package-dir``.
"""

from __future__ import annotations

import os as _os
import sys as _sys
from importlib.abc import MetaPathFinder as _MetaPathFinder
from importlib.machinery import ModuleSpec as _ModuleSpec
from importlib.util import spec_from_file_location as _spec_from_file_location

from loadscope._version import __version__

__all__ = ["__version__"]

#: Subpackage -> folder at the repository root; mirrors ``package-dir`` in pyproject.toml
#: (a test keeps the two equal).
_MAPPED_FOLDERS = {"probes": "probes", "loaders": "loaders", "tui": "tui"}


class _SourceCheckoutFinder(_MetaPathFinder):
    """Resolve ``loadscope.probes`` & co. to the root folders when running from a checkout.

    Installed (wheel or strict editable), the mapped packages sit inside this one and this
    finder is never registered. Run straight from a source checkout (``python -m pytest``
    or ``python -m loadscope`` at the root puts the root first on ``sys.path``), they are
    the root's own folders: this maps exactly the ``package-dir`` names and nothing else,
    as setuptools' own editable finder does.
    """

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> _ModuleSpec | None:
        prefix, _, sub = fullname.partition(".")
        if prefix != __name__ or sub not in _MAPPED_FOLDERS:
            return None
        folder = _os.path.join(self.root, _MAPPED_FOLDERS[sub])
        return _spec_from_file_location(
            fullname, _os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
        )


def _register_source_checkout() -> None:
    here = _os.path.dirname(_os.path.abspath(__file__))
    if _os.path.isdir(_os.path.join(here, "probes")):
        return  # installed: the mapped packages are inside this one
    root = _os.path.dirname(here)
    folders = [_os.path.join(root, f, "__init__.py") for f in _MAPPED_FOLDERS.values()]
    if _os.path.isfile(_os.path.join(root, "pyproject.toml")) and all(
        map(_os.path.isfile, folders)
    ):
        _sys.meta_path.insert(0, _SourceCheckoutFinder(root))


_register_source_checkout()
