"""An S3-compatible object store on this machine, with a remote store's costs: a delay
before each response's first byte, a bandwidth cap per connection and one in total, and a
log of every request. The tests' bed and ``loadscope emulate --object-store``'s server.

It serves a folder: each sub-folder a bucket, each file under it an object whose key is
its relative path. It speaks the part of the S3 REST API a model loader uses, path-style
(``http://HOST:PORT/BUCKET/KEY``): ``GET`` with one ``Range`` (206), ``HEAD``, and
ListObjectsV2 (``GET /BUCKET?list-type=2&prefix=...&delimiter=/``). Bodies go out with
``sendfile`` in paced chunks, from threads (one per connection): the server is not what
bounds the rates it is set to (tests check that). Signatures are not verified; with an
``access_key`` set, a request must carry that key id in its SigV4 ``Authorization``
header, else it is answered 403 ``AccessDenied``, as a store answers a key it does not
know.

May import: ``loadscope.base``; the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit
from xml.sax.saxutils import escape

#: Bytes sent between two checks of the caps.
CHUNK_BYTES = 256 << 10
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")
_KEY_ID = re.compile(r"Credential=([^/,\s]+)/")


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """The costs of a remote store (each optional)."""

    #: Seconds before each response's first byte (a request's round trip and the store's
    #: time to first byte).
    first_byte_s: float = 0.0
    #: Bytes per second one connection may carry (S3 serves ~5 Gbps per connection).
    per_connection_bps: float | None = None
    #: Bytes per second all connections together may carry (the node's link).
    total_bps: float | None = None
    #: The one access key id accepted (None: any request, signed or not).
    access_key: str | None = None


class _Pace:
    """A rate as a virtual clock: each chunk's earliest start, never bursting ahead of
    the rate by more than one chunk."""

    def __init__(self, bps: float | None) -> None:
        self.bps, self.next_at, self.lock = bps, 0.0, threading.Lock()

    def book(self, nbytes: int) -> float:
        """When ``nbytes`` may go (monotonic); books them."""
        if not self.bps:
            return 0.0
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next_at)
            self.next_at = start + nbytes / self.bps
            return start


class ObjectStore:
    """The store serving ``root`` on ``host``:``port`` (0: any free port) from a thread;
    ``url`` once started. A context manager: stopped (every connection closed) on exit."""

    def __init__(
        self,
        root: Path,
        settings: StoreSettings | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log: Path | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.settings = settings or StoreSettings()
        self.total = _Pace(self.settings.total_bps)
        self._log_lock = threading.Lock()
        self._log: IO[str] | None = open(log, "a", encoding="utf-8") if log else None  # noqa: SIM115
        self.requests: list[dict[str, Any]] = []
        store = self

        class Handler(_Handler):
            owner = store

        self._server = _Server((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ObjectStore:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="objstore", daemon=True
        )
        self._thread.start()
        return self

    def serve(self) -> None:
        """Serve in this thread until :meth:`stop` (from another thread or a signal)."""
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ObjectStore:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def record(self, entry: dict[str, Any]) -> None:
        with self._log_lock:
            self.requests.append(entry)
            if self._log is not None:
                self._log.write(json.dumps(entry) + "\n")
                self._log.flush()

    def gets(self) -> list[dict[str, Any]]:
        """The object GETs served so far (not HEADs nor listings)."""
        with self._log_lock:
            return [r for r in self.requests if r["op"] == "get"]


class _Server(ThreadingHTTPServer):
    """A client that goes away mid-request (a killed loader, an unmounted bucket) is no
    error of the store's: no traceback for it."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: ObjectStore
    protocol_version = "HTTP/1.1"  # keep-alive: a client's pooled connection is one handler

    def setup(self) -> None:
        super().setup()
        self.pace = _Pace(self.owner.settings.per_connection_bps)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the store's own log is its record."""

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def do_GET(self) -> None:
        self._answer(head=False)

    def _answer(self, *, head: bool) -> None:
        started = time.monotonic()
        url = urlsplit(self.path)
        bucket, _, key = unquote(url.path).lstrip("/").partition("/")
        settings = self.owner.settings
        if settings.first_byte_s:
            time.sleep(settings.first_byte_s)
        if settings.access_key is not None:
            found = _KEY_ID.search(self.headers.get("Authorization", ""))
            if not found or found.group(1) != settings.access_key:
                self._error(403, "AccessDenied", "Access Denied", head)
                return
        folder = self.owner.root / bucket
        if not bucket or "/" in bucket or bucket.startswith(".") or not folder.is_dir():
            self._error(404, "NoSuchBucket", "The specified bucket does not exist", head)
            return
        if not key:
            self._list(folder, bucket, parse_qs(url.query), started)
            return
        path = (folder / key).resolve()
        if folder.resolve() not in path.parents or not path.is_file():
            self._error(404, "NoSuchKey", "The specified key does not exist.", head)
            return
        self._object(path, key, head, started)

    def _object(self, path: Path, key: str, head: bool, started: float) -> None:
        size = path.stat().st_size
        first, last, status = 0, size - 1, 200
        wanted = self.headers.get("Range")
        if wanted:
            m = _RANGE.match(wanted.strip())
            if not m or (not m.group(1) and not m.group(2)):
                self._error(416, "InvalidRange", "The requested range is not satisfiable", head)
                return
            if m.group(1):
                first = int(m.group(1))
                last = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:  # a suffix: the last N bytes
                first = max(0, size - int(m.group(2)))
            if first >= size or first > last:
                self._error(416, "InvalidRange", "The requested range is not satisfiable", head)
                return
            status = 206
        length = last - first + 1
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{int(path.stat().st_mtime_ns)}-{size}"')
        self.send_header("Last-Modified", formatdate(path.stat().st_mtime, usegmt=True))
        if status == 206:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.end_headers()
        sent = 0
        if not head:
            sent = self._send(path, first, length)
        self.owner.record(
            {
                "op": "head" if head else "get",
                "key": key,
                "start": first,
                "end": first + length,
                "bytes": sent,
                "status": status,
                "connection": id(self),
                "t0": started,
                "t1": time.monotonic(),
            }
        )

    def _send(self, path: Path, offset: int, length: int) -> int:
        """The body, paced by the connection's and the store's caps; bytes sent."""
        sent = 0
        with open(path, "rb") as fh:
            while sent < length:
                n = min(CHUNK_BYTES, length - sent)
                at = max(self.pace.book(n), self.owner.total.book(n))
                delay = at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                try:
                    done = os.sendfile(self.connection.fileno(), fh.fileno(), offset + sent, n)
                except (BrokenPipeError, ConnectionResetError):
                    break  # the client went away mid-body (cancelled, timed out)
                if done == 0:
                    break
                sent += done
        return sent

    def _list(self, folder: Path, bucket: str, query: dict[str, list[str]], started: float) -> None:
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [""])[0]
        keys, prefixes = [], set()
        for path in sorted(_files(folder)):
            key = path.relative_to(folder).as_posix()
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix) :]
            if delimiter and delimiter in rest:
                prefixes.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
                continue
            keys.append((key, path.stat()))
        contents = "".join(
            f"<Contents><Key>{escape(k)}</Key><Size>{st.st_size}</Size>"
            f"<LastModified>{_iso(st.st_mtime)}</LastModified>"
            f'<ETag>"{int(st.st_mtime_ns)}-{st.st_size}"</ETag>'
            "<StorageClass>STANDARD</StorageClass></Contents>"
            for k, st in keys
        )
        common = "".join(
            f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>"
            for p in sorted(prefixes)
        )
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(keys) + len(prefixes)}</KeyCount><MaxKeys>1000</MaxKeys>"
            f"<Delimiter>{escape(delimiter)}</Delimiter><IsTruncated>false</IsTruncated>"
            f"{contents}{common}</ListBucketResult>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.owner.record(
            {
                "op": "list",
                "key": quote(prefix),
                "bytes": len(body),
                "status": 200,
                "connection": id(self),
                "t0": started,
                "t1": time.monotonic(),
            }
        )

    def _error(self, status: int, code: str, message: str, head: bool) -> None:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f"<Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)
        self.owner.record({"op": "error", "key": code, "status": status, "connection": id(self)})


def _files(folder: Path) -> Iterator[Path]:
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            yield Path(dirpath) / name


def _iso(mtime: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(mtime))


@contextlib.contextmanager
def serving(
    root: Path, settings: StoreSettings | None = None, **kwargs: Any
) -> Iterator[ObjectStore]:
    """:class:`ObjectStore` started for the ``with`` block."""
    with ObjectStore(root, settings, **kwargs) as store:
        yield store
