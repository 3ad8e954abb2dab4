"""Loading safetensors straight from an object store (``s3://``, ``gs://``, ``az://``).

``store-ranged`` is loadscope's own: each object's header with one small GET, then its
tensors' bytes as ranged GETs of ``chunk_bytes``, ``concurrency`` of them going at once
across every object (a store serves each connection at a fraction of the node's link: the
rate comes from many GETs in flight), each landing in place in one buffer per object
whose tensors are views on it. ``store-get`` is the naive route: one GET of each object
whole on one connection, then ``safetensors.torch.load`` of its bytes.

Each trial's :class:`~loadscope.loaders.strategy.FileRequest` ``path`` is the object's
address (``s3://bucket/model/model-00001-of-00002.safetensors``).
"""

from __future__ import annotations

import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from loadscope.loaders import strategy
from loadscope.loaders.buffers import group_by_span, selected, tensors_from_buffer
from loadscope.loaders.safetensors_format import MAX_HEADER_BYTES, parse_header
from loadscope.probes.objclient import OBJECT_STORES, call, object_key

#: The smallest ranged GET ``store-ranged`` makes of a model too small to fill its slots.
MIN_CHUNK_BYTES = 1 << 20
#: The first GET of an object: its header length and, most often, the header itself.
HEAD_BYTES = 64 << 10


def _get(address: str, start: int, length: int) -> Any:
    import obstore

    st, key = object_key(address)
    return call(address, lambda: obstore.get_range(st, key, start=start, length=length))


def read_header_at(address: str, size: int) -> Any:
    """The safetensors header of the object at ``address`` (one GET, two for a header
    over 64 KiB), validated as a file's is."""
    first = bytes(_get(address, 0, min(HEAD_BYTES, size)))
    if len(first) < 8:
        raise strategy_error(address, f"is {size} bytes, shorter than a safetensors header")
    (length,) = struct.unpack("<Q", first[:8])
    if length > MAX_HEADER_BYTES or 8 + length > size:
        raise strategy_error(address, f"declares a {length}-byte header (not safetensors?)")
    raw = first[8 : 8 + length]
    if len(raw) < length:
        raw += bytes(_get(address, len(first), 8 + length - len(first)))
    return parse_header(raw, file_size=size, path=address)


def strategy_error(address: str, text: str) -> Exception:
    from loadscope.probes.sources import SourceError

    return SourceError(f"{address}: {text}")


class StoreRanged(strategy.Strategy):
    name = "store-ranged"
    summary = "concurrent ranged GETs into one buffer per object (loadscope's own)"
    requires = strategy.Requirements(
        sources=OBJECT_STORES, ram_multiple=1.0, package="obstore", extra="object-store"
    )
    knobs = (
        strategy.Knob("concurrency", 32, "ranged GETs going at once"),
        strategy.Knob("chunk_bytes", 8 << 20, "bytes per ranged GET"),
    )
    own_copy = True

    def prepare(self, files: list[strategy.FileRequest], ctx: strategy.LoadContext) -> None:
        import obstore  # noqa: F401 - the import, as a user's script pays it at its top

    def load(
        self, files: list[strategy.FileRequest], ctx: strategy.LoadContext
    ) -> strategy.Tensors:
        concurrency, chunk = (int(v) for v in ctx.knob_values(self, "concurrency", "chunk_bytes"))
        concurrency = max(1, concurrency)
        # A model smaller than concurrency chunks still keeps every slot busy: smaller GETs,
        # never under 1 MiB (below that each one is mostly its wait for the first byte).
        total = sum(f.size_bytes for f in files)
        chunk = max(1, min(chunk, max(MIN_CHUNK_BYTES, -(-total // concurrency))))
        with ThreadPoolExecutor(concurrency) as pool:
            headers = list(pool.map(lambda f: read_header_at(f.path, f.size_bytes), files))
            plans = []
            jobs = []
            for f, header in zip(files, headers, strict=True):
                spans = group_by_span(header, selected(header, f))
                for start, end, entries in spans:
                    buffer = bytearray(end - start)
                    plans.append((buffer, start, header, entries))
                    for offset in range(start, end, chunk):
                        jobs.append((f.path, buffer, start, offset, min(chunk, end - offset)))
            failed: list[BaseException] = []
            lock = threading.Lock()

            def fetch(job: tuple[str, bytearray, int, int, int]) -> None:
                address, buffer, base, offset, length = job
                try:
                    got = _get(address, offset, length)
                    if len(got) != length:
                        raise strategy_error(
                            address, f"ended at {offset + len(got)}, short of {offset + length}"
                        )
                    buffer[offset - base : offset - base + length] = memoryview(got)
                except BaseException as exc:  # noqa: BLE001 - the first one is re-raised
                    with lock:
                        failed.append(exc)

            list(pool.map(fetch, jobs))
            if failed:
                raise failed[0]
        for buffer, start, header, entries in plans:
            yield from tensors_from_buffer(buffer, start, header, entries)


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
