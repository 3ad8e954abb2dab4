"""Loading safetensors straight from an object store (``s3://``, ``gs://``, ``az://``).

``store-ranged`` is loadscope's own, ``loadscope.load_model("s3://...")``: many ranged
GETs in flight into one buffer per object (``loaders/storeread.py``); a whole load runs
that very call (the listing included), a sample the same reader on its tensors' spans.
``store-get`` is the naive route: one GET of each object whole on one connection, then
``safetensors.torch.load`` of its bytes. ``runai-store`` and ``runai-store-tuned`` are
Run:ai's streamer as vLLM and SGLang run it on a bucket, at its defaults and at the
probe's concurrency.

Each trial's :class:`~loadscope.loaders.strategy.FileRequest` ``path`` is the object's
address (``s3://bucket/model/model-00001-of-00002.safetensors``).
"""

from __future__ import annotations

from loadscope.loaders import strategy
from loadscope.loaders.storeread import CHUNK_BYTES, CONCURRENCY, load_store, read_objects
from loadscope.probes.objclient import OBJECT_STORES, call, object_key
from loadscope.probes.sources import split_address


class StoreRanged(strategy.Strategy):
    name = "store-ranged"
    summary = "concurrent ranged GETs into one buffer per object (loadscope's own)"
    requires = strategy.Requirements(
        sources=OBJECT_STORES, ram_multiple=1.0, package="obstore", extra="object-store"
    )
    knobs = (
        strategy.Knob("concurrency", CONCURRENCY, "ranged GETs going at once"),
        strategy.Knob("chunk_bytes", CHUNK_BYTES, "bytes per ranged GET"),
    )
    own_copy = True

    def prepare(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> None:
        import obstore  # noqa: F401 - the import, as a user's script pays it at its top

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        concurrency, chunk = (int(v) for v in ctx.knob_values(self, "concurrency", "chunk_bytes"))
        if all(f.tensors is None for f in files):
            # The whole model: what loadscope.load_model(address) runs, its listing too.
            address = files[0].path if len(files) == 1 else split_address(files[0].path)[0]
            yield from load_store(address, concurrency, chunk).items()
            return
        objects = [(f.path, f.size_bytes, f.tensors) for f in files]
        yield from read_objects(objects, concurrency, chunk)


class StoreGet(strategy.Strategy):
    name = "store-get"
    summary = "one GET of each object whole, then safetensors.torch.load (one stream)"
    requires = strategy.Requirements(
        sources=OBJECT_STORES, ram_multiple=2.0, package="obstore", extra="object-store"
    )
    samples = False  # it fetches whole objects whatever tensors it is asked for
    own_copy = True

    def prepare(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> None:
        import obstore  # noqa: F401
        import safetensors.torch  # noqa: F401

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        import obstore
        from safetensors.torch import load

        def whole(address: str) -> bytes:
            st, key = object_key(address)
            return call(address, lambda: bytes(obstore.get(st, key).bytes()))

        for f in files:
            data = whole(f.path)
            for name, tensor in load(data).items():
                if f.tensors is None or name in f.tensors:
                    yield name, tensor


#: Run:ai's settings for a store that is not AWS's own (MinIO, Ceph, R2, a local bed):
#: path-style addressing, and no region lookup on the instance metadata service (its SDK
#: waits ~5 s for it otherwise). Set in a trial only where ``AWS_ENDPOINT_URL`` names such
#: a store and the user has not set them; the printed commands carry them then too.
RUNAI_COMPATIBLE_ENV = {
    "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def runai_env(concurrency: int | None, chunk_bytes: int | None) -> dict[str, str]:
    """The environment a Run:ai streamer load from a store runs with: its concurrency and
    chunk size where given (else the streamer's defaults: 8 GETs of 8 MiB for a store),
    and :data:`RUNAI_COMPATIBLE_ENV` where an S3-compatible endpoint is set."""
    import os

    env: dict[str, str] = {}
    if concurrency:
        env["RUNAI_STREAMER_CONCURRENCY"] = str(concurrency)
    if chunk_bytes:
        env["RUNAI_STREAMER_CHUNK_BYTESIZE"] = str(chunk_bytes)
    if os.environ.get("AWS_ENDPOINT_URL"):
        env.update({k: v for k, v in RUNAI_COMPATIBLE_ENV.items() if k not in os.environ})
    return env


class RunAIStore(strategy.Strategy):
    """vLLM's and SGLang's ``--load-format runai_streamer`` on a bucket: every object
    streamed together (``stream_files``, as their loaders call it), at the streamer's
    defaults."""

    name = "runai-store"
    summary = "runai-model-streamer stream_files from the store, at its defaults"
    requires = strategy.Requirements(
        sources=OBJECT_STORES,
        ram_multiple=1.0,
        package="runai_model_streamer_s3",
        extra="object-store",
    )
    samples = False  # it streams whole objects
    sample_shards = False
    own_copy = True
    #: The streamer's own defaults for an object store: a trial at them sets nothing.
    knobs = (
        strategy.Knob("concurrency", 8, "GETs in flight (RUNAI_STREAMER_CONCURRENCY)"),
        strategy.Knob("chunk_bytes", 8 << 20, "bytes per GET (RUNAI_STREAMER_CHUNK_BYTESIZE)"),
    )

    def prepare(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> None:
        import runai_model_streamer  # noqa: F401

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        import os

        from runai_model_streamer import SafetensorsStreamer

        concurrency, chunk = (int(v) for v in ctx.knob_values(self, "concurrency", "chunk_bytes"))
        defaults = {k.name: k.default for k in self.knobs}
        settings = runai_env(
            concurrency if concurrency != defaults["concurrency"] else None,
            chunk if chunk != defaults["chunk_bytes"] else None,
        )
        os.environ.update(settings)  # this trial's own process: read when the streamer starts
        ctx.notes["env"] = dict(sorted(settings.items()))
        wanted = {f.path: f for f in files}
        with SafetensorsStreamer() as streamer:
            streamer.stream_files(list(wanted))
            # The streamer reuses its buffer: copy each tensor out.
            for name, tensor in streamer.get_tensors():
                yield name, tensor.clone()


class RunAIStoreTuned(RunAIStore):
    """The same, at the concurrency the object-store probe found the rate stops rising
    at (its ``--model-loader-extra-config '{"concurrency": N}'``)."""

    name = "runai-store-tuned"
    summary = "runai-model-streamer from the store at the probe's concurrency"
    tuned = True
