"""The object store interface: :class:`ObjectStore` (the ABC both backends implement), key
validation, :class:`ObjectInfo`, :class:`NotFound` and the streams that read and check data.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    pass


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


def _unlink_quietly(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
