"""Overlay upper directories as checkpoint trees: the walk, one entry per object (whiteouts and
opaque directories included), and the keys that say whether a file changed since it was stored.
"""

from __future__ import annotations

import os
import stat as stat_mod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OVERLAYS: dict[str, str] = {"root": "/", "usr": "/usr"}
"""Overlay name -> guest mount point. Each has its own upper directory and checkpoint tree."""

_OPAQUE_XATTR = "trusted.overlay.opaque"


def _walk_upper(upper: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, lstat) of everything under ``upper``, parents before children."""
    stack = [""]
    while stack:
        rel = stack.pop()
        base = upper / rel if rel else upper
        try:
            entries = sorted(os.scandir(base), key=lambda e: e.name)
        except FileNotFoundError:
            continue
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            yield path, st
            if stat_mod.S_ISDIR(st.st_mode):
                stack.append(path)


def _entry(upper: Path, rel: str, st: os.stat_result) -> dict[str, Any]:
    """Checkpoint tree entry of one upper-dir object (blob key filled in by the caller)."""
    mode = st.st_mode
    e: dict[str, Any] = {
        "p": rel,
        "m": stat_mod.S_IMODE(mode),
        "u": st.st_uid,
        "g": st.st_gid,
        "mt": st.st_mtime_ns,
    }
    full = upper / rel
    if stat_mod.S_ISDIR(mode):
        e["t"] = "d"
        try:
            if os.getxattr(full, _OPAQUE_XATTR, follow_symlinks=False) == b"y":
                e["o"] = 1
        except OSError:
            pass
    elif stat_mod.S_ISREG(mode):
        e["t"] = "f"
        e["s"] = st.st_size
    elif stat_mod.S_ISLNK(mode):
        e["t"] = "l"
        e["l"] = os.readlink(full)
    elif stat_mod.S_ISCHR(mode) and st.st_rdev == 0:
        e["t"] = "w"  # overlayfs whiteout: the file is deleted in this layer
    elif stat_mod.S_ISFIFO(mode):
        e["t"] = "p"
    else:
        e["t"] = "x"  # sockets and device nodes are not carried over
    return e


def _local_key(st: os.stat_result) -> list[int]:
    """What must be unchanged for a file's stored blob to still be its content."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _signature(st: os.stat_result) -> list[int]:
    """Changes whenever the object or (for a directory) its entries change."""
    return [st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _upper_signature(workdir: Path) -> dict[str, list[int]]:
    return {
        f"{ov}/{rel}": _signature(st)
        for ov in OVERLAYS
        for rel, st in _walk_upper(workdir / "upper" / ov)
    }
