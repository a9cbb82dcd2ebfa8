"""Guest paths opened beneath host folders without a race: the one way the host touches a
guest's files (reads, writes, mkdir of parents, listings, stats, removals).

Resolving a path string, then opening it, lets a guest swap a directory for a symlink to a host
folder in between (``renameat2(RENAME_EXCHANGE)``) and the host reads or writes the host file.
Here every step works on directory file descriptors and never lets the kernel follow a symlink:

* **fast path**, one kernel call: ``openat2(mount, rel, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``
  opens the parent directory of a path that has no symlink on the way (the common case);
* **walk**, when the path has a symlink (``ELOOP``) or ``openat2`` is missing (kernel < 5.6):
  one ``openat(dirfd, name, O_PATH | O_NOFOLLOW)`` per component. A symlink met on the way is
  read from its own fd and resolved *as the guest sees it* (absolute targets from the guest
  root, ``..`` back through the directories walked, the guest's mount points such as ``/usr``
  switching folders), since users expect the files API to agree with ``cat`` in the sandbox.
  No target ever leaves the guest tree, because the host never asks the kernel to follow it.

The object found is held as an ``O_PATH`` fd; it is checked (a regular file, a directory), then
reopened through ``/proc/self/fd`` for I/O, so what is read or written is the object checked,
whatever the guest renames meanwhile.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat as stat_mod
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(os.uname().machine)
"""``openat2`` has the same number on every architecture that has it (asm-generic)."""
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
MAX_HOPS = 40
"""Symlinks followed in one path before ELOOP (the kernel's own bound)."""
_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_openat2_works = SYS_OPENAT2 is not None


def openat2_beneath(dirfd: int, rel: str, flags: int) -> int:
    """``openat2`` of ``rel`` beneath ``dirfd`` following no symlink at all (``OSError`` as
    ``os.open`` raises it; ``ENOSYS`` when the kernel lacks the call)."""
    global _openat2_works
    if not _openat2_works:
        raise OSError(errno.ENOSYS, "openat2 is not available")
    how = _OpenHow(
        flags | os.O_CLOEXEC, 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
    )
    fd = _libc.syscall(SYS_OPENAT2, dirfd, os.fsencode(rel), ctypes.byref(how),
                       ctypes.c_size_t(ctypes.sizeof(how)))  # fmt: skip
    if fd < 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM):  # old kernel, or a seccomp filter refusing it
            _openat2_works = False
            err = errno.ENOSYS
        raise OSError(err, os.strerror(err), rel)
    return int(fd)


def _readlink_fd(fd: int) -> str:
    """Target of the symlink held by ``O_PATH`` fd ``fd`` (``readlinkat(fd, "")``)."""
    buf = ctypes.create_string_buffer(4096)
    n = _libc.readlinkat(fd, b"", buf, len(buf))
    if n < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return os.fsdecode(buf.raw[:n])


def reopen(fd: int, flags: int) -> int:
    """A real fd on the object ``O_PATH`` fd ``fd`` holds (the same inode, never a lookup)."""
    return os.open(f"/proc/self/fd/{fd}", flags | os.O_CLOEXEC)


@dataclass
class Found:
    """Where a guest path led: ``parent`` (dir fd) and ``name`` of its last component, and
    ``fd`` (``O_PATH``) of the object, ``None`` when nothing is there. ``name`` is ``None``
    when the object is a mount point or was reached through ``.``/``..`` (no entry to name)."""

    parent: int
    name: str | None
    fd: int | None
    _owned: list[int] = field(default_factory=list)

    def stat(self) -> os.stat_result:
        if self.fd is None:
            raise FileNotFoundError(errno.ENOENT, "no such file or directory")
        return os.fstat(self.fd)


class GuestTree:
    """A guest's files on the host: ``mounts`` maps guest mount points (``"/"`` required) to
    host folders, e.g. ``{"/": mnt/root, "/usr": mnt/usr}``."""

    def __init__(self, mounts: dict[str, Path]) -> None:
        if "/" not in mounts:
            raise ValueError("a guest tree needs a folder for '/'")
        self.mounts = {k.rstrip("/") or "/": Path(v) for k, v in mounts.items()}

    @contextmanager
    def find(
        self, gpath: str, follow: bool = True, create_parents: bool = False
    ) -> Iterator[Found]:
        """Resolve normalised absolute guest path ``gpath`` (see the module doc); ``follow``
        follows a symlink in the last component too; ``create_parents`` makes missing
        directories on the way (0755). Every fd is closed on exit."""
        owned: list[int] = []
        try:
            found = self._fast(gpath, follow, create_parents, owned)
            if found is None:
                found = self._walk(gpath, follow, create_parents, owned)
            found._owned = owned
            yield found
        finally:
            for fd in owned:
                with suppress(OSError):
                    os.close(fd)

    def open_read(self, gpath: str) -> int:
        """A read fd on guest file ``gpath``: regular files and FIFOs (a FIFO with no writer
        reads as empty); directories (``EISDIR``) and device nodes (``EINVAL``) are refused."""
        with self.find(gpath) as found:
            mode = found.stat().st_mode
            if stat_mod.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            if not (stat_mod.S_ISREG(mode) or stat_mod.S_ISFIFO(mode)):
                raise OSError(errno.EINVAL, "not a regular file")
            assert found.fd is not None
            fd = reopen(found.fd, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        os.set_blocking(fd, True)
        return fd

    def open_write(self, gpath: str, mode: int) -> int:
        """A write fd on guest file ``gpath``, truncated: an existing regular file in place
        (inode, owner and links stay), else a new one (``O_EXCL``: never something swapped in),
        its missing parents made. Directories and anything not a regular file are refused."""
        with self.find(gpath, create_parents=True) as found:
            if found.name is None or (found.fd is not None and
                                      stat_mod.S_ISDIR(found.stat().st_mode)):  # fmt: skip
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
            if found.fd is None:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                return os.open(found.name, flags, mode, dir_fd=found.parent)
            if not stat_mod.S_ISREG(found.stat().st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            return reopen(found.fd, os.O_WRONLY | os.O_TRUNC)

    def make_dirs(self, gpath: str) -> os.stat_result:
        """``mkdir -p`` of guest path ``gpath`` beneath the tree (``EEXIST`` when something
        other than a directory is there); the stat of the directory."""
        with self.find(gpath, create_parents=True) as found:
            if found.fd is None:
                assert found.name is not None
                with suppress(FileExistsError):
                    os.mkdir(found.name, 0o755, dir_fd=found.parent)
                return os.stat(found.name, dir_fd=found.parent, follow_symlinks=False)
            st = found.stat()
            if not stat_mod.S_ISDIR(st.st_mode):
                raise FileExistsError(errno.EEXIST, "exists and is not a directory")
            return st

    # ------------------------------------------------------------------ resolution

    def _mount_of(self, parts: list[str]) -> tuple[int, str] | None:
        """(index, mount point) of the deepest mount point that ``parts`` is below or at."""
        for i in range(len(parts), -1, -1):
            mp = "/" + "/".join(parts[:i])
            if mp in self.mounts:
                return i, mp
        return None

    def _open_root(self, mp: str, owned: list[int]) -> int:
        fd = os.open(self.mounts[mp], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        owned.append(fd)
        return fd

    def _fast(self, gpath: str, follow: bool, create: bool, owned: list[int]) -> Found | None:
        """One ``openat2`` for the parent directory; ``None`` sends the caller to the walk."""
        parts = [p for p in gpath.split("/") if p]
        if not parts or "/" + "/".join(parts) in self.mounts or ".." in parts:
            return None
        found = self._mount_of(parts[:-1])
        assert found is not None  # "/" is always a mount
        i, mp = found
        root = self._open_root(mp, owned)
        rel = "/".join(parts[i:-1]) or "."
        try:
            parent = openat2_beneath(root, rel, os.O_PATH | os.O_DIRECTORY)
        except OSError as exc:
            if exc.errno in (errno.ENOSYS, errno.ELOOP, errno.EXDEV, errno.EAGAIN):
                return None
            if exc.errno == errno.ENOENT and create:
                return None
            raise
        owned.append(parent)
        try:
            fd = os.open(parts[-1], _PATH, dir_fd=parent)
        except FileNotFoundError:
            return Found(parent, parts[-1], None)
        owned.append(fd)
        if follow and stat_mod.S_ISLNK(os.fstat(fd).st_mode):
            return None
        return Found(parent, parts[-1], fd)

    def _walk(self, gpath: str, follow: bool, create: bool, owned: list[int]) -> Found:
        """Component by component from the guest root, no symlink followed by the kernel."""
        todo: deque[str] = deque(p for p in gpath.split("/") if p)
        names: list[str] = []  # guest path walked so far
        fds: list[int] = [self._open_root("/", owned)]  # fds[i]: directory at names[:i]
        hops = 0
        while todo:
            part = todo.popleft()
            if part in ("", "."):
                continue
            if part == "..":
                if names:
                    names.pop()
                    fds.pop()
                continue
            last = not todo
            here = [*names, part]
            if "/" + "/".join(here) in self.mounts:
                fd = self._open_root("/" + "/".join(here), owned)
            else:
                try:
                    fd = os.open(part, _PATH, dir_fd=fds[-1])
                except FileNotFoundError:
                    if last:
                        return Found(fds[-1], part, None)
                    if not create:
                        raise
                    with suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fds[-1])
                    fd = os.open(part, _PATH, dir_fd=fds[-1])
                owned.append(fd)
            mode = os.fstat(fd).st_mode
            if stat_mod.S_ISLNK(mode) and (follow or not last):
                hops += 1
                if hops > MAX_HOPS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                target = _readlink_fd(fd)
                if target.startswith("/"):
                    del names[:], fds[1:]
                todo.extendleft(reversed([p for p in target.split("/") if p]))
                continue
            if last:
                named = part if len(here) and "/" + "/".join(here) not in self.mounts else None
                return Found(fds[-1], named, fd)
            if not stat_mod.S_ISDIR(mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
            names.append(part)
            fds.append(fd)
        # the path ended on '/', '.' or '..': the directory reached, no entry to name
        return Found(fds[-2] if len(fds) > 1 else fds[-1], None, fds[-1])
