"""Running a request's choices together: merged streams, gathered answers, shared failure."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any


async def merge(streams: list[AsyncIterator[Any]]) -> AsyncIterator[Any]:
    """Items of several async iterators as they come; the first error stops them all."""
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    done = object()

    async def pump(stream: AsyncIterator[Any]) -> None:
        try:
            async for item in stream:
                await queue.put((0, item))
        except Exception as exc:  # noqa: BLE001 - re-raised in the consumer
            await queue.put((1, exc))
        finally:
            await queue.put((0, done))

    tasks = [asyncio.create_task(pump(s)) for s in streams]
    remaining = len(tasks)
    try:
        while remaining:
            failed, item = await queue.get()
            if failed:
                raise item
            if item is done:
                remaining -= 1
            else:
                yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in streams:
            aclose = getattr(s, "aclose", None)
            if aclose is not None:
                await aclose()


async def gather_choices(coros: list[Any]) -> list[Any]:
    """Run the choices together; if one fails, cancel the rest (their streams abort)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
