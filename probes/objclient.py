"""The object-store client the object-store probe and strategies share: an address
(``s3://bucket/prefix``, ``gs://``, ``az://``) parsed, its store built once per process
through ``obstore`` (the Rust ``object_store`` crate: ranged and concurrent GETs without
the GIL, one library for the three clouds), a model's weight objects listed, and every
failure turned into one line that names the problem and never a secret.

Credentials come from the standard environment, read by ``object_store`` itself:
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``AWS_ENDPOINT_URL`` (an S3-compatible store: MinIO, Ceph, R2), web identity and the
instance's metadata service; ``GOOGLE_APPLICATION_CREDENTIALS``; ``AZURE_STORAGE_*``.
An ``http://`` endpoint is allowed (a store on the local network); a request has a
connection timeout and a bounded retry, so an endpoint that does not answer is a line,
not a hang.

May import: ``loadscope.base``, ``loadscope.probes.sources``; ``obstore`` (imported when a
store is first used).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from loadscope.probes.sources import BadAddress, SourceError, SourceObject

#: The address prefixes, by source name.
SCHEMES: dict[str, tuple[str, ...]] = {"s3": ("s3://",), "gcs": ("gs://",), "azure": ("az://",)}
#: Every object-store source's name: what the object-store probe and strategies declare.
OBJECT_STORES: frozenset[str] = frozenset(SCHEMES)
#: What the reports call each.
TITLES = {"s3": "an S3 bucket", "gcs": "a GCS bucket", "azure": "an Azure container"}
#: The index file of a sharded model beside its shards.
INDEX = "model.safetensors.index.json"
#: Seconds to connect, and the retries' total: an endpoint that does not answer is said
#: within about this long.
CONNECT_TIMEOUT_S = 5
RETRY_TIMEOUT_S = 15
#: One request's own limit (a 64 MiB range at 2 MB/s still fits).
REQUEST_TIMEOUT_S = 120
_SECRET_VARS = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_MASTER_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_TOKEN",
    "AZURE_STORAGE_CLIENT_SECRET",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
)
_SIGNED = re.compile(r"(Signature|X-Amz-Signature|X-Amz-Credential|sig|token)=[^&\s\"']+", re.I)

T = TypeVar("T")

NO_CREDENTIALS = (
    "no credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or"
    " AWS_SKIP_SIGNATURE=true for a public bucket)"
)


def _no_aws_credentials() -> bool:
    """No AWS credentials in the environment and the instance's metadata service ruled
    out (``AWS_EC2_METADATA_DISABLED``, as the AWS SDKs honour it): said before any
    request, rather than after the metadata service's timeouts."""
    env = os.environ
    if env.get("AWS_EC2_METADATA_DISABLED", "").lower() != "true":
        return False
    if env.get("AWS_SKIP_SIGNATURE", "").lower() == "true":
        return False
    return not any(
        env.get(name)
        for name in (
            "AWS_ACCESS_KEY_ID",
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        )
    )


def source_of(address: str) -> str | None:
    """The object-store source an address names ("s3", "gcs", "azure"), or None."""
    return next((n for n, p in SCHEMES.items() if address.startswith(p)), None)


def split(address: str) -> tuple[str, str, str]:
    """``(source, bucket, key)`` of an address; BadAddress (one line) for one without a
    bucket. The key may be a prefix (a folder) or an object, "" for the bucket's root."""
    source = source_of(address)
    if source is None:
        raise BadAddress(f"{address!r} is not an object-store address (s3://, gs://, az://)")
    body = address[len(SCHEMES[source][0]) :]
    bucket, _, key = body.partition("/")
    if not bucket or bucket in (".", ".."):
        raise BadAddress(f"{address}: no bucket named (s3://BUCKET/PREFIX)")
    return source, bucket, key


def scrub(text: str) -> str:
    """``text`` without any secret the environment holds nor a signature's value."""
    for name in _SECRET_VARS:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return _SIGNED.sub(lambda m: f"{m.group(1)}=***", text)


@functools.lru_cache(maxsize=16)
def store(source: str, bucket: str) -> Any:
    """The ``obstore`` store of ``bucket`` (built once per process)."""
    try:
        from obstore.store import AzureStore, GCSStore, S3Store
    except ImportError:
        raise SourceError(
            "reading an object store needs obstore: pip install 'loadscope[object-store]'"
        ) from None
    client: Any = {
        "connect_timeout": f"{CONNECT_TIMEOUT_S}s",
        "timeout": f"{REQUEST_TIMEOUT_S}s",
    }
    retry: Any = {
        "max_retries": 2,
        "retry_timeout": timedelta(seconds=RETRY_TIMEOUT_S),
        "backoff": {
            "init_backoff": timedelta(milliseconds=100),
            "max_backoff": timedelta(seconds=2),
            "base": 2.0,
        },
    }
    if source == "s3" and _no_aws_credentials():
        raise SourceError(f"s3://{bucket}: {NO_CREDENTIALS}")
    try:
        if source == "s3":
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint and endpoint.startswith("http://"):
                client["allow_http"] = True
            kwargs: dict[str, Any] = {"endpoint": endpoint} if endpoint else {}
            if not os.environ.get("AWS_REGION") and not os.environ.get("AWS_DEFAULT_REGION"):
                kwargs["region"] = "us-east-1"
            return S3Store(bucket, client_options=client, retry_config=retry, **kwargs)
        if source == "gcs":
            return GCSStore(bucket, client_options=client, retry_config=retry)
        return AzureStore(bucket, client_options=client, retry_config=retry)
    except Exception as exc:  # noqa: BLE001 - obstore's configuration errors, one line each
        raise SourceError(f"{SCHEMES[source][0]}{bucket}: {_first_line(exc)}") from None


def call(address: str, what: Callable[[], T]) -> T:
    """``what()`` with obstore's errors turned into one :class:`SourceError` line each."""
    try:
        return what()
    except SourceError:
        raise
    except FileNotFoundError:
        raise SourceError(f"{address}: no such bucket or object") from None
    except Exception as exc:  # noqa: BLE001 - obstore's errors, said in one line
        raise SourceError(f"{address}: {explain(exc)}") from None


def explain(exc: BaseException) -> str:
    """An obstore error in a few words, with what to do where that is known."""
    name = type(exc).__name__
    low = str(exc).lower()
    if "169.254.169.254" in low or "/latest/api/token" in low or "credential" in low:
        # object_store asked the instance metadata service: no credentials were set.
        return NO_CREDENTIALS
    if name == "PermissionDeniedError" or "accessdenied" in low or "403 forbidden" in low:
        return "access denied (the credentials in the environment may not read it)"
    if name == "UnauthenticatedError" or "401 unauthorized" in low:
        return "the store did not accept the credentials (AWS_ACCESS_KEY_ID and friends)"
    if "nosuchbucket" in low or "bucket does not exist" in low:
        return "no such bucket"
    why = next(
        (
            words
            for needle, words in (
                ("connection refused", "connection refused"),
                ("timed out", "timed out"),
                ("dns error", "its name does not resolve"),
                ("failed to lookup", "its name does not resolve"),
                ("tcp connect error", "no connection"),
                ("error sending request", "no connection"),
            )
            if needle in low
        ),
        None,
    )
    if why is not None:
        endpoint = scrub(
            os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
            or "the store's endpoint"
        )
        return f"{endpoint} does not answer ({why})"
    return _first_line(exc)[:200]


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return scrub(lines[0] if lines else type(exc).__name__)


def object_key(address: str) -> tuple[Any, str]:
    """The store and key of an object's address."""
    source, bucket, key = split(address)
    return store(source, bucket), key


def listing(address: str) -> tuple[SourceObject, ...]:
    """The model's safetensors objects at ``address``: the object itself when the address
    names one; else the shards its folder's index names (each must be there), else every
    ``*.safetensors`` directly under it. One line (SourceError) when there are none."""
    import obstore

    source, bucket, key = split(address)
    st = store(source, bucket)
    if key.endswith(".safetensors"):
        meta = call(address, lambda: obstore.head(st, key))
        return (SourceObject(key.rpartition("/")[2], int(meta["size"])),)
    prefix = key.rstrip("/") + "/" if key.strip("/") else ""
    sizes = {name: size for name, size, _etag in folder_objects(address)}
    if INDEX in sizes:
        raw = call(address, lambda: bytes(obstore.get(st, prefix + INDEX).bytes()))
        try:
            shards = sorted(set(json.loads(raw)["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SourceError(f"{address}: {INDEX} is not a safetensors index") from None
        missing = [s for s in shards if s not in sizes]
        if missing:
            raise SourceError(
                f"{address}: shard {missing[0]} named in {INDEX} is missing"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
            )
        return tuple(SourceObject(s, sizes[s]) for s in shards)
    names = sorted(n for n in sizes if n.endswith(".safetensors"))
    if not names:
        others = sorted(sizes)[:3]
        raise SourceError(
            f"{address}: no .safetensors objects there"
            + (f" (found {', '.join(others)})" if others else " (the prefix is empty)")
            + "; loadscope reads safetensors from object stores"
        )
    return tuple(SourceObject(n, sizes[n]) for n in names)


def folder_objects(address: str) -> list[tuple[str, int, str]]:
    """``(name, size, etag)`` of every object directly under ``address``'s folder (the
    folder itself when the address names one ``.safetensors`` object), by name."""
    import obstore

    source, bucket, key = split(address)
    if key.endswith(".safetensors"):
        key = key.rpartition("/")[0]
    prefix = key.strip("/") + "/" if key.strip("/") else ""
    st = store(source, bucket)
    found = call(address, lambda: obstore.list_with_delimiter(st, prefix or None))
    return sorted(
        (str(o["path"]).rpartition("/")[2], int(o["size"]), str(o.get("e_tag") or ""))
        for o in found["objects"]
    )
