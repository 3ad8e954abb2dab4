"""``fullread``: ``load(open(p, "rb").read())``, the maintainer's fix for network disks.

One big read of the whole file into memory, then tensors are built from the
bytes. Holds the file twice at the peak (the bytes and the tensors).
"""

from __future__ import annotations

from loadscope.base import fix_ids
from loadscope.loaders import stack_code as code
from loadscope.loaders import strategy
from loadscope.loaders.buffers import read_spans, tensors_from_buffer
from loadscope.loaders.safetensors_format import read_header


class FullRead(strategy.FileByFile):
    name = "fullread"
    summary = "safetensors.torch.load(open(p, 'rb').read())"
    requires = strategy.Requirements(ram_multiple=2.0)
    doctor_order = 90  # the folklore fix, last but prefetch
    on_gpu_box = True
    reads = "buffered"
    fixes = frozenset({fix_ids.READ_WHOLE_FILES})
    # Each safetensors file read whole and its bytes load()ed: this trial's reads.
    routes = (
        strategy.StackRoute(
            "safetensors",
            "code change",
            "load(f.read())",
            "from safetensors.torch import load\n"
            "with open(path, 'rb') as f:  # each .safetensors file\n"
            "    state = load(f.read())",
        ),
        strategy.StackRoute(
            "transformers",
            "a flag",
            "disable_mmap=True",
            "from transformers import AutoModelForCausalLM  # disable_mmap: transformers >= 5.6\n"
            "model = AutoModelForCausalLM.from_pretrained({dir_py}, disable_mmap=True)",
            proxy=code.TIMED_AS_FULL_READ,
            layouts=code.NOT_DIFFUSERS,
        ),
        *code.diffusers(
            "a flag", "disable_mmap=True", "", ", disable_mmap=True", code.TIMED_AS_FULL_READ
        ),
        strategy.StackRoute(
            "vllm",
            "a flag",
            "--safetensors-load-strategy eager",
            code.VLLM + " --safetensors-load-strategy eager",
        ),
        strategy.StackRoute(
            "sglang",
            "a flag",
            "--weight-loader-disable-mmap",
            code.SGLANG + " --weight-loader-disable-mmap",
        ),
    )

    def load_one(self, f: strategy.FileRequest, ctx: strategy.LoadContext) -> strategy.Tensors:
        from safetensors.torch import load

        if f.tensors is not None:
            # A sample: one read per span that holds the chosen tensors.
            yield from read_spans(f)
            return
        with open(f.path, "rb") as fh:
            data = fh.read()
        try:
            tensors = load(data)
        except KeyError as exc:
            # This safetensors cannot build a dtype torch has (F8_E8M0 in 0.7):
            # the same bytes, the same one big read, tensors built here instead.
            ctx.notes.setdefault("fallback", f"safetensors has no dtype {exc}")
            header = read_header(f.path)
            buf = bytearray(data)
            for name, t in tensors_from_buffer(buf, 0, header, list(header.tensors)):
                yield name, t.clone()
            return
        yield from tensors.items()
