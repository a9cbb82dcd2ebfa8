"""Fair admission of the blocking calls into sandboxes (exec, files, port forwards, streams).

A guest call blocks a thread until the guest answers, which a slow or hostile client can make
long (``sleep 1000`` with ``timeout: 0``, a stalled upload). Three rules keep one client from
exhausting the data plane for everyone:

* **slots**: a call holds a slot of the global bound (``guest_call_limit``), of its sandbox
  (``guest_calls_per_sandbox``) and, in deployed mode, of its API key (``guest_calls_per_key``);
  when any is full it is refused at once with 429 (never queued), so one sandbox's hung execs
  leave the other sandboxes' calls, lifecycle routes, listing and health answering;
* **control calls** (signals) never wait for a slot: they run on their own small pool, which
  nothing long-running can fill;
* **streams** (streamed execs, SDK background commands, downloads) are read by a thread of
  their own into a small bounded queue and count against ``guest_streams_limit`` (per sandbox
  and globally), not against the slots; a consumer that goes away (client disconnect, server
  shutdown) abandons the stream, which calls the stream's ``on_abandon`` (kill its process) so
  nothing keeps running for nobody.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from shared.errors import APIError

T = TypeVar("T")
_END = object()
QUEUE_ITEMS = 8
"""Items a stream's reader thread may run ahead of its consumer (back pressure past it)."""
CONTROL_THREADS = 16


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class GuestCalls:
    """``await calls.run(sid, fn, *args)`` runs ``fn`` in a slot (429 when none is free);
    ``await calls.control(fn, *args)`` runs it at once; ``calls.stream(sid, it)`` iterates."""

    def __init__(
        self, limit: int, per_sandbox: int | None = None, per_key: int | None = None,
        streams: int = 256,
    ) -> None:  # fmt: skip
        self.limit = limit
        self.per_sandbox = min(per_sandbox or limit, limit)
        self.per_key = min(per_key or limit, limit)
        self.streams = streams
        self.in_flight: Counter[str] = Counter()
        self.streaming: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._limiter: anyio.CapacityLimiter | None = None
        self._control: anyio.CapacityLimiter | None = None

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:  # made inside the event loop that uses it
            self._limiter = anyio.CapacityLimiter(self.limit)
        return self._limiter

    # ------------------------------------------------------------------ slots

    @contextmanager
    def slot(self, sandbox_id: str, key: str | None = None) -> Iterator[None]:
        """Hold one slot of the global, the sandbox's and the key's bound (429 when full)."""
        names = [f"sb:{sandbox_id}"] + ([f"key:{key}"] if key else [])
        with self._lock:
            if self.in_flight["*"] >= self.limit:
                raise self._full(f"{self.limit} exec/file calls are in flight already "
                                 "(K3STACK_SANDBOX__GUEST_CALL_LIMIT)")  # fmt: skip
            if self.in_flight[names[0]] >= self.per_sandbox:
                raise self._full(f"{self.per_sandbox} exec/file calls are in flight on sandbox "
                                 f"{sandbox_id} already (K3STACK_SANDBOX__GUEST_CALLS_PER_SANDBOX)")  # fmt: skip
            if key and self.in_flight[names[1]] >= self.per_key:
                raise self._full(f"{self.per_key} exec/file calls are in flight for this API "
                                 "key already (K3STACK_SANDBOX__GUEST_CALLS_PER_KEY)")  # fmt: skip
            for n in ("*", *names):
                self.in_flight[n] += 1
        try:
            yield
        finally:
            with self._lock:
                for n in ("*", *names):
                    self.in_flight[n] -= 1
                    if not self.in_flight[n]:
                        del self.in_flight[n]

    @staticmethod
    def _full(what: str) -> APIError:
        return APIError(429, "too_many_guest_calls", f"{what}; retry shortly")

    async def run(
        self, sandbox_id: str, fn: Callable[..., T], *args: Any, key: str | None = None
    ) -> T:
        """``fn(*args)`` on a worker thread, holding a slot for as long as it runs."""
        with self.slot(sandbox_id, key):
            return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    async def control(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the control pool: kills and signals never wait behind guest calls."""
        if self._control is None:
            self._control = anyio.CapacityLimiter(CONTROL_THREADS)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._control)

    # ------------------------------------------------------------------ streams

    @contextmanager
    def _stream_slot(self, sandbox_id: str) -> Iterator[None]:
        name = f"sb:{sandbox_id}"
        with self._lock:
            if self.streaming["*"] >= self.streams or self.streaming[name] >= self.streams // 4:
                raise self._full(f"too many streams open (K3STACK_SANDBOX__GUEST_STREAMS_LIMIT "
                                 f"{self.streams}, a quarter of it per sandbox)")  # fmt: skip
            self.streaming["*"] += 1
            self.streaming[name] += 1
        try:
            yield
        finally:
            with self._lock:
                for n in ("*", name):
                    self.streaming[n] -= 1
                    if not self.streaming[n]:
                        del self.streaming[n]

    def stream(
        self, sandbox_id: str, items: Iterator[T], on_abandon: Callable[[], None] | None = None
    ) -> AsyncIterator[T]:
        """Iterate a blocking iterator from async code without holding a slot or a pool
        thread: a reader thread of its own feeds a queue of :data:`QUEUE_ITEMS`. Admission
        (429) happens now. If the consumer stops early, ``on_abandon`` runs (on a thread of its
        own, so a cancelled task still runs it) and the iterator is closed once it yields."""
        cm = self._stream_slot(sandbox_id)
        cm.__enter__()
        return self._pump(cm, items, on_abandon)

    async def _pump(
        self, cm: Any, items: Iterator[T], on_abandon: Callable[[], None] | None
    ) -> AsyncIterator[T]:
        loop = asyncio.get_running_loop()
        q: queue.Queue[Any] = queue.Queue(QUEUE_ITEMS)
        ready = asyncio.Event()
        abandoned = threading.Event()

        def put(item: Any) -> bool:
            while not abandoned.is_set():
                try:
                    q.put(item, timeout=0.2)
                except queue.Full:
                    continue
                try:
                    loop.call_soon_threadsafe(ready.set)
                except RuntimeError:  # the loop is gone (server stopped)
                    abandoned.set()
                return True
            return False

        def read() -> None:
            try:
                for item in items:
                    if not put(item):
                        break
                else:
                    put(_END)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                put(_Failed(exc))
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:  # noqa: BLE001, S110 - best effort after abandonment
                        pass
                cm.__exit__(None, None, None)

        threading.Thread(target=read, name="k3stack-guest-stream", daemon=True).start()
        done = False
        try:
            while True:
                ready.clear()
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    await ready.wait()
                    continue
                if item is _END:
                    done = True
                    return
                if isinstance(item, _Failed):
                    done = True
                    raise item.exc
                yield item
        finally:
            if not done:
                abandoned.set()
                if on_abandon is not None:
                    threading.Thread(target=_quietly, args=(on_abandon,), daemon=True).start()


def _quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # noqa: BLE001, S110 - the process may have ended by itself meanwhile
        pass
