"""Peers, measured exactly like our strategies when installed (``pip install 'loadscope[peers]'``).

* ``fastsafetensors`` in its CPU mode (no GPUDirect Storage): batched parallel
  reads into its own buffers;
* ``runai``: Run:ai's ``runai-model-streamer``, a C++ streamer of safetensors.
"""

from __future__ import annotations

from loadscope.loaders import strategy


class FastSafetensors(strategy.Strategy):
    name = "fastsafetensors"
    summary = "fastsafetensors SafeTensorsFileLoader, CPU mode (nogds)"
    requires = strategy.Requirements(ram_multiple=1.0, package="fastsafetensors", extra="peers")
    samples = False  # its loader reads whole files (peak RSS = the file on a sample)
    # Nor a subset of shards: extrapolated from one, 4 GiB came out 54% short (its cost
    # depends on the files loaded together; benchmarks/RESULTS.md). Whole, or skipped.
    sample_shards = False

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        from fastsafetensors import SafeTensorsFileLoader, SingleGroup

        loader = SafeTensorsFileLoader(SingleGroup(), "cpu", nogds=True)
        try:
            loader.add_filenames({0: [f.path for f in files]})
            buffers = loader.copy_files_to_device()
            try:
                for f in files:
                    names = f.tensors
                    if names is None:
                        from loadscope.loaders.safetensors_format import read_header

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
    summary = "runai-model-streamer SafetensorsStreamer"
    requires = strategy.Requirements(
        ram_multiple=1.0, package="runai_model_streamer", extra="peers"
    )
    samples = False  # streams whole files
    # It streams the files of a load concurrently: a subset of shards predicted 4 GiB
    # 64% slow (benchmarks/RESULTS.md). Whole, or skipped.
    sample_shards = False

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        from runai_model_streamer import SafetensorsStreamer

        with SafetensorsStreamer() as streamer:
            for f in files:
                streamer.stream_file(f.path)
                # The streamer reuses its buffer: copy each tensor out.
                yield from strategy.only_requested(
                    f, ((n, t.clone()) for n, t in streamer.get_tensors())
                )
