"""Coverage-guided fuzzing of the safetensors header parser with atheris (see README.md).

Each input is a whole file: it is parsed in memory (the bytes after the 8-byte length
as the header) and then read from disk through ``read_header`` and ``inspect``, so the
length prefix, the size checks and the impostor sniffer are fuzzed too. A
:class:`~loadscope.base.errors.LoadscopeError` is an expected refusal; any other exception,
or a successful parse that contradicts itself, is a crash.

``TestOneInput`` imports without atheris, so the test suite replays inputs through it.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import tempfile

if __name__ == "__main__":
    import atheris

    with atheris.instrument_imports():
        from loadscope.base.errors import LoadscopeError
        from loadscope.loaders.dtypes import DTYPE_BITS
        from loadscope.loaders.safetensors_format import (
            SafetensorsHeader,
            parse_header,
            read_header,
        )
        from loadscope.model.inspection import inspect_target
        from loadscope.model.targets import resolve
else:
    from loadscope.base.errors import LoadscopeError
    from loadscope.loaders.dtypes import DTYPE_BITS
    from loadscope.loaders.safetensors_format import SafetensorsHeader, parse_header, read_header
    from loadscope.model.inspection import inspect_target
    from loadscope.model.targets import resolve

#: One file, overwritten by every input (the harness is single-threaded).
_PATH = os.path.join(tempfile.mkdtemp(prefix="loadscope-fuzz-header-"), "model.safetensors")


def check(header: SafetensorsHeader, file_size: int) -> None:
    """A header that parsed must describe the file consistently."""
    assert header.file_size == file_size
    assert header.data_offset + header.data_bytes == file_size
    expected = 0
    for t in header.tensors:
        assert t.dtype in DTYPE_BITS, t
        assert t.begin == expected, t
        assert t.nbytes * 8 == math.prod(t.shape) * DTYPE_BITS[t.dtype], t
        expected = t.end
    assert expected == header.data_bytes
    list(header.unaligned())


def TestOneInput(data: bytes) -> None:
    raw = data[8:]
    with contextlib.suppress(LoadscopeError):
        check(parse_header(raw, file_size=len(data), path="fuzz.safetensors"), len(data))
    with open(_PATH, "wb") as fh:
        fh.write(data)
    with contextlib.suppress(LoadscopeError):
        check(read_header(_PATH), len(data))
    with contextlib.suppress(LoadscopeError):
        inspect_target(resolve(_PATH))


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
