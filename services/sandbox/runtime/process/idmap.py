"""Idmapped bind mounts: a sandbox's layers seen as owned by its own host uid.

Every file a process sandbox owns is stored as one canonical uid, the runtime's ``guest_uid``
(images, template layers, upper directories, checkpoints). Each running sandbox gets its own
uid (:mod:`~.uids`); its overlay is built from idmapped binds of those layers, in which the
canonical uid shows as the sandbox's uid (root stays root, so the overlay's own work files
can be made). So the guest owns its tree, what it writes lands on disk as the canonical uid
(checkpoints, forks and templates stay uid-free), and no two sandboxes share a host uid.

Kernel calls (Linux >= 5.12, overlayfs over idmapped layers >= 5.19): ``open_tree`` clones
the folder's mount, ``mount_setattr(MOUNT_ATTR_IDMAP)`` gives it the mapping of a user
namespace made for it, ``move_mount`` attaches it where overlayfs can name it. Overlayfs keeps
private clones of its layers, so the binds are detached again once the overlay is mounted.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from services.sandbox.runtime.base import RuntimeUnavailable
from services.sandbox.runtime.process.host import _libc_call, _unbind

_CALLS = {"x86_64": (428, 429, 442), "aarch64": (428, 429, 442)}
"""open_tree, move_mount, mount_setattr (the same numbers on both)."""
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 1, 0o2000000
_AT_FDCWD, _AT_EMPTY_PATH = -100, 0x1000
_MOVE_MOUNT_F_EMPTY_PATH = 4
_MOUNT_ATTR_IDMAP = 0x00100000


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]  # fmt: skip


@contextlib.contextmanager
def mapping(canonical: int, uid: int) -> Iterator[int]:
    """An fd of a user namespace mapping uid/gid ``canonical`` to ``uid`` (and 0 to 0): made by
    a short-lived ``unshare -U`` child whose maps the service writes, closed on exit."""
    child = subprocess.Popen(
        ["unshare", "-U", "--", "cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    try:
        own = os.readlink("/proc/self/ns/user")
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{child.pid}/ns/user") == own:
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeUnavailable("cannot make a user namespace for an idmapped mount")
            time.sleep(0.002)
        lines = f"0 0 1\n{canonical} {uid} 1\n"
        Path(f"/proc/{child.pid}/uid_map").write_text(lines)
        Path(f"/proc/{child.pid}/setgroups").write_text("deny")
        Path(f"/proc/{child.pid}/gid_map").write_text(lines)
        fd = os.open(f"/proc/{child.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        if child.stdin:
            child.stdin.close()
        child.wait(timeout=10)
    try:
        yield fd
    finally:
        os.close(fd)


def bind(source: Path, target: Path, userns_fd: int) -> Path:
    """``source`` bound at ``target`` (made here) through the mapping of ``userns_fd``."""
    open_tree, move_mount, mount_setattr = _CALLS.get(platform.machine(), _CALLS["x86_64"])
    libc = _libc_call()
    target.mkdir(parents=True, exist_ok=True)
    fd = libc.syscall(open_tree, _AT_FDCWD, str(source).encode(),
                      _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC)  # fmt: skip
    if fd < 0:
        raise _failed("open_tree", source)
    try:
        attr = _MountAttr(_MOUNT_ATTR_IDMAP, 0, 0, userns_fd)
        if libc.syscall(mount_setattr, fd, b"", _AT_EMPTY_PATH, ctypes.byref(attr),
                        ctypes.sizeof(attr)) != 0:  # fmt: skip
            raise _failed("mount_setattr(MOUNT_ATTR_IDMAP)", source)
        if libc.syscall(move_mount, fd, b"", _AT_FDCWD, str(target).encode(),
                        _MOVE_MOUNT_F_EMPTY_PATH) != 0:  # fmt: skip
            raise _failed("move_mount", target)
    finally:
        os.close(fd)
    return target


def unbind_all(folder: Path) -> None:
    """Detach the binds under ``folder`` (made by :func:`bind`) and remove it."""
    if not folder.is_dir():
        return
    for entry in sorted(folder.iterdir()):
        _unbind(entry)
        with contextlib.suppress(OSError):
            entry.rmdir()  # never recursive: a bind still there must stay whole
    with contextlib.suppress(OSError):
        folder.rmdir()


def _failed(call: str, path: Path) -> RuntimeUnavailable:
    err = ctypes.get_errno()
    return RuntimeUnavailable(
        f"{call} on {path} failed: {os.strerror(err)} (the process runtime gives each sandbox "
        "its own uid through idmapped mounts: Linux >= 5.19 and CAP_SYS_ADMIN)"
    )
