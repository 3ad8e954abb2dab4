"""Coverage-guided fuzzing of the index resolver with atheris (see README.md).

A fixed model directory holds good shards and hostile entries (a symlink loop, a
dangling link, a link out of the model, a FIFO, a directory named like a shard, a
link whose target name is too long); each input becomes its index JSON (the first
byte picks ``model.safetensors.index.json`` or ``pytorch_model.bin.index.json``),
and ``resolve`` + ``inspect`` run on the directory. A
:class:`~loadscope.base.errors.LoadscopeError` is an expected refusal; any other
exception, a hang, or a resolved file outside the model directory is a crash.
Good seeds are index files naming those entries (``make_corpus.py`` writes some).

``TestOneInput`` imports without atheris, so the test suite replays inputs through it.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
import tempfile
from pathlib import Path

if __name__ == "__main__":
    import atheris

    with atheris.instrument_imports():
        from loadscope.base.errors import LoadscopeError
        from loadscope.model.inspection import inspect_target
        from loadscope.model.targets import INDEX_NAMES, parse_index, resolve
else:
    from loadscope.base.errors import LoadscopeError
    from loadscope.model.inspection import inspect_target
    from loadscope.model.targets import INDEX_NAMES, parse_index, resolve

#: The entries of the model directory (name -> what it is), for seeds and the README.
ENTRIES = (
    "model-00001-of-00002.safetensors",  # tensors a, b
    "model-00002-of-00002.safetensors",  # tensor c
    "sub/d.safetensors",  # tensor d
    "pytorch_model.bin",  # not a torch file (safetensors bytes)
    "loop.safetensors",  # symlink to itself
    "dangling.safetensors",  # symlink to nothing
    "outside.safetensors",  # symlink out of the model directory
    "fifo.safetensors",  # a FIFO: must be refused, never opened for a blocking read
    "dir.safetensors",  # a directory
    "long.safetensors",  # symlink whose target name is too long to stat
)


def _st_bytes(names: list[str]) -> bytes:
    header = {
        n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
        for i, n in enumerate(names)
    }
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * (4 * len(names))


def _build() -> str:
    base = tempfile.mkdtemp(prefix="loadscope-fuzz-index-")
    root = os.path.join(base, "model")
    os.makedirs(os.path.join(root, "sub"))
    os.makedirs(os.path.join(base, "elsewhere"))
    files = {
        "model-00001-of-00002.safetensors": _st_bytes(["a", "b"]),
        "model-00002-of-00002.safetensors": _st_bytes(["c"]),
        "sub/d.safetensors": _st_bytes(["d"]),
        "pytorch_model.bin": _st_bytes(["e"]),
    }
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as fh:
            fh.write(data)
    with open(os.path.join(base, "elsewhere", "x.safetensors"), "wb") as fh:
        fh.write(_st_bytes(["x"]))
    os.symlink("loop.safetensors", os.path.join(root, "loop.safetensors"))
    os.symlink("nowhere", os.path.join(root, "dangling.safetensors"))
    os.symlink("../elsewhere/x.safetensors", os.path.join(root, "outside.safetensors"))
    os.mkfifo(os.path.join(root, "fifo.safetensors"))
    os.mkdir(os.path.join(root, "dir.safetensors"))
    os.symlink("T" * 300, os.path.join(root, "long.safetensors"))
    return root


_ROOT = _build()


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    name, text = INDEX_NAMES[data[0] % len(INDEX_NAMES)], data[1:]
    for other in INDEX_NAMES:
        if os.path.lexists(os.path.join(_ROOT, other)):
            os.unlink(os.path.join(_ROOT, other))
    with open(os.path.join(_ROOT, name), "wb") as fh:
        fh.write(text)
    with contextlib.suppress(LoadscopeError):
        parse_index(text, path=Path(name))
    try:
        target = resolve(_ROOT)
    except LoadscopeError:
        return
    for wf in target.files:
        lexical = os.path.normpath(wf.path)
        assert lexical.startswith(_ROOT + os.sep), wf.path
        assert os.path.isfile(wf.path), wf.path
    with contextlib.suppress(LoadscopeError):
        inspect_target(target)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
