"""The S3 backend (MinIO and any S3 server) through the ``minio`` SDK."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from shared.objectstore.base import (
    DEFAULT_CONTENT_TYPE,
    Data,
    NotFound,
    ObjectInfo,
    ObjectReader,
    ObjectStore,
    _CheckedStream,
    _validate_prefix,
    validate_key,
)

if TYPE_CHECKING:
    pass


_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchObject", "NoSuchVersion"})


class S3ObjectStore(ObjectStore):
    """Objects in one bucket of an S3 server (MinIO, AWS, moto), through the ``minio`` SDK.

    ``endpoint_url`` is ``http(s)://host:port``. Objects larger than ``part_size`` (at least
    5 MiB) go up as multipart uploads whether or not their length is known, through minio's
    public ``put_object``; it keeps up to about three parts in memory at once (the part being
    read, its copy without the look-ahead byte, and the part before until it is replaced).
    """

    MIN_PART_SIZE = 5 * 1024 * 1024

    def __init__(
        self,
        endpoint_url: str,
        access_key: str | None,
        secret_key: str | None,
        bucket: str,
        region: str = "us-east-1",
        secure: bool | None = None,
        create_bucket_if_missing: bool = True,
        part_size: int = 8 * 1024 * 1024,
        cas_threads: int = 8,
    ) -> None:
        import certifi
        import urllib3
        from minio import Minio

        parts = urlsplit(endpoint_url if "://" in endpoint_url else f"http://{endpoint_url}")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"S3 endpoint must be http(s)://host:port, got {endpoint_url!r}")
        if parts.path not in ("", "/"):
            raise ValueError(
                f"S3 endpoint {endpoint_url!r} must not have a path; name the bucket separately"
            )
        if part_size < self.MIN_PART_SIZE:
            raise ValueError(f"part_size must be at least {self.MIN_PART_SIZE} bytes (S3 minimum)")
        self.endpoint_url = f"{parts.scheme}://{parts.netloc}"
        self.bucket = bucket
        self.part_size = part_size
        self.cas_threads = max(1, cas_threads)
        # Our own connection pool (minio's defaults: 5 min timeouts, 5 retries on 5xx, the CA
        # bundle of SSL_CERT_FILE or certifi), so close() can release it through public API.
        self._http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=300, read=300),
            maxsize=max(10, self.cas_threads + 2),
            cert_reqs="CERT_REQUIRED",
            ca_certs=os.environ.get("SSL_CERT_FILE") or certifi.where(),
            retries=urllib3.Retry(
                total=5, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]
            ),
        )
        self.client = Minio(
            parts.netloc,
            access_key=access_key or None,
            secret_key=secret_key if access_key else None,
            secure=(parts.scheme == "https") if secure is None else secure,
            region=region,
            http_client=self._http,
        )
        if create_bucket_if_missing:
            self._ensure_bucket(region)

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.endpoint_url!r}, bucket={self.bucket!r})"

    def _ensure_bucket(self, region: str) -> None:
        from minio.error import S3Error

        if self.client.bucket_exists(self.bucket):
            return
        try:
            self.client.make_bucket(self.bucket, location=region)
        except S3Error as exc:  # another process created it first
            if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise

    def _call(self, key: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from minio.error import S3Error

        try:
            return fn(self.bucket, key, *args, **kwargs)
        except S3Error as exc:
            if exc.code in _NOT_FOUND_CODES:
                raise NotFound(key) from None
            raise

    def put(
        self,
        key: str,
        data: Data,
        length: int | None = None,
        content_type: str = DEFAULT_CONTENT_TYPE,
    ) -> ObjectInfo:
        """Streams through minio's public ``put_object`` with an unknown length: one PUT when
        the data fits in ``part_size``, else a multipart upload that minio aborts on any
        error (a length mismatch included), so the key keeps its previous object."""
        validate_key(key)
        metadata = None
        if isinstance(data, bytes | bytearray | memoryview):
            data = bytes(data)
            if length is not None and length != len(data):
                raise ValueError(f"put {key!r}: expected {length} bytes, got {len(data)}")
            metadata = {"sha256": hashlib.sha256(data).hexdigest()}
        stream = _CheckedStream(key, data, length)
        result = self._call(
            key,
            self.client.put_object,
            stream,
            -1,
            content_type=content_type,
            metadata=metadata,
            part_size=self.part_size,
            # minio's parallel mode queues parts without bound while they upload: sequential
            # parts keep memory bounded whatever the object's size.
            num_parallel_uploads=1,
        )
        return ObjectInfo(
            key=key,
            size=stream.size,
            etag=(result.etag or "").strip('"'),
            modified=result.last_modified or datetime.now(UTC),
            content_type=content_type,
            sha256=stream.sha256,
        )

    def _info(self, obj: Any) -> ObjectInfo:
        meta = obj.metadata or {}
        sha = meta.get("x-amz-meta-sha256") or meta.get("X-Amz-Meta-Sha256")
        return ObjectInfo(
            key=obj.object_name,
            size=obj.size or 0,
            etag=(obj.etag or "").strip('"'),
            modified=obj.last_modified or datetime.fromtimestamp(0, UTC),
            content_type=obj.content_type,
            sha256=sha,
        )

    def open(self, key: str) -> ObjectReader:
        validate_key(key)
        response = self._call(key, self.client.get_object)

        def _close() -> None:
            response.close()
            response.release_conn()

        return ObjectReader(response, None, on_close=_close)

    def stat(self, key: str) -> ObjectInfo:
        validate_key(key)
        return self._info(self._call(key, self.client.stat_object))

    def delete(self, key: str) -> None:
        validate_key(key)
        try:
            self._call(key, self.client.remove_object)
        except NotFound:
            pass

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        _validate_prefix(prefix)  # now, not at the first next()
        objects = self.client.list_objects(self.bucket, prefix=prefix or None, recursive=True)
        return (self._info(obj) for obj in objects if not obj.is_dir)

    def put_many_content_addressed(self, items: Iterable[bytes], prefix: str = "cas/") -> list[str]:
        """Checks and uploads run on ``cas_threads`` threads, a bounded window at a time."""
        keys: list[str] = []
        window: list[bytes] = []
        seen: dict[str, None] = {}

        def one(data: bytes) -> str:
            return self.put_content_addressed(data, prefix)

        with ThreadPoolExecutor(self.cas_threads, thread_name_prefix="k3stack-cas") as pool:

            def flush() -> None:
                # Duplicates inside one window would race each other to the same key: do each once.
                todo: dict[str, bytes] = {}
                for data in window:
                    k = self.content_key(data, prefix)
                    if k not in seen:
                        todo.setdefault(k, data)
                list(pool.map(one, todo.values()))
                for k in todo:
                    seen[k] = None
                keys.extend(self.content_key(d, prefix) for d in window)
                window.clear()

            for data in items:
                window.append(data)
                if len(window) >= 8 * self.cas_threads:
                    flush()
            if window:
                flush()
        return keys

    def close(self) -> None:
        self._http.clear()
