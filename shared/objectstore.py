"""Object storage behind one interface: a local directory, or an S3 server (MinIO) by URL.

``make_object_store(settings)`` picks the backend from ``K3STACK_OBJECT_STORE_URL``:
``file://<dir>`` (the embedded default, ``<data_dir>/objects``) or ``http(s)://host:port`` for an
S3 server reached with the ``minio`` SDK. Both backends behave the same, which
``tests/shared/test_objectstore.py`` checks by running one suite over both:

* keys are ``/``-separated relative paths (``trajectories/ep-1/body.json``); a bad key raises
  :class:`ValueError` before any I/O;
* ``put`` takes bytes, a binary file or an iterable of byte chunks, of known or unknown length,
  and never holds a whole stream in memory; ``open`` streams back in chunks;
* a missing key raises :class:`NotFound` (a :class:`KeyError`); ``delete`` of a missing key is a
  no-op; ``list`` is recursive and sorted by key;
* ``put_content_addressed`` stores data under ``<prefix><sha256 hex>`` and skips the upload when
  that key already exists (sandbox checkpoints store memory pages this way);
  ``put_many_content_addressed`` does the same for many objects at once.

Differences the interface cannot hide: the local backend keeps no content type (``stat`` reports
``None``) and its etag is ``<mtime_ns>-<size>`` in hex, not a digest; S3 keeps the content's
sha256 in object metadata when the length was known up front. A local key cannot also be a
"folder" of other keys (``a`` and ``a/b`` together), which S3 allows; such a put raises
:class:`ValueError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import stat as stat_mod
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from shared.settings import Settings

__all__ = [
    "CHUNK_SIZE",
    "LocalObjectStore",
    "NotFound",
    "ObjectInfo",
    "ObjectReader",
    "ObjectStore",
    "ObjectStoreError",
    "S3ObjectStore",
    "make_object_store",
    "validate_key",
]

CHUNK_SIZE = 1024 * 1024
"""Bytes read or written per step when streaming."""

DEFAULT_CONTENT_TYPE = "application/octet-stream"
MAX_KEY_BYTES = 1024  # the S3 limit, applied to both backends so keys stay portable

Data = bytes | bytearray | memoryview | BinaryIO | Iterable[bytes]


class ObjectStoreError(Exception):
    """Base class of object store errors."""


class NotFound(ObjectStoreError, KeyError):
    """No object under this key."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:  # KeyError's str() would be repr(key)
        return f"no object under key {self.key!r}"


@dataclass(frozen=True)
class ObjectInfo:
    """What a store knows about one object."""

    key: str
    size: int
    etag: str
    modified: datetime
    content_type: str | None = None
    sha256: str | None = None
    """Hex digest of the content when known (always on the info that ``put`` returns)."""


def validate_key(key: str) -> str:
    """Return ``key`` if it is a valid object key, else raise :class:`ValueError` saying why."""
    if not isinstance(key, str):
        raise ValueError(f"object key must be a str, got {type(key).__name__}")
    if not key:
        raise ValueError("object key must not be empty")
    if "\x00" in key:
        raise ValueError(f"object key {key!r} contains a NUL character")
    if key.startswith("/"):
        raise ValueError(f"object key {key!r} must be relative (no leading '/')")
    if key.endswith("/"):
        raise ValueError(f"object key {key!r} must not end with '/'")
    if "\\" in key:
        raise ValueError(f"object key {key!r} must use '/' as separator, not '\\'")
    for part in key.split("/"):
        if part == "..":
            raise ValueError(f"object key {key!r} must not contain '..' segments")
        if part in ("", "."):
            raise ValueError(f"object key {key!r} must not contain empty or '.' segments")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise ValueError(f"object key is longer than {MAX_KEY_BYTES} bytes: {key[:60]!r}…")
    return key


def _validate_prefix(prefix: str) -> str:
    if not isinstance(prefix, str):
        raise ValueError(f"prefix must be a str, got {type(prefix).__name__}")
    if "\x00" in prefix or prefix.startswith("/") or ".." in prefix.split("/"):
        raise ValueError(f"invalid list prefix {prefix!r} (no NUL, leading '/' or '..')")
    return prefix


def _iter_chunks(data: Data, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
    """The bytes of ``data`` as chunks, whatever form it came in."""
    if isinstance(data, bytes | bytearray | memoryview):
        yield bytes(data) if not isinstance(data, bytes) else data
        return
    read = getattr(data, "read", None)
    if callable(read):
        while True:
            chunk = read(chunk_size)
            if not chunk:
                return
            yield chunk
    else:
        for chunk in data:
            if chunk:
                yield bytes(chunk)


class _CheckedStream(io.RawIOBase):
    """Any :data:`Data` as a file to read from, hashing and counting what passes through.

    ``read`` hands out at most one source chunk at a time, so the stream itself buffers
    nothing. With ``expected`` set, reading past it, or reaching the end short of it, raises
    :class:`ValueError` — inside the upload, which then aborts and leaves no object.
    """

    def __init__(self, key: str, data: Data, expected: int | None) -> None:
        super().__init__()
        self._key = key
        self._chunks = _iter_chunks(data)
        self._pending = b""
        self._expected = expected
        self._hash = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            return b"".join(iter(lambda: self.read(CHUNK_SIZE), b""))
        parts, have = [], 0
        while have < size:
            chunk = self._pending or next(self._chunks, b"")
            self._pending = b""
            if not chunk:
                break
            if have + len(chunk) > size:
                chunk, self._pending = chunk[: size - have], chunk[size - have :]
            parts.append(chunk)
            have += len(chunk)
        out = parts[0] if len(parts) == 1 else b"".join(parts)
        del parts
        if not out:
            self._check(final=True)
            return b""
        self._hash.update(out)
        self.size += len(out)
        self._check(final=False)
        return out

    def _check(self, final: bool) -> None:
        want = self._expected
        if want is None or (self.size <= want and not final) or self.size == want:
            return
        got = "more" if self.size > want else str(self.size)
        raise ValueError(f"put {self._key!r}: expected {want} bytes, got {got}")

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()


class ObjectReader(io.RawIOBase):
    """A streaming, closeable, read-only view of one object.

    File-like (``read``, ``readinto``, usable with ``shutil.copyfileobj``) and a context
    manager; iterating it yields chunks of up to :data:`CHUNK_SIZE` bytes, not lines.
    """

    def __init__(
        self, raw: Any, info: ObjectInfo | None = None, on_close: Callable[[], None] | None = None
    ):
        super().__init__()
        self._raw = raw
        self.info = info
        self._on_close = on_close

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        self._checkClosed()
        if size is None or size < 0:
            return self._raw.read()
        return self._raw.read(size)  # straight from the source: no intermediate buffer

    def readall(self) -> bytes:
        return self.read()

    def readinto(self, buffer: Any) -> int:
        raw_readinto = getattr(self._raw, "readinto", None)
        if raw_readinto is not None:
            return raw_readinto(buffer) or 0
        data = self._raw.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def iter_chunks(self, chunk_size: int = CHUNK_SIZE) -> Iterator[bytes]:
        while True:
            chunk = self.read(chunk_size)
            if not chunk:
                return
            yield chunk

    def __iter__(self) -> Iterator[bytes]:  # type: ignore[override]
        return self.iter_chunks()

    def close(self) -> None:
        if not self.closed:
            try:
                if self._on_close is not None:
                    self._on_close()
                else:
                    self._raw.close()
            finally:
                super().close()


class ObjectStore(ABC):
    """The interface every backend implements. Keys are checked by :func:`validate_key`."""

    @abstractmethod
    def put(
        self,
        key: str,
        data: Data,
        length: int | None = None,
        content_type: str = DEFAULT_CONTENT_TYPE,
    ) -> ObjectInfo:
        """Store ``data`` (bytes, binary file or iterable of chunks) under ``key``, replacing
        any object there. ``length``, when given, must match; readers never see a partial
        object."""

    @abstractmethod
    def open(self, key: str) -> ObjectReader:
        """A streaming reader of the object; close it (or use ``with``)."""

    @abstractmethod
    def stat(self, key: str) -> ObjectInfo:
        """Size, etag, modification time of the object; :class:`NotFound` when missing."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; a missing key is not an error."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, recursively, sorted by key."""

    # Built on the above; backends override where they can do better.

    def get(self, key: str) -> bytes:
        """The whole object in memory; use :meth:`open` or :meth:`get_file` for large ones."""
        with self.open(key) as reader:
            return reader.read()

    def exists(self, key: str) -> bool:
        try:
            self.stat(key)
        except NotFound:
            return False
        return True

    def put_file(
        self, key: str, path: str | os.PathLike[str], content_type: str = DEFAULT_CONTENT_TYPE
    ) -> ObjectInfo:
        """Upload a local file, streaming."""
        with open(path, "rb") as f:
            return self.put(key, f, length=os.fstat(f.fileno()).st_size, content_type=content_type)

    def get_file(self, key: str, path: str | os.PathLike[str]) -> ObjectInfo:
        """Download to ``path`` atomically (a temp file beside it, then rename), streaming."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self.open(key) as reader:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
            try:
                with os.fdopen(fd, "wb") as out:
                    for chunk in reader:
                        out.write(chunk)
                os.replace(tmp, path)
            except BaseException:
                _unlink_quietly(tmp)
                raise
        return self.stat(key)

    def put_content_addressed(self, data: bytes, prefix: str = "cas/") -> str:
        """Store ``data`` under ``<prefix><sha256 hex>`` unless that key exists; return the key."""
        key = self.content_key(data, prefix)
        if not self.exists(key):
            self.put(key, data)
        return key

    def put_many_content_addressed(self, items: Iterable[bytes], prefix: str = "cas/") -> list[str]:
        """:meth:`put_content_addressed` for many objects; keys in input order."""
        return [self.put_content_addressed(data, prefix) for data in items]

    @staticmethod
    def content_key(data: bytes, prefix: str = "cas/") -> str:
        """The key content-addressed ``data`` gets."""
        key = prefix + hashlib.sha256(data).hexdigest()
        return validate_key(key)

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release connections; the store is not used afterwards."""


# --------------------------------------------------------------------------------------------
# Local directory


_TMP_DIR = ".k3stack-tmp"  # staging folder for atomic writes, under the root; not a valid key


def _unlink_quietly(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class LocalObjectStore(ObjectStore):
    """Objects as files under ``root`` (``root/<key>``).

    Writes go to a temp file under ``root/.k3stack-tmp`` and are renamed into place
    (``os.replace``), so readers in any process see the old object or the new one, never a
    partial one, and concurrent writers of one key leave exactly one of their versions.
    ``fsync=True`` also flushes each object to disk before the rename (slower; survives
    power loss rather than only process crashes).
    """

    def __init__(self, root: str | os.PathLike[str], fsync: bool = False) -> None:
        self.root = Path(root).expanduser().absolute()
        self.fsync = fsync
        self._tmp = self.root / _TMP_DIR
        self._tmp.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        validate_key(key)
        if key.split("/", 1)[0] == _TMP_DIR:
            raise ValueError(f"object key {key!r} uses the reserved folder {_TMP_DIR!r}")
        return self.root.joinpath(*key.split("/"))

    def _info(self, key: str, st: os.stat_result, sha256: str | None = None) -> ObjectInfo:
        return ObjectInfo(
            key=key,
            size=st.st_size,
            etag=f"{st.st_mtime_ns:x}-{st.st_size:x}",
            modified=datetime.fromtimestamp(st.st_mtime_ns / 1e9, UTC),
            content_type=None,
            sha256=sha256,
        )

    def put(
        self,
        key: str,
        data: Data,
        length: int | None = None,
        content_type: str = DEFAULT_CONTENT_TYPE,
    ) -> ObjectInfo:
        dest = self._path(key)
        self._tmp.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self._tmp, prefix="put-")
        try:
            digest = hashlib.sha256()
            size = 0
            with os.fdopen(fd, "wb", buffering=0) as out:
                for chunk in _iter_chunks(data):
                    digest.update(chunk)
                    view = memoryview(chunk)
                    while view:
                        view = view[out.write(view) :]
                    size += len(chunk)
                    if length is not None and size > length:
                        break
                if length is not None and size != length:
                    raise ValueError(
                        f"put {key!r}: expected {length} bytes, got {'more' if size > length else size}"
                    )
                os.fchmod(out.fileno(), 0o644)
                if self.fsync:
                    os.fsync(out.fileno())
                st = os.fstat(out.fileno())
            self._move_into_place(tmp, dest, key)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        return self._info(key, st, digest.hexdigest())

    def _move_into_place(self, tmp: str, dest: Path, key: str) -> None:
        # A concurrent delete may prune a folder of dest between our mkdir and our rename (or
        # inside makedirs): every such step just retries.
        for _ in range(100):
            try:
                os.makedirs(dest.parent, exist_ok=True)
                os.replace(tmp, dest)
            except FileNotFoundError:
                continue
            except (FileExistsError, NotADirectoryError, IsADirectoryError):
                self._raise_if_conflict(dest, key)
                continue
            if self.fsync:
                with contextlib.suppress(FileNotFoundError):
                    dir_fd = os.open(dest.parent, os.O_RDONLY)
                    try:
                        os.fsync(dir_fd)
                    finally:
                        os.close(dir_fd)
            return
        raise OSError(f"could not move {key!r} into place: its folder kept disappearing")

    def _raise_if_conflict(self, dest: Path, key: str) -> None:
        """ValueError when ``key`` cannot exist beside the objects already stored."""
        if dest.is_dir():
            raise ValueError(
                f"object key {key!r} conflicts with existing objects under {key + '/'!r} "
                "(the local store cannot hold both 'a' and 'a/b')"
            )
        folder = self.root
        for part in key.split("/")[:-1]:
            folder = folder / part
            try:
                mode = os.lstat(folder).st_mode
            except FileNotFoundError:
                return  # pruned meanwhile: the caller retries
            if not stat_mod.S_ISDIR(mode):
                raise ValueError(
                    f"object key {key!r} conflicts with the existing object "
                    f"{str(folder.relative_to(self.root))!r}, which would have to be a folder "
                    "(the local store cannot hold both 'a' and 'a/b')"
                )

    def open(self, key: str) -> ObjectReader:
        path = self._path(key)
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the reader
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotFound(key) from None
        st = os.fstat(f.fileno())
        if stat_mod.S_ISDIR(st.st_mode):
            f.close()
            raise NotFound(key)
        return ObjectReader(f, self._info(key, st))

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotFound(key) from None

    def stat(self, key: str) -> ObjectInfo:
        try:
            st = os.stat(self._path(key))
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(key) from None
        if not stat_mod.S_ISREG(st.st_mode):
            raise NotFound(key)
        return self._info(key, st)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        path = self._path(key)
        if path.is_dir():
            return
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            return
        # Prune folders left empty, up to the root; puts retry if they lose a race with this.
        parent = path.parent
        while parent != self.root and self.root in parent.parents:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        _validate_prefix(prefix)
        if prefix.split("/", 1)[0] == _TMP_DIR and "/" in prefix:
            return iter(())
        # Start in the deepest folder the prefix names; keys in it share that folder's path.
        base = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
        start = self.root.joinpath(*base.split("/")[:-1]) if base else self.root
        return self._walk(start, base, prefix)

    def _walk(self, folder: Path, key_prefix: str, prefix: str) -> Iterator[ObjectInfo]:
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            return
        # Sort as keys sort: a folder 'a' holds keys 'a/…', which sort after 'a-b' ('/' > '-').
        keyed = []
        for entry in entries:
            if not key_prefix and entry.name == _TMP_DIR:
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            name = key_prefix + entry.name + ("/" if is_dir else "")
            keyed.append((name, is_dir, entry))
        keyed.sort(key=lambda t: t[0])
        for name, is_dir, entry in keyed:
            if is_dir:
                if name.startswith(prefix) or prefix.startswith(name):
                    yield from self._walk(Path(entry.path), name, prefix)
            elif name.startswith(prefix):
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # deleted while listing
                    continue
                if stat_mod.S_ISREG(st.st_mode):
                    yield self._info(name, st)

    def put_content_addressed(self, data: bytes, prefix: str = "cas/") -> str:
        key = self.content_key(data, prefix)
        if not self._path(key).is_file():
            self.put(key, data)
        return key


# --------------------------------------------------------------------------------------------
# S3 (MinIO) through the minio SDK

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


# --------------------------------------------------------------------------------------------


def make_object_store(settings: Settings, **kwargs: Any) -> ObjectStore:
    """The store ``K3STACK_OBJECT_STORE_URL`` names: ``file://<dir>`` or ``http(s)://host:port``.

    Extra keyword arguments go to the backend's constructor.
    """
    from shared.settings import SettingsError

    url = settings.object_store_url or f"file://{settings.data_dir / 'objects'}"
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "file":
        path = unquote(url[len("file://") :])
        if not path:
            raise SettingsError(f"K3STACK_OBJECT_STORE_URL: file:// URL names no folder: {url!r}")
        return LocalObjectStore(Path(path).expanduser(), **kwargs)
    if scheme in ("http", "https"):
        if urlsplit(url).path not in ("", "/"):
            raise SettingsError(
                f"K3STACK_OBJECT_STORE_URL: {url!r} must be http(s)://host:port without a path; "
                "set the bucket with K3STACK_OBJECT_STORE_BUCKET"
            )
        return S3ObjectStore(
            url,
            access_key=settings.object_store_access_key,
            secret_key=settings.object_store_secret_key,
            bucket=settings.object_store_bucket,
            region=settings.object_store_region,
            **kwargs,
        )
    raise SettingsError(
        f"K3STACK_OBJECT_STORE_URL: unsupported object store URL {url!r}; "
        "use file://<dir> for a local folder or http(s)://host:port for an S3 server"
    )
