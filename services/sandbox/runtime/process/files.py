"""Files of a process sandbox, read and written from the host through its mount points, with guest
symlinks resolved inside the guest root.

A mixin of :class:`~services.sandbox.runtime.process.runtime.ProcessRuntime`; it uses the
runtime's ``root``, ``images_dir``, tools (``bwrap``, ``nsenter``, ``setpriv``) and ``_lock``.
"""

from __future__ import annotations

import errno as errno_mod
import os
import shutil
import stat as stat_mod
from collections import deque
from collections.abc import Iterator
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
from services.sandbox.runtime.process.host import (
    _guest_errno,
)

CHUNK = 256 * 1024
"""Bytes per chunk of a streamed read."""


class FilesMixin(Runtime):
    """read, write, list, stat, remove, make_dir."""

    # -- files

    def _host(self, h: VMHandle, gpath: str, follow_last: bool = True) -> Path:
        """Host path of guest path ``gpath``; symlinks are resolved inside the guest root."""
        self._check_alive(h)
        mnt = Path(h.workdir) / "mnt"
        parts: deque[str] = deque(p for p in normalize_guest_path(gpath).split("/") if p)
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.popleft()
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = [*resolved, part]
            host = self._map(mnt, candidate)
            if (parts or follow_last) and host.is_symlink():
                hops += 1
                if hops > 40:
                    raise GuestFileError(f"{gpath}: too many levels of symbolic links",
                                         errno_mod.ELOOP, gpath)  # fmt: skip
                target = os.readlink(host)
                if target.startswith("/"):
                    resolved = []
                parts.extendleft(reversed([p for p in target.split("/") if p]))
                continue
            resolved = candidate
        return self._map(mnt, resolved)

    @staticmethod
    def _map(mnt: Path, parts: list[str]) -> Path:
        if parts and parts[0] == "usr":
            return mnt.joinpath("usr", *parts[1:])
        return mnt.joinpath("root", *parts)

    @staticmethod
    def _info(gpath: str, host: Path) -> FileInfo:
        st = os.lstat(host)
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
        gpath = normalize_guest_path(path)
        host = self._host(h, gpath)
        try:
            if host.is_dir():
                raise GuestFileError(f"{gpath}: is a directory", errno_mod.EISDIR, gpath)
            with open(host, "rb") as fh:
                data = fh.read() if limit is None else fh.read(limit + 1)
            if limit is not None and len(data) > limit:
                raise GuestFileTooLarge(
                    f"{gpath} is larger than {limit} bytes", errno_mod.EFBIG, gpath
                )
            return data
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def read_file_stream(self, h: VMHandle, path: str, limit: int | None = None) -> Iterator[bytes]:
        gpath = normalize_guest_path(path)
        host = self._host(h, gpath)
        sent = 0
        try:
            if host.is_dir():
                raise GuestFileError(f"{gpath}: is a directory", errno_mod.EISDIR, gpath)
            with open(host, "rb") as fh:
                while chunk := fh.read(CHUNK):
                    sent += len(chunk)
                    if limit is not None and sent > limit:
                        raise GuestFileTooLarge(
                            f"{gpath} is larger than {limit} bytes", errno_mod.EFBIG, gpath
                        )
                    yield chunk
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def write_file(self, h: VMHandle, path: str, data: bytes, mode: int = 0o644) -> FileInfo:
        gpath = normalize_guest_path(path)
        if gpath == "/":
            raise GuestPathError("cannot write to '/'")
        host = self._host(h, gpath)
        try:
            parent = self._host(h, gpath.rsplit("/", 1)[0] or "/")
            parent.mkdir(parents=True, exist_ok=True)
            if host.is_dir():
                raise GuestFileError(f"{gpath}: is a directory", errno_mod.EISDIR, gpath)
            fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(host, mode)
            return self._info(gpath, host)
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def list_dir(self, h: VMHandle, path: str) -> list[FileInfo]:
        gpath = normalize_guest_path(path)
        host = self._host(h, gpath)
        try:
            if not host.is_dir():
                if not host.exists():
                    raise FileNotFoundError(gpath)
                raise GuestFileError(f"{gpath}: not a directory", errno_mod.ENOTDIR, gpath)
            names = sorted(os.listdir(host))
            base = gpath.rstrip("/")
            return [self._info(f"{base}/{n}", host / n) for n in names if (host / n).exists()
                    or (host / n).is_symlink()]  # fmt: skip
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def stat(self, h: VMHandle, path: str) -> FileInfo:
        gpath = normalize_guest_path(path)
        try:
            return self._info(gpath, self._host(h, gpath, follow_last=False))
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def remove(self, h: VMHandle, path: str, recursive: bool = False) -> None:
        gpath = normalize_guest_path(path)
        if gpath in ("/", "/usr"):
            raise GuestPathError(f"refusing to remove {gpath!r}")
        host = self._host(h, gpath, follow_last=False)
        try:
            if host.is_dir() and not host.is_symlink():
                if recursive:
                    shutil.rmtree(host)
                else:
                    os.rmdir(host)
            else:
                os.unlink(host)
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc

    def make_dir(self, h: VMHandle, path: str) -> FileInfo:
        gpath = normalize_guest_path(path)
        host = self._host(h, gpath)
        try:
            host.mkdir(parents=True, exist_ok=True)
            return self._info(gpath, host)
        except OSError as exc:
            raise _guest_errno(exc, gpath) from exc
