"""Files of a process sandbox, read and written from the host through its overlay mounts, every
path resolved beneath the guest tree without a race (:mod:`services.sandbox.runtime.beneath`):
a guest that swaps a directory for a symlink to a host folder mid-request gets an error, never
a host file.

A mixin of :class:`~services.sandbox.runtime.process.runtime.ProcessRuntime`; it uses the
runtime's ``_check_alive``.
"""

from __future__ import annotations

import errno as errno_mod
import os
import shutil
import stat as stat_mod
from collections.abc import Iterable, Iterator
from pathlib import Path

from services.sandbox.runtime.base import (
    FileInfo,
    GuestFileError,
    GuestFileTooLarge,
    GuestPathError,
    Runtime,
    VMHandle,
    normalize_guest_path,
)
from services.sandbox.runtime.beneath import GuestTree, reopen
from services.sandbox.runtime.process.fstree import OVERLAYS
from services.sandbox.runtime.process.host import (
    _guest_errno,
)

CHUNK = 256 * 1024
"""Bytes per chunk of a streamed read."""


def _error(exc: OSError, gpath: str) -> GuestFileError:
    """The guest's words for ``exc``; a refusal of the resolver keeps its own reason."""
    if exc.errno == errno_mod.EINVAL and exc.strerror:  # e.g. "not a regular file"
        return GuestFileError(f"{gpath}: {exc.strerror}", errno_mod.EINVAL, gpath)
    return _guest_errno(exc, gpath)


class FilesMixin(Runtime):
    """read, write, list, stat, remove, make_dir."""

    def _tree(self, h: VMHandle) -> GuestTree:
        """The sandbox's guest tree: each overlay's mount folder at its guest mount point."""
        self._check_alive(h)
        mnt = Path(h.workdir) / "mnt"
        return GuestTree({point: mnt / name for name, point in OVERLAYS.items()})

    @staticmethod
    def _info(gpath: str, st: os.stat_result) -> FileInfo:
        return FileInfo(
            path=gpath,
            name=gpath.rsplit("/", 1)[-1] or "/",
            size=st.st_size,
            mode=stat_mod.S_IMODE(st.st_mode),
            is_dir=stat_mod.S_ISDIR(st.st_mode),
            is_symlink=stat_mod.S_ISLNK(st.st_mode),
            mtime=st.st_mtime,
        )

    def read_file(self, h: VMHandle, path: str, limit: int | None = None) -> bytes:
        return b"".join(self.read_file_stream(h, path, limit))

    def read_file_stream(self, h: VMHandle, path: str, limit: int | None = None) -> Iterator[bytes]:
        gpath = normalize_guest_path(path)
        sent = 0
        try:
            with os.fdopen(self._tree(h).open_read(gpath), "rb") as fh:
                while chunk := fh.read(CHUNK):
                    sent += len(chunk)
                    if limit is not None and sent > limit:
                        raise GuestFileTooLarge(
                            f"{gpath} is larger than {limit} bytes", errno_mod.EFBIG, gpath
                        )
                    yield chunk
        except OSError as exc:
            raise _error(exc, gpath) from exc

    def write_file(self, h: VMHandle, path: str, data: bytes, mode: int = 0o644) -> FileInfo:
        return self.write_file_stream(h, path, [data], mode)

    def write_file_stream(
        self, h: VMHandle, path: str, chunks: Iterable[bytes], mode: int = 0o644
    ) -> FileInfo:
        """Replace the file's contents in place (its inode, owner and links stay), creating it
        and its parents when missing (:meth:`GuestTree.open_write`)."""
        gpath = normalize_guest_path(path)
        if gpath == "/":
            raise GuestPathError("cannot write to '/'")
        try:
            fd = self._tree(h).open_write(gpath, mode)
            with os.fdopen(fd, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
                f.flush()
                os.fchmod(fd, mode)
                return self._info(gpath, os.fstat(fd))
        except OSError as exc:
            raise _error(exc, gpath) from exc

    def list_dir(self, h: VMHandle, path: str) -> list[FileInfo]:
        gpath = normalize_guest_path(path)
        base = gpath.rstrip("/")
        try:
            with self._tree(h).find(gpath) as found:
                if not stat_mod.S_ISDIR(found.stat().st_mode):
                    raise GuestFileError(f"{gpath}: not a directory", errno_mod.ENOTDIR, gpath)
                assert found.fd is not None
                dfd = reopen(found.fd, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    names = sorted(os.listdir(dfd))
                finally:
                    os.close(dfd)
                out = []
                for name in names:
                    try:
                        st = os.stat(name, dir_fd=found.fd, follow_symlinks=False)
                    except FileNotFoundError:  # removed meanwhile
                        continue
                    out.append(self._info(f"{base}/{name}", st))
                return out
        except OSError as exc:
            raise _error(exc, gpath) from exc

    def stat(self, h: VMHandle, path: str) -> FileInfo:
        gpath = normalize_guest_path(path)
        try:
            with self._tree(h).find(gpath, follow=False) as found:
                return self._info(gpath, found.stat())
        except OSError as exc:
            raise _error(exc, gpath) from exc

    def remove(self, h: VMHandle, path: str, recursive: bool = False) -> None:
        gpath = normalize_guest_path(path)
        if gpath in ("/", *OVERLAYS.values()):
            raise GuestPathError(f"refusing to remove {gpath!r}")
        try:
            with self._tree(h).find(gpath, follow=False) as found:
                if found.name is None:
                    raise GuestPathError(f"refusing to remove {gpath!r} (a mount point)")
                if not stat_mod.S_ISDIR(found.stat().st_mode):
                    os.unlink(found.name, dir_fd=found.parent)
                elif recursive:  # fd-based: never follows a symlink swapped in meanwhile
                    shutil.rmtree(found.name, dir_fd=found.parent)
                else:
                    os.rmdir(found.name, dir_fd=found.parent)
        except OSError as exc:
            raise _error(exc, gpath) from exc

    def make_dir(self, h: VMHandle, path: str) -> FileInfo:
        gpath = normalize_guest_path(path)
        try:
            return self._info(gpath, self._tree(h).make_dirs(gpath))
        except OSError as exc:
            raise _error(exc, gpath) from exc
