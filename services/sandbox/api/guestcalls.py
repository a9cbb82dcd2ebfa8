"""A bounded pool for the blocking calls into sandboxes (exec, files, port forwards).

A guest call blocks a thread until the guest answers, which a slow or hostile client can make
long (an exec near its time limit, a stalled upload). Run in the server's shared thread pool,
enough of them would leave no thread for any other route. These run on their own
:class:`anyio.CapacityLimiter` of ``guest_call_limit`` threads instead; when every one is busy
a new call is refused at once with 429 rather than queued, so lifecycle routes, listing and
health keep answering whatever the guests do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from shared.errors import APIError

T = TypeVar("T")
_DONE = object()


class GuestCalls:
    """``await calls.run(fn, *args)`` runs ``fn`` on the guest-call pool (429 when it is full)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._limiter: anyio.CapacityLimiter | None = None

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        if self._limiter is None:  # made inside the event loop that uses it
            self._limiter = anyio.CapacityLimiter(self.limit)
        return self._limiter

    def _admit(self) -> None:
        if self.limiter.available_tokens < 1:
            raise APIError(
                429, "too_many_guest_calls",
                f"{self.limit} exec/file calls are in flight already "
                "(K3STACK_SANDBOX__GUEST_CALL_LIMIT); retry shortly",
            )  # fmt: skip

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        self._admit()
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    def admit_stream(self, events: Iterator[T]) -> AsyncIterator[T]:
        """Iterate a blocking iterator on the pool, one ``next`` per thread hop (a stream
        that waits on its guest holds one pool thread, never one of the server's)."""
        self._admit()

        async def gen() -> AsyncIterator[T]:
            while True:
                item = await anyio.to_thread.run_sync(next, events, _DONE, limiter=self.limiter)
                if item is _DONE:
                    return
                yield item  # type: ignore[misc]

        return gen()
