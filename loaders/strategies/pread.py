"""``pread``: safetensors' own ``load_file(backend="pread")``, where the installed version has it.

Reads each tensor with positional reads instead of mapping the file.
"""

from __future__ import annotations

import inspect

from loadscope.loaders.strategy import (
    FileByFile,
    FileRequest,
    LoadContext,
    Requirements,
    Tensors,
    only_requested,
)


class SafetensorsPread(FileByFile):
    name = "pread"
    summary = 'safetensors.torch.load_file(backend="pread")'
    requires = Requirements(ram_multiple=1.0)

    def unavailable(self) -> str | None:
        import safetensors
        from safetensors.torch import load_file

        if "backend" not in inspect.signature(load_file).parameters:
            return f"safetensors {safetensors.__version__} has no backend= option in load_file"
        return None

    def load_one(self, f: FileRequest, ctx: LoadContext) -> Tensors:
        from safetensors.torch import load_file

        yield from only_requested(f, load_file(f.path, backend="pread").items())
