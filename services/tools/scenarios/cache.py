"""Scenario pages and oracle plans, computed once per (scenario, seed) and kept.

Both are pure functions of the scenario's code and the seed (worlds are deterministic), so a
plan that took seconds to compute (the oracle runs in a scratch world) is answered from here
afterwards. Concurrent requests for one key wait for the single computation instead of
starting their own; other keys never wait.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
MAX_ENTRIES = 512


class Memo:
    """A bounded, thread-safe memo with one computation in flight per key."""

    def __init__(self, size: int = MAX_ENTRIES) -> None:
        self.size = size
        self._done: OrderedDict[Any, Any] = OrderedDict()
        self._busy: dict[Any, threading.Lock] = {}
        self._lock = threading.Lock()
        self.computed = 0  # how many times a value was computed (tests read it)

    def get(self, key: Any, compute: Callable[[], T]) -> T:
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            busy = self._busy.setdefault(key, threading.Lock())
        with busy:
            with self._lock:
                if key in self._done:
                    return self._done[key]
            value = compute()  # an error is not kept: the next request tries again
            with self._lock:
                self.computed += 1
                self._done[key] = value
                while len(self._done) > self.size:
                    self._done.popitem(last=False)
                self._busy.pop(key, None)
            return value

    def clear(self) -> None:
        with self._lock:
            self._done.clear()


# Keyed by the scenario object too: a scenario registered under a known name (tests do)
# is another scenario.
pages = Memo()
plans = Memo()
