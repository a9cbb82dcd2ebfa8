"""Grammar compiles in a worker of their own, cached, within a time budget, cancellable.

xgrammar's compiler shares its cache between compiles, so they run one at a time; before, they
ran under a lock inside the request's tokenising thread, where a 1,000-tool grammar held the
small-prompt lane and kept compiling for ~36 s of CPU after its client left. Here:

- one worker thread compiles (the compiler's cache stays single-threaded, no lock needed);
- the same grammar text compiles once: an LRU of compiled grammars serves repeats (an agent
  sends the same tool set every turn);
- the caller waits at most :data:`COMPILE_BUDGET_S`; past it the request is refused (400) and the
  compile, which xgrammar cannot interrupt, finishes in the background into the cache;
- a caller whose client left (its cancel event set) stops waiting, and its compile is dropped if
  it had not started.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from services.model.serving.tokenize_pool import Cancelled

#: Seconds a request waits for its grammar (a 128-tool grammar takes ~1 s on a loaded 2-core
#: machine; the budget leaves room for the ones queued before it).
COMPILE_BUDGET_S = 30.0
#: Compiled grammars kept (each holds its matcher tables; a tool set's is ~1 MiB).
CACHE_SIZE = 64
_POLL_S = 0.05


class CompileTimeout(Exception):
    """The grammar did not compile within the budget."""


class GrammarWorker:
    """Compiles ``key`` with ``build()`` on the worker thread, once per key while cached."""

    def __init__(self, cache_size: int = CACHE_SIZE) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="k3-grammar")
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._pending: dict[str, Future[Any]] = {}
        self._waiters: dict[str, int] = {}
        self._lock = threading.Lock()
        self._size = cache_size
        self.compiles = 0  # compiles started (a cache hit or a shared pending one is not)

    def _run(self, key: str, build: Callable[[], Any]) -> Any:
        self.compiles += 1
        try:
            value = build()
        finally:
            with self._lock:
                self._pending.pop(key, None)
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > self._size:
                self._cache.popitem(last=False)
        return value

    def compile(
        self,
        key: str,
        build: Callable[[], Any],
        cancel: threading.Event | None = None,
        budget_s: float = COMPILE_BUDGET_S,
    ) -> Any:
        """The compiled grammar for ``key``; raises :class:`CompileTimeout` past ``budget_s``,
        :class:`~services.model.serving.tokenize_pool.Cancelled` once ``cancel`` is set, and
        whatever ``build`` raises."""
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
            future = self._pending.get(key)
            if future is None:
                future = self._pool.submit(self._run, key, build)
                self._pending[key] = future
            self._waiters[key] = self._waiters.get(key, 0) + 1
        try:
            return self._wait(key, future, cancel, budget_s)
        finally:
            with self._lock:
                left = self._waiters.pop(key, 1) - 1
                if left:
                    self._waiters[key] = left
                elif future.cancel():  # nobody waits for it and it has not started
                    self._pending.pop(key, None)

    def _wait(
        self, key: str, future: Future[Any], cancel: threading.Event | None, budget_s: float
    ) -> Any:
        deadline = time.monotonic() + budget_s
        while True:
            try:
                return future.result(timeout=_POLL_S)
            except FutureTimeout:
                pass
            if cancel is not None and cancel.is_set():
                raise Cancelled
            if time.monotonic() > deadline:
                raise CompileTimeout(f"the grammar did not compile within {budget_s:g} s")

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
