"""Per-command limits of process sandboxes: each command in its own pids cgroup under its
sandbox's (cgroup v1 ``pids`` controller, or the v2 unified tree), so a fork bomb is stopped
at its own ``pids.max`` and the next command still has room to run.

Layout: ``<controller root>/k3stack/<sandbox id>/`` carries the sandbox's bound (``pids_max``);
each command gets ``c<n>`` below it with ``pids_max - RESERVE``. A command is put there by the
host shell that starts it (``echo $$ > cgroup.procs; exec ...``), so everything it forks, in
the sandbox's namespaces too, is counted. Sandbox ids are unique per instance, so two service
instances on one host never share a directory. Where no writable pids controller exists the
limits are off (``available`` says so) and commands still run.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

RESERVE = 64
"""Processes of a sandbox's bound no single command may take: what the next command runs in."""

_CANDIDATES = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


def _pids_root() -> Path | None:
    for base in _CANDIDATES:
        if (base / "cgroup.procs").exists() and os.access(base, os.W_OK):
            if base.name == "pids" or "pids" in _controllers(base):
                return base / "k3stack"
    return None


def _controllers(base: Path) -> str:
    try:
        return (base / "cgroup.controllers").read_text()
    except OSError:
        return ""


class CommandCgroups:
    """Creates, enters and removes the per-command pids cgroups of process sandboxes."""

    def __init__(self, pids_max: int = 1024) -> None:
        self.pids_max = max(pids_max, RESERVE * 2)
        self.root = _pids_root()
        self._seq = itertools.count(1)

    def available(self) -> tuple[bool, str]:
        if self.root is None:
            return False, "no writable pids cgroup controller: per-command limits are off"
        return True, f"per-command pids cgroups under {self.root}"

    def command(self, sandbox_id: str) -> Path | None:
        """A fresh cgroup for one command of ``sandbox_id`` (None when limits are off)."""
        if self.root is None:
            return None
        sandbox = self.root / sandbox_id
        try:
            if not sandbox.exists():
                self.root.mkdir(exist_ok=True)
                if self.root.parent.name != "pids":  # v2: let children limit pids
                    _put(self.root.parent / "cgroup.subtree_control", "+pids")
                    _put(self.root / "cgroup.subtree_control", "+pids")
                sandbox.mkdir(exist_ok=True)
                _put(sandbox / "pids.max", str(self.pids_max))
                if self.root.parent.name != "pids":
                    _put(sandbox / "cgroup.subtree_control", "+pids")
            cg = sandbox / f"c{next(self._seq)}"
            cg.mkdir()
            _put(cg / "pids.max", str(self.pids_max - RESERVE))
            return cg
        except OSError:
            return None

    @staticmethod
    def enter_argv(cg: Path | None, argv: list[str]) -> list[str]:
        """``argv`` run by a host shell that first moves itself into ``cg``."""
        if cg is None:
            return argv
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cg / "cgroup.procs"), *argv]

    @staticmethod
    def release(cg: Path | None) -> None:
        """Remove a command's cgroup once empty (a background child keeps it, and its limit)."""
        if cg is not None:
            try:
                cg.rmdir()
            except OSError:
                pass

    def remove_sandbox(self, sandbox_id: str) -> None:
        """Kill whatever is left in the sandbox's cgroups and remove them."""
        if self.root is None:
            return
        sandbox = self.root / sandbox_id
        if not sandbox.exists():
            return
        deadline = time.monotonic() + 10  # a fork bomb's processes die over a moment
        for cg in [*sandbox.glob("c*"), sandbox]:
            while time.monotonic() < deadline:
                try:
                    pids = (cg / "cgroup.procs").read_text().split()
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                time.sleep(0.02)
            if cg != sandbox:
                self.release(cg)
        self.release(sandbox)


def _put(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError:
        pass  # a controller missing there: that limit is off
