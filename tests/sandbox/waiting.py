"""Deterministic waiting for the sandbox tests: wait on the condition itself, never sleep-then-assert.

Deadlines are generous (the CI machine is 2 loaded cores); a condition that holds returns at once,
so a fast machine pays nothing for them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

T = TypeVar("T")

DEADLINE_S = 120.0

# A shell counter held in the process's memory only; ``/tmp/count`` shows how far it got. Each
# value goes to a temp file that is renamed over it, so a reader never finds the file empty
# mid-write (``echo $i > /tmp/count`` truncates first: a read between truncate and write is '').
COUNTER = (
    "i=0; while true; do i=$((i+1)); echo $i > /tmp/count.tmp; "
    "mv /tmp/count.tmp /tmp/count; sleep 0.05; done"
)


def eventually(
    probe: Callable[[], T],
    until: Callable[[T], bool] = bool,
    timeout_s: float = DEADLINE_S,
    what: str = "condition",
    interval_s: float = 0.05,
) -> T:
    """Call ``probe`` until ``until(result)`` holds; return that result (fail after the deadline,
    showing the last result)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if until(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached after {timeout_s} s (last: {value!r})")
        time.sleep(interval_s)


class FakeClock:
    """A UTC clock that only moves when told (``advance``)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
