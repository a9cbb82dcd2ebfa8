"""The local-directory backend: atomic writes through a staging folder, a recursive sorted list."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat as stat_mod
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from shared.objectstore.base import (
    DEFAULT_CONTENT_TYPE,
    Data,
    NotFound,
    ObjectInfo,
    ObjectReader,
    ObjectStore,
    _iter_chunks,
    _unlink_quietly,
    _validate_prefix,
    validate_key,
)

if TYPE_CHECKING:
    pass


_TMP_DIR = ".k3stack-tmp"  # staging folder for atomic writes, under the root; not a valid key


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
