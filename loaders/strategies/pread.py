"""``pread``: safetensors' own ``load_file(backend="pread")``, where the installed version has it.

Reads each tensor with positional reads instead of mapping the file.
"""

from __future__ import annotations

import inspect

from loadscope.loaders import strategy


class SafetensorsPread(strategy.FileByFile):
    name = "pread"
    summary = 'safetensors.torch.load_file(backend="pread")'
    requires = strategy.Requirements(ram_multiple=1.0)

    def unavailable(self) -> str | None:
        import safetensors
        from safetensors.torch import load_file

        if "backend" not in inspect.signature(load_file).parameters:
            return f"safetensors {safetensors.__version__} has no backend= option in load_file"
        return None

    def load_one(self, f: strategy.FileRequest, ctx: strategy.LoadContext) -> strategy.Tensors:
        from safetensors.torch import load_file

        yield from strategy.only_requested(f, load_file(f.path, backend="pread").items())
