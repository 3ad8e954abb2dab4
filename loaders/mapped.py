"""``safetensors.torch.load_file``'s own load of one file: memory-mapped, tensors as views.

The default every stack uses (the ``mmap`` strategy) and what ``auto`` and
``loadscope.load_file`` do with a file the page cache already holds.

May import: ``loadscope.loaders.requests`` (a request's types).
"""

from __future__ import annotations

from loadscope.loaders.requests import FileRequest, Tensors

#: The name this load goes by: the ``mmap`` strategy's, ``auto``'s choice for a file it maps,
#: a rank's mode that maps. Spelled here once; the registry's ``DEFAULT`` is this load.
NAME = "mmap"


def load_mapped(f: FileRequest) -> Tensors:
    """``f``'s tensors as ``load_file`` makes them (a sample's by its own steps)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    if f.tensors is None:
        yield from load_file(f.path).items()
    else:
        # load_file's own steps on the sampled tensors: map every tensor, close the file,
        # then hand them out (touching a view while the file is open measured 20-30%
        # faster than load_file on the emulated disk, which made sampled mmap times
        # optimistic).
        with safe_open(f.path, framework="pt") as handle:
            got = {name: handle.get_tensor(name) for name in f.tensors}
        yield from got.items()
