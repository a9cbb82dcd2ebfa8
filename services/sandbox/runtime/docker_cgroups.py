"""Per-command limits of ``docker`` sandboxes: each ``docker exec`` in its own pids cgroup
below its container's, so a fork bomb in one command stops at its own ``pids.max`` and the
next command still has room (the container's ``pids_limit`` bounds them all).

The container's cgroup is read from ``/proc/<container init>/cgroup`` (cgroup v1, any cgroup
driver). A command's cgroup ``k3scmd<n>`` gets ``pids_max - RESERVE`` processes. The exec is
started under a tiny in-container gate (``GATE``) that waits, without forking anything that
outlives it, until the host has moved it into that cgroup, and only then ``exec``s the command:
so everything the command forks is counted there. On cgroup v2 the container's cgroup holds
processes and may not get children with controllers; there the limits are off and commands
run ungated (``available`` says so).
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path

from services.sandbox.runtime.process.cgroups import RESERVE

V1_PIDS = Path("/sys/fs/cgroup/pids")
PREFIX = "k3scmd"
GATE = (
    f'i=0; until grep -q "{PREFIX}" /proc/$$/cgroup; do i=$((i+1)); '
    '[ $i -gt 3000 ] && { echo "k3stack: command not placed in its cgroup" >&2; exit 125; }; '
    'sleep 0.01; done; exec "$@"'
)


def container_cgroup(init_pid: int | None) -> Path | None:
    """The pids cgroup of the container whose init has host pid ``init_pid`` (v1), or None."""
    if not init_pid:
        return None
    try:
        lines = Path(f"/proc/{init_pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            cg = V1_PIDS / path.lstrip("/")
            return cg if (cg / "pids.max").exists() else None
    return None


class DockerCommandCgroups:
    """Creates, enters and removes the per-command cgroups of docker sandboxes."""

    def __init__(self, pids_max: int) -> None:
        self.pids_max = max(pids_max, RESERVE * 2)
        self._seq = itertools.count(1)

    def available(self) -> tuple[bool, str]:
        if not (V1_PIDS / "cgroup.procs").exists():
            return False, "no cgroup v1 pids hierarchy: per-command limits are off"
        return True, "per-command pids cgroups below each container's"

    def command(self, init_pid: int | None) -> Path | None:
        """A fresh cgroup for one command of the container (None when limits are off)."""
        parent = container_cgroup(init_pid)
        if parent is None:
            return None
        cg = parent / f"{PREFIX}{next(self._seq)}"
        try:
            cg.mkdir()
            (cg / "pids.max").write_text(str(self.pids_max - RESERVE))
        except OSError:
            self.release(cg)
            return None
        return cg

    @staticmethod
    def gated(cg: Path | None, argv: list[str]) -> list[str]:
        return argv if cg is None else ["/bin/sh", "-c", GATE, "sh", *argv]

    @staticmethod
    def enter(cg: Path, pid: int) -> bool:
        """Move the gated exec (host pid ``pid``) into ``cg``; False if that failed."""
        try:
            (cg / "cgroup.procs").write_text(str(pid))
        except OSError:
            return False
        return True

    @staticmethod
    def release(cg: Path | None) -> None:
        """Remove a command's cgroup once empty (a background child keeps it, and its limit)."""
        if cg is not None:
            with contextlib.suppress(OSError):
                cg.rmdir()

    def sweep(self, parent: Path | None) -> None:
        """The command cgroups left below a removed container's (their processes are gone)."""
        if parent is not None:
            for cg in parent.glob(f"{PREFIX}*"):
                self.release(cg)
