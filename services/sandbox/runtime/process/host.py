"""Host helpers of the process runtime: overlay mounts through libc, PID namespaces, process
states from ``/proc``, and OS errors in the guest's words.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno as errno_mod
import logging
import os
from pathlib import Path
from typing import Any

from services.sandbox.runtime.base import (
    GuestFileError,
    GuestFileNotFound,
    RuntimeUnavailable,
)

log = logging.getLogger("k3stack.sandbox.process")

_MS_RDONLY = 1
_MS_BIND = 4096
_MS_REC = 16384
_MNT_DETACH = 2

_libc: Any = None


def _libc_call() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def _mount_overlay(target: Path, lowers: list[Path], upper: Path, work: Path) -> None:
    opts = f"lowerdir={':'.join(str(p) for p in lowers)},upperdir={upper},workdir={work}"
    rc = _libc_call().mount(b"overlay", str(target).encode(), b"overlay", 0, opts.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise RuntimeUnavailable(
            f"cannot mount overlayfs at {target}: {os.strerror(err)} (the process runtime needs "
            "root and overlayfs; use the microvm runtime otherwise)"
        )


def _bind(source: Path, target: Path) -> None:
    rc = _libc_call().mount(
        str(source).encode(), str(target).encode(), None, _MS_BIND | _MS_REC, None
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise RuntimeUnavailable(f"cannot bind {source} at {target}: {os.strerror(err)}")


def _unbind(target: Path) -> None:
    """Detach whatever is mounted at ``target``; ``os.path.ismount`` misses a bind mount of a
    folder of the same file system, so this asks the kernel (``EINVAL`` where none is)."""
    _libc_call().umount2(str(target).encode(), _MNT_DETACH)


def _umount(target: Path) -> None:
    if os.path.ismount(target):
        _libc_call().umount2(str(target).encode(), _MNT_DETACH)


def _pid_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _ns_members(init_pid: int, ns: str) -> list[int]:
    """Host pids of the processes in the sandbox's PID namespace, except its init."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid != init_pid and _pid_ns(pid) == ns:
            out.append(pid)
    return out


def _proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2 : data.rindex(b")") + 3].decode()
    except (OSError, ValueError):
        return "?"


def _guest_errno(exc: OSError, gpath: str) -> GuestFileError:
    if isinstance(exc, FileNotFoundError):
        return GuestFileNotFound(f"{gpath}: no such file or directory", errno_mod.ENOENT, gpath)
    code = exc.errno or 0
    return GuestFileError(f"{gpath}: {os.strerror(code) if code else exc}", code, gpath)
