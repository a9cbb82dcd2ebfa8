"""Per-command limits of ``docker`` sandboxes: each ``docker exec`` in its own pids, memory
and cpu cgroups below its container's, so a fork bomb or a memory hog in one command is
stopped at its own limit (the memory hog killed by the kernel's OOM killer, inside its own
cgroup) and the next command still has room (the container's ``pids_limit`` and ``mem_limit``
bound them all) and an equal share of the container's CPU (a spinning bomb does not slow it
down by its number of processes).

The container's cgroups are read from ``/proc/<container init>/cgroup`` (cgroup v1, any cgroup
driver). A command's cgroups ``k3scmd<n>`` get ``pids_max - RESERVE`` processes and three
quarters of the container's memory (``MEMORY_SHARE``; no swap on top where the kernel accounts
it). The exec is started under a tiny in-container gate (``_gate``) that waits, without forking
anything that outlives it, until the host has moved it into every one of them, and only then
``exec``s the command: so everything the command forks or allocates is counted there. On
cgroup v2 the container's cgroup holds processes and may not get children with controllers;
there the limits are off and commands run ungated (``available`` says so).
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path

from services.sandbox.runtime.process.cgroups import RESERVE

V1 = Path("/sys/fs/cgroup")
V1_PIDS = V1 / "pids"
PREFIX = "k3scmd"
CONTROLLERS = ("memory", "cpu", "pids")
"""Entered in this order; the gate waits until the command is in all it was given."""
MEMORY_SHARE = 0.75
"""Of the container's memory, what one command may use: the rest is the next command's."""
COMMAND_OOM_SCORE_ADJ = 500
"""Added to every command's OOM badness (the keepalive keeps 0): see ``enter``."""
_LIMIT_FILE = {"pids": "pids.max", "memory": "memory.limit_in_bytes", "cpu": "cpu.shares"}
_UNLIMITED = 1 << 60


def _gate(n: int) -> str:
    return (
        f'i=0; until [ "$(grep -c "{PREFIX}" /proc/$$/cgroup)" -ge {n} ]; do i=$((i+1)); '
        '[ $i -gt 3000 ] && { echo "k3stack: command not placed in its cgroups" >&2; exit 125; }; '
        'sleep 0.01; done; exec "$@"'
    )


def container_cgroups(init_pid: int | None) -> dict[str, Path]:
    """The v1 cgroups (``CONTROLLERS`` only) of the container whose init has host pid
    ``init_pid``, by controller; empty when there are none."""
    if not init_pid:
        return {}
    try:
        lines = Path(f"/proc/{init_pid}/cgroup").read_text().splitlines()
    except OSError:
        return {}
    out: dict[str, Path] = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in CONTROLLERS:
            if name in controllers.split(","):
                cg = V1 / name / path.lstrip("/")
                if (cg / _LIMIT_FILE[name]).exists():
                    out[name] = cg
    return out


def container_cgroup(init_pid: int | None) -> Path | None:
    """The pids cgroup of the container whose init has host pid ``init_pid`` (v1), or None."""
    return container_cgroups(init_pid).get("pids")


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


class DockerCommandCgroups:
    """Creates, enters and removes the per-command cgroups of docker sandboxes."""

    def __init__(self, pids_max: int) -> None:
        self.pids_max = max(pids_max, RESERVE * 2)
        self._seq = itertools.count(1)

    def available(self) -> tuple[bool, str]:
        if not (V1_PIDS / "cgroup.procs").exists():
            return False, "no cgroup v1 pids hierarchy: per-command limits are off"
        return True, "per-command pids and memory cgroups below each container's"

    def _limits(self, name: str, parent: Path) -> list[tuple[str, str]]:
        if name == "pids":
            return [("pids.max", str(self.pids_max - RESERVE))]
        if name == "cpu":
            return []  # equal shares: a busy command gets no more CPU than the next one
        limit = _read_int(parent / "memory.limit_in_bytes")
        if not limit or limit >= _UNLIMITED:
            return []  # an unbounded container: nothing to share out
        share = str(int(limit * MEMORY_SHARE))
        out = [("memory.limit_in_bytes", share)]
        if (parent / "memory.memsw.limit_in_bytes").exists():
            out.append(("memory.memsw.limit_in_bytes", share))
        return out

    def command(self, init_pid: int | None) -> list[Path] | None:
        """Fresh cgroups for one command of the container, in ``CONTROLLERS`` order (None when
        limits are off)."""
        parents = container_cgroups(init_pid)
        if "pids" not in parents:
            return None
        n = next(self._seq)
        made: list[Path] = []
        try:
            for name in CONTROLLERS:
                if name not in parents:
                    continue
                cg = parents[name] / f"{PREFIX}{n}"
                cg.mkdir()
                made.append(cg)
                for file, value in self._limits(name, parents[name]):
                    (cg / file).write_text(value)
        except OSError:
            self.release(made)
            return None
        return made

    @staticmethod
    def gated(cg: list[Path] | None, argv: list[str]) -> list[str]:
        return argv if cg is None else ["/bin/sh", "-c", _gate(len(cg)), "sh", *argv]

    @staticmethod
    def enter(cg: list[Path], pid: int) -> bool:
        """Move the gated exec (host pid ``pid``) into its cgroups; False if that failed.

        The command is also made the OOM killer's first choice (``COMMAND_OOM_SCORE_ADJ``,
        inherited by all it forks): when commands together fill the container's memory, one
        of them dies, not the keepalive (PID 1) whose end would end the sandbox. Raising the
        score needs no privilege; lowering the keepalive's would need ``CAP_SYS_RESOURCE``."""
        try:
            for path in cg:
                (path / "cgroup.procs").write_text(str(pid))
            Path(f"/proc/{pid}/oom_score_adj").write_text(str(COMMAND_OOM_SCORE_ADJ))
        except OSError:
            return False
        return True

    @staticmethod
    def oom_note(cg: list[Path] | None) -> str | None:
        """What to tell the caller when the kernel killed the command for memory, or None."""
        for path in cg or []:
            control = path / "memory.oom_control"
            if not control.exists():
                continue
            try:
                fields = dict(line.split() for line in control.read_text().splitlines())
            except (OSError, ValueError):
                return None
            if int(fields.get("oom_kill", "0")):
                mib = _read_int(path / "memory.limit_in_bytes") >> 20
                return f"k3stack: the command was killed: out of memory (its limit is {mib} MiB)\n"
        return None

    @staticmethod
    def release(cg: list[Path] | None) -> None:
        """Remove a command's cgroups once empty (a background child keeps them, and limits)."""
        for path in cg or []:
            with contextlib.suppress(OSError):
                path.rmdir()

    def sweep(self, parents: dict[str, Path]) -> None:
        """The command cgroups left below a removed container's (their processes are gone)."""
        for parent in parents.values():
            self.release(list(parent.glob(f"{PREFIX}*")))
