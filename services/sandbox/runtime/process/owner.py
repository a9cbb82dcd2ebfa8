"""The service's file operations on a process sandbox done as the sandbox's user: each call of
the files API runs with the thread's file-system uid and gid set to the guest's unprivileged host
uid, the sandbox's own (:func:`~.confine.as_guest_owner`), so a file or folder the API creates belongs to the guest's
root (the sandbox may change it later) and the API writes only where that user may.

A mixin of :class:`~services.sandbox.runtime.process.runtime.ProcessRuntime`, placed before the
files mixin: it wraps whatever that one implements, without depending on how it resolves paths.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from services.sandbox.runtime.base import FileInfo, Runtime, VMHandle
from services.sandbox.runtime.process.confine import as_guest_owner


class GuestOwnerMixin(Runtime):
    """read, write, list, stat, remove, make_dir as the guest's user."""

    guest_uid: int

    def _as_guest(self, h: VMHandle) -> Any:
        uid = int(h.data.get("guest_uid") or self.guest_uid)  # a handle of before per-sandbox uids
        return as_guest_owner(uid, uid)

    def read_file(self, h: VMHandle, path: str, limit: int | None = None) -> bytes:
        with self._as_guest(h):
            return super().read_file(h, path, limit)

    def read_file_stream(self, h: VMHandle, path: str, limit: int | None = None) -> Iterator[bytes]:
        chunks = super().read_file_stream(h, path, limit)
        while True:  # each step as the guest: a generator may resume on another thread
            with self._as_guest(h):
                chunk = next(chunks, None)
            if chunk is None:
                return
            yield chunk

    def write_file(self, h: VMHandle, path: str, data: bytes, mode: int = 0o644) -> FileInfo:
        with self._as_guest(h):
            return super().write_file(h, path, data, mode)

    def write_file_stream(self, h: VMHandle, path: str, chunks: Any, *args: Any, **kw: Any) -> Any:
        with self._as_guest(h):
            return super().write_file_stream(h, path, chunks, *args, **kw)

    def list_dir(self, h: VMHandle, path: str) -> list[FileInfo]:
        with self._as_guest(h):
            return super().list_dir(h, path)

    def stat(self, h: VMHandle, path: str) -> FileInfo:
        with self._as_guest(h):
            return super().stat(h, path)

    def remove(self, h: VMHandle, path: str, recursive: bool = False) -> None:
        with self._as_guest(h):
            super().remove(h, path, recursive)

    def make_dir(self, h: VMHandle, path: str) -> FileInfo:
        with self._as_guest(h):
            return super().make_dir(h, path)
