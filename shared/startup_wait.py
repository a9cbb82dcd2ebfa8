"""How long ``k3stack up`` waits for a service: as long as it makes progress, within a budget.

A fixed 60 s wait tore the stack down on a loaded 2-core machine, where the model process alone
spent ~57 s importing. Here a service still starting is waited for while it shows progress (its
process used CPU time, or its log grew) within the last ``stall_s`` seconds, up to ``budget_s`` in
all; one that shows none for ``stall_s`` (hung, or blocked on something that never comes) ends
the wait early, by name.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field


def cpu_ticks(pid: int) -> int | None:
    """CPU time (clock ticks) of ``pid`` and its waited-for children, or None where /proc is
    missing (then only the log counts as progress)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:  # after the command: state, ppid, ... utime (14), stime, cutime, cstime (17)
        return sum(int(x) for x in fields[11:15])
    except (ValueError, IndexError):
        return None


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


@dataclass
class StartupWatch:
    """The progress of each service being waited for."""

    stall_s: float
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    _marks: dict[str, tuple[tuple[int | None, int], float]] = field(default_factory=dict)

    def look(self, name: str, pid: int, log: str) -> None:
        """Note what ``name`` shows now; a change since the last look is progress."""
        now = time.monotonic()
        sign = (cpu_ticks(pid), file_size(log))
        last = self._marks.get(name)
        if last is None or last[0] != sign:
            self._marks[name] = (sign, now)

    def stalled(self, names: set[str]) -> list[str]:
        """Those of ``names`` that showed no progress for ``stall_s``."""
        now = time.monotonic()
        return sorted(
            n for n in names if n in self._marks and now - self._marks[n][1] > self.stall_s
        )

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def over_budget(self) -> bool:
        return self.elapsed() > self.budget_s
