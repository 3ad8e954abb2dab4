"""Coverage-guided fuzzing of the torch checkpoint reader with atheris (see README.md).

Each input is written as ``pytorch_model.bin`` and read by ``read_torch_info`` (the zip
directory, ``data.pkl`` and legacy pickles, walked opcode by opcode) and ``inspect``.
A :class:`~loadscope.base.errors.LoadscopeError` is an expected refusal; any other exception
is a crash, and so is any pickle being executed (the canary below counts calls).
Seed the corpus with real ``torch.save`` files (``make_corpus.py`` writes some).

``TestOneInput`` imports without atheris, so the test suite replays inputs through it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

if __name__ == "__main__":
    import atheris

    with atheris.instrument_imports():
        from loadscope.base.errors import LoadscopeError
        from loadscope.loaders.torch_format import read_torch_info
        from loadscope.model.inspection import inspect_target
        from loadscope.model.targets import resolve
else:
    from loadscope.base.errors import LoadscopeError
    from loadscope.loaders.torch_format import read_torch_info
    from loadscope.model.inspection import inspect_target
    from loadscope.model.targets import resolve

_PATH = os.path.join(tempfile.mkdtemp(prefix="loadscope-fuzz-torch-"), "pytorch_model.bin")
#: Calls of :func:`canary`: a pickle that names it (``fuzz_torch canary``) ran if non-empty.
CALLS: list[object] = []


def canary(*args: object) -> None:
    CALLS.append(args)


def TestOneInput(data: bytes) -> None:
    with open(_PATH, "wb") as fh:
        fh.write(data)
    try:
        info = read_torch_info(_PATH)
        assert info.file_size == len(data)
        assert info.format in ("zip", "legacy")
    except LoadscopeError:
        pass
    with contextlib.suppress(LoadscopeError):
        inspect_target(resolve(_PATH))
    assert not CALLS, "a pickle was executed"


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
