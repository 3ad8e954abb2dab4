"""loadscope: why a model loads slowly here, and what to change.

The public loader API is here, at the package root::

    import loadscope
    state = loadscope.load_file("model.safetensors")    # a drop-in for safetensors'
    state = loadscope.load_model("org/name")              # a folder, an index, the HF cache
    model = loadscope.from_pretrained("/models/llama")    # a transformers model, from those
    loadscope.prewarm("/models/llama")                    # for stacks with their own loader

(see ``loadscope/api.py``). They are imported on first use, so ``import loadscope``
stays light for the CLI (no torch until a load).

The core lives in this package: the entry points (``launch``, ``cli``, ``api``) at its
top and its parts as subpackages, each layer importing only from those below it:
``diagnosis`` -> ``report`` -> ``advice`` -> ``engine`` | ``actions`` -> ``model`` ->
``tools``. ``loadscope.tui``, ``loadscope.loaders``, ``loadscope.probes`` and
``loadscope.base`` are the ``tui/``, ``loaders/``, ``probes/`` and ``base/`` folders at
the repository root, mapped under this namespace by setuptools' ``package-dir``.

May import: ``loadscope.api`` (on first use), ``loadscope.base``.
"""

from __future__ import annotations

import os as _os
import sys as _sys
from importlib.abc import MetaPathFinder as _MetaPathFinder
from importlib.machinery import ModuleSpec as _ModuleSpec
from importlib.util import spec_from_file_location as _spec_from_file_location
from typing import TYPE_CHECKING

__all__ = [
    "FileChoice",
    "LoadOptions",
    "LoadRecord",
    "__version__",
    "from_pretrained",
    "load_file",
    "load_model",
    "prewarm",
]

_API = frozenset(
    {"FileChoice", "LoadOptions", "LoadRecord", "from_pretrained", "load_file", "load_model"}
    | {"prewarm"}
)

if TYPE_CHECKING:
    from loadscope.api import (
        FileChoice,
        LoadOptions,
        LoadRecord,
        from_pretrained,
        load_file,
        load_model,
        prewarm,
    )


def __getattr__(name: str) -> object:
    """The public loader API, imported when first asked for (PEP 562)."""
    if name in _API:
        from loadscope import api

        value = getattr(api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Subpackage -> folder at the repository root; mirrors ``package-dir`` in pyproject.toml
#: (a test keeps the two equal).
_MAPPED_FOLDERS = {"base": "base", "probes": "probes", "loaders": "loaders", "tui": "tui"}


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

# After the finder: from a source checkout, loadscope.base is the root's base/ folder.
from loadscope.base._version import __version__  # noqa: E402
