"""Peers, measured exactly like our strategies when installed (``pip install 'loadscope[peers]'``).

* ``fastsafetensors`` in its CPU mode (no GPUDirect Storage): batched parallel
  reads into its own buffers;
* ``runai``: Run:ai's ``runai-model-streamer``, a C++ streamer of safetensors;
* and their GPU modes, what vLLM's and SGLang's ``--load-format fastsafetensors`` and
  ``runai_streamer`` run on a GPU box: ``fastsafetensors-cuda`` (host bounce buffers,
  ``nogds=True``, what vLLM runs with more than one GPU), ``fastsafetensors-gds``
  (``nogds=False``, vLLM's single-GPU setting: GPUDirect Storage through cuFile where the
  library finds it, its fallback recorded where not) and ``runai-cuda`` (the streamer's
  ``device="cuda:N"``).
"""

from __future__ import annotations

from typing import Any

from loadscope.base import fix_ids
from loadscope.loaders import stack_code as code
from loadscope.loaders import strategy
from loadscope.loaders.safetensors_format import read_header


def _load_format(name: str, **kw: Any) -> tuple[strategy.StackRoute, ...]:
    """vLLM's and SGLang's ``--load-format NAME``: the servers' flag for this peer."""
    what = f"--load-format {name}"
    return (
        strategy.StackRoute("vllm", "a flag", what, f"{code.VLLM} {what}", **kw),
        strategy.StackRoute("sglang", "a flag", what, f"{code.SGLANG} {what}", **kw),
    )


class FastSafetensors(strategy.Strategy):
    name = "fastsafetensors"
    rank_mode = "direct"
    reads = "deep"  # many large O_DIRECT reads in flight (nogds)
    summary = "fastsafetensors SafeTensorsFileLoader, CPU mode (nogds)"
    requires = strategy.Requirements(ram_multiple=1.0, package="fastsafetensors", extra="peers")
    samples = False  # its loader reads whole files (peak RSS = the file on a sample)
    # Nor a subset of shards: extrapolated from one, 4 GiB came out 54% short (its cost
    # depends on the files loaded together; benchmarks/RESULTS.md). Whole, or skipped.
    sample_shards = False
    doctor_order: int | None = 70
    on_gpu_box = True
    own_copy = True
    fixes = frozenset({fix_ids.PARALLEL_READS})
    # The CPU mode stands for the flag only where its GPU mode (what the server runs on a
    # GPU box) was not timed.
    routes = _load_format("fastsafetensors", unless="mmap-cuda")
    #: False: GPUDirect Storage (cuFile), storage to GPU memory with no host copy.
    nogds = True

    def target(self, ctx: strategy.LoadContext) -> str:
        """The device the loader fills: "cpu", or the GPU the trial loads to."""
        return "cpu"

    def check_copier(self, loader: Any, ctx: strategy.LoadContext) -> None:
        """Record the copier fastsafetensors chose: asked for GDS on a host without cuFile,
        it falls back to its bounce buffers by itself, and the trial must say so."""
        copier = getattr(getattr(loader, "copier_class", None), "__name__", "unknown")
        ctx.notes["copier"] = copier
        if not self.nogds and not copier.startswith("Gds"):
            ctx.notes["gds"] = f"no GPUDirect Storage here: fastsafetensors chose {copier}"

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        from fastsafetensors import SafeTensorsFileLoader, SingleGroup

        loader = SafeTensorsFileLoader(SingleGroup(), self.target(ctx), nogds=self.nogds)
        try:
            self.check_copier(loader, ctx)
            loader.add_filenames({0: [f.path for f in files]})
            buffers = loader.copy_files_to_device()
            try:
                for f in files:
                    names = f.tensors
                    if names is None:
                        names = tuple(t.name for t in read_header(f.path).tensors)
                    for name in names:
                        # clone: the loader's buffers are freed when it closes
                        yield name, buffers.get_tensor(name).clone()
            finally:
                buffers.close()
        finally:
            loader.close()


class RunAI(strategy.Strategy):
    name = "runai"
    rank_mode = "direct"
    reads = "deep"  # many concurrent large reads of its own
    summary = "runai-model-streamer SafetensorsStreamer"
    requires = strategy.Requirements(
        ram_multiple=1.0, package="runai_model_streamer", extra="peers"
    )
    samples = False  # streams whole files
    # It streams the files of a load concurrently: a subset of shards predicted 4 GiB
    # 64% slow (benchmarks/RESULTS.md). Whole, or skipped.
    sample_shards = False
    doctor_order: int | None = 80
    on_gpu_box = True
    own_copy = True
    fixes = frozenset({fix_ids.PARALLEL_READS})
    routes = _load_format("runai_streamer", unless="mmap-cuda")

    def target(self, ctx: strategy.LoadContext) -> str:
        """The device the streamer fills: "cpu", or the GPU the trial loads to."""
        return "cpu"

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        from runai_model_streamer import SafetensorsStreamer

        with SafetensorsStreamer() as streamer:
            for f in files:
                streamer.stream_file(f.path, device=self.target(ctx))
                # The streamer reuses its buffer: copy each tensor out.
                yield from strategy.only_requested(
                    f, ((n, t.clone()) for n, t in streamer.get_tensors())
                )


class _OnGpu:
    """A peer's GPU mode: it fills the GPU the trial loads to; none of its CPU mode's place
    in the doctor's CPU plan or its routes (the GPU modes declare their own)."""

    doctor_order: int | None = None
    on_gpu_box = False
    own_copy = False
    fixes: frozenset[str] = frozenset()
    routes: tuple[strategy.StackRoute, ...] = ()

    def target(self, ctx: strategy.LoadContext) -> str:
        return _gpu(ctx)


def _gpu(ctx: strategy.LoadContext) -> str:
    from loadscope.loaders.cuda import cuda_device

    return str(cuda_device(ctx.device))


class FastSafetensorsCuda(_OnGpu, FastSafetensors):
    name = "fastsafetensors-cuda"
    rank_mode = "direct"
    summary = "fastsafetensors SafeTensorsFileLoader to cuda:N through host buffers (nogds)"
    requires = strategy.Requirements(
        gpu=True, ram_multiple=0.0, package="fastsafetensors", extra="peers"
    )


class FastSafetensorsGds(FastSafetensorsCuda):
    """vLLM's single-GPU ``--load-format fastsafetensors``: ``nogds=False``, GPUDirect
    Storage where fastsafetensors finds cuFile, else its own fallback (recorded)."""

    name = "fastsafetensors-gds"
    rank_mode = "direct"
    summary = "fastsafetensors to cuda:N with GPUDirect Storage where found (nogds=False)"
    nogds = False
    fixes = frozenset({fix_ids.GPU_STAGED})
    routes = _load_format("fastsafetensors")  # against the GPU's default load


class RunAICuda(_OnGpu, RunAI):
    name = "runai-cuda"
    rank_mode = "direct"
    summary = "runai-model-streamer SafetensorsStreamer to cuda:N (device='cuda:N')"
    requires = strategy.Requirements(
        gpu=True, ram_multiple=0.0, package="runai_model_streamer", extra="peers"
    )
    fixes = frozenset({fix_ids.GPU_STAGED})
    routes = _load_format("runai_streamer")  # against the GPU's default load
