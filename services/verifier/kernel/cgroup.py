"""One cgroup (v2) per sandboxed implementation: the CPU of every process and thread in it.

Per-thread accounting of one process misses a process the candidate forks, a helper it starts
and threads that ended; a cgroup the sandbox is started in keeps them all: ``cpu.stat``'s
``usage_usec`` counts every task that ever ran in it, ended ones included, and ``cgroup.procs``
lists every process in it (a process cannot leave a cgroup it has no write access to, and the
sandbox drops every capability). Where no cgroup v2 hierarchy is writable (an unprivileged
container), :func:`make_group` returns None and the runner falls back to the sandbox's process
tree, where ended processes show only in their reaper's children's ticks.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path


def _own_group() -> Path | None:
    """This process's cgroup v2 directory, if a cgroup2 hierarchy is mounted."""
    mount = None
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 2 and fields[2] == "cgroup2":
                    mount = Path(fields[1])
                    break
        with open("/proc/self/cgroup") as f:
            rel = next((ln.split(":", 2)[2].strip() for ln in f if ln.startswith("0::")), None)
    except OSError:
        return None
    if mount is None or rel is None:
        return None
    return mount / rel.lstrip("/")


class Group:
    """A fresh cgroup under this process's own; the sandbox's launcher joins it before exec."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def join_self(self) -> None:
        """Called in the child between fork and exec (everything it starts stays in here)."""
        with open(self.path / "cgroup.procs", "w") as f:
            f.write("0")

    def usage_ns(self) -> int:
        try:
            with open(self.path / "cpu.stat") as f:
                for line in f:
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) * 1000
        except (OSError, ValueError):
            pass
        return 0

    def pids(self) -> list[int]:
        try:
            with open(self.path / "cgroup.procs") as f:
                return [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            return []

    def close(self, timeout_s: float = 10.0) -> None:
        """Kill what is left in it and remove it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            left = self.pids()
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        try:
            self.path.rmdir()
        except OSError:
            pass


def make_group(name: str) -> Group | None:
    """A new cgroup for one sandbox, or None where none can be made here."""
    own = _own_group()
    if own is None:
        return None
    path = own / f"k3s-{name}-{secrets.token_hex(4)}"
    try:
        path.mkdir()
    except OSError:
        return None
    group = Group(path)
    if not (path / "cgroup.procs").exists() or not (path / "cpu.stat").exists():
        group.close()
        return None
    return group
