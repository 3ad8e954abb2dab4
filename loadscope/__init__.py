"""loadscope: why a model loads slowly here, and what to change.

The core (target resolution, inspection, synthetic checkpoints, CLI) lives in this
package; ``loadscope.probes``, ``loadscope.loaders`` and ``loadscope.tui`` are the
``probes/``, ``loaders/`` and ``tui/`` folders at the repository root, mapped under
this namespace by setuptools' ``package-dir``.
"""

from __future__ import annotations

import os as _os

from loadscope._version import __version__

__all__ = ["__version__"]


def _map_source_checkout() -> None:
    # Installed (wheel or strict editable), the mapped packages sit inside this one.
    # Run straight from a source checkout (``python -m pytest`` or ``python -m loadscope``
    # at the root puts the root first on sys.path), they are the root's own folders:
    # add the root to __path__ so ``loadscope.probes`` resolves to ``probes/`` exactly as
    # the package-dir mapping does. Only done when this file sits in a loadscope checkout.
    here = _os.path.dirname(_os.path.abspath(__file__))
    root = _os.path.dirname(here)
    if _os.path.isdir(_os.path.join(here, "probes")):
        return
    if all(
        _os.path.isfile(_os.path.join(root, d, "__init__.py")) for d in ("probes", "loaders", "tui")
    ) and _os.path.isfile(_os.path.join(root, "pyproject.toml")):
        __path__.append(root)


_map_source_checkout()
