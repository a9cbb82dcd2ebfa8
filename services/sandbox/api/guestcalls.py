"""Fair admission of the blocking calls into sandboxes (exec, files, port forwards, streams).

A guest call blocks a thread until the guest answers, which a slow or hostile client can make
long (``sleep 1000`` with ``timeout: 0``, a stalled upload). Three rules keep one client from
exhausting the data plane for everyone:

* **slots**: a call holds a slot of the global bound (``guest_call_limit``), of its sandbox
  (``guest_calls_per_sandbox``) and, in deployed mode, of its API key's
  (``guest_calls_per_key``); when any is full it is refused at once with 429 naming the quota (never queued),
  so one sandbox's hung execs leave the other sandboxes' calls, lifecycle routes, listing and
  health answering;
* **reserve**: the last ``guest_reserve`` places of each global bound go only to a client
  (API key, else sandbox) holding fewer than :data:`SMALL` there, so four clients filling the
  pools and retrying on 429 still leave a fifth one's exec answering;
* **control calls** (signals) never wait for a slot: they run on their own small pool, which
  nothing long-running can fill;
* **streams** (streamed execs, SDK background commands, downloads) are read by a thread of
  their own into a small bounded queue (so bytes in flight are bounded by the streams) and
  count against ``guest_streams_limit`` (globally, a quarter of it per sandbox, and
  ``guest_streams_per_key`` per client), not against the slots; a consumer that goes away (client disconnect, server
  shutdown) abandons the stream, which calls the stream's ``on_abandon`` (kill its process) so
  nothing keeps running for nobody.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from shared.errors import APIError

T = TypeVar("T")
_END = object()
SMALL = 2
"""A client holding fewer than this many of a pool may take its reserved last places."""
QUEUE_ITEMS = 8
"""Items a stream's reader thread may run ahead of its consumer (back pressure past it)."""
CONTROL_THREADS = 16


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _full(what: str) -> APIError:
    return APIError(429, "too_many_guest_calls", f"{what}; retry shortly")


class Pool:
    """One bounded kind of use (guest-call slots, or streams) counted globally, per sandbox and
    per client, with a reserve: the last ``reserve`` places of the global bound are admitted
    only to a client holding fewer than :data:`SMALL` here, so a few clients that fill the
    pool (and retry on 429) never starve another one. A client is its API key in deployed
    mode, else its sandbox. Every refusal names the quota and its setting."""

    def __init__(
        self, what: str, limit: int, per_sandbox: int, per_key: int, reserve: int,
        settings: tuple[str, str, str],
    ) -> None:  # fmt: skip
        self.what, self.limit = what, limit
        self.per_sandbox, self.per_key = min(per_sandbox, limit), min(per_key, limit)
        self.reserve = min(reserve, limit - 1)
        self.settings = settings
        self.count: Counter[str] = Counter()

    def admit(self, sandbox_id: str, key: str | None) -> list[str]:
        """Count one use (under the caller's lock) and return its names, or raise 429."""
        sb = f"sb:{sandbox_id}"
        names = ["*", sb] + ([f"key:{key}"] if key else [])
        client = names[-1]
        glob, per_sb, per_key = self.settings
        if self.count["*"] >= self.limit:
            raise _full(f"{self.limit} {self.what} are open already "
                        f"(global quota, K3STACK_SANDBOX__{glob})")  # fmt: skip
        if self.count[sb] >= self.per_sandbox:
            raise _full(f"{self.per_sandbox} {self.what} are open on sandbox {sandbox_id} "
                        f"already (sandbox quota, K3STACK_SANDBOX__{per_sb})")  # fmt: skip
        if key and self.count[client] >= self.per_key:
            raise _full(f"{self.per_key} {self.what} are open for this API key already "
                        f"(client quota, K3STACK_SANDBOX__{per_key})")  # fmt: skip
        if self.count["*"] >= self.limit - self.reserve and self.count[client] >= SMALL:
            raise _full(f"the last {self.reserve} of {self.limit} {self.what} are kept for "
                        f"clients holding fewer than {SMALL} (global quota, "
                        f"K3STACK_SANDBOX__{glob}, reserve K3STACK_SANDBOX__GUEST_RESERVE)")  # fmt: skip
        for n in names:
            self.count[n] += 1
        return names

    def release(self, names: list[str]) -> None:
        for n in names:
            self.count[n] -= 1
            if not self.count[n]:
                del self.count[n]


class GuestCalls:
    """``await calls.run(sid, fn, *args)`` runs ``fn`` in a slot (429 when none is free);
    ``await calls.control(fn, *args)`` runs it at once; ``calls.stream(sid, it)`` iterates."""

    def __init__(
        self, limit: int, per_sandbox: int | None = None, per_key: int | None = None,
        streams: int = 256, streams_per_key: int | None = None, reserve: int = 0,
    ) -> None:  # fmt: skip
        self.limit = limit
        self.calls = Pool("exec/file calls", limit, per_sandbox or limit, per_key or limit,
                          reserve, ("GUEST_CALL_LIMIT", "GUEST_CALLS_PER_SANDBOX",
                                    "GUEST_CALLS_PER_KEY"))  # fmt: skip
        self.streams = Pool("streams", streams, max(1, streams // 4), streams_per_key or streams,
                            reserve, ("GUEST_STREAMS_LIMIT", "GUEST_STREAMS_LIMIT (a quarter)",
                                      "GUEST_STREAMS_PER_KEY"))  # fmt: skip
        self._lock = threading.Lock()
        self._limiter: anyio.CapacityLimiter | None = None
        self._control: anyio.CapacityLimiter | None = None

    @property
    def in_flight(self) -> Counter[str]:
        return self.calls.count

    @property
    def streaming(self) -> Counter[str]:
        return self.streams.count

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:  # made inside the event loop that uses it
            self._limiter = anyio.CapacityLimiter(self.limit)
        return self._limiter

    # ------------------------------------------------------------------ slots

    @contextmanager
    def hold(self, pool: Pool, sandbox_id: str, key: str | None) -> Iterator[None]:
        """Hold one place of ``pool`` (``calls.calls`` or ``calls.streams``), or raise 429."""
        with self._lock:
            names = pool.admit(sandbox_id, key)
        try:
            yield
        finally:
            with self._lock:
                pool.release(names)

    def slot(self, sandbox_id: str, key: str | None = None) -> AbstractContextManager[None]:
        """Hold one slot of the global, the sandbox's and the client's bound (429 when full)."""
        return self.hold(self.calls, sandbox_id, key)

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

    def stream(
        self, sandbox_id: str, items: Iterator[T], on_abandon: Callable[[], None] | None = None,
        key: str | None = None,
    ) -> AsyncIterator[T]:  # fmt: skip
        """Iterate a blocking iterator from async code without holding a slot or a pool
        thread: a reader thread of its own feeds a queue of :data:`QUEUE_ITEMS`. Admission
        (429) happens now. If the consumer stops early, ``on_abandon`` runs (on a thread of its
        own, so a cancelled task still runs it) and the iterator is closed once it yields."""
        cm = self.hold(self.streams, sandbox_id, key)
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
