"""One world, one writer at a time: serialise a world's app calls and retry database conflicts.

Agents call tools in parallel. Two calls on one world that both read-then-write (the next Slack
``ts``, the next Notion ``seq``) would otherwise race, and SQLite refuses a deferred transaction
that read before another one committed ("database is locked", even across worlds). So the
app routes and the MCP endpoint run each call under a per-world asyncio lock (no thread is held
while waiting) and re-run it, on a fresh session, when the database reports a conflict.

:func:`world_route` makes the one route class every world-scoped route uses (the management
routes and each app's, which only differ in how a failure is rendered); the MCP endpoint takes
the lock directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from sqlalchemy.exc import DBAPIError, IntegrityError
from starlette.concurrency import run_in_threadpool

ATTEMPTS = 6
_NO_LOCK = contextlib.nullcontext()
_LOCKS: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = weakref.WeakValueDictionary()


def world_lock(world_id: str) -> asyncio.Lock:
    """The lock of ``world_id`` on the running event loop (kept while anyone holds it)."""
    key = (id(asyncio.get_running_loop()), world_id)
    lock = _LOCKS.get(key)
    if lock is None:
        lock = asyncio.Lock()
        _LOCKS[key] = lock
    return lock


def is_conflict(exc: BaseException) -> bool:
    """A write conflict worth retrying (not a bug in the call)."""
    if isinstance(exc, IntegrityError):
        return True  # two writers took the same next id; the retry takes the next one
    if isinstance(exc, DBAPIError):
        text = str(exc.orig if exc.orig is not None else exc).lower()
        return any(
            s in text for s in ("database is locked", "deadlock", "could not serialize", "busy")
        )
    return False


def backoff(attempt: int) -> float:
    return min(0.5, 0.01 * 2**attempt)


async def run_world_call(
    request: Request, handler: Callable[[Request], Awaitable[Response]], read_only: bool = False
) -> Response:
    """Run a route handler under its world's lock, commit before answering (roll back, for a
    read: reads never change a world, even where an app fills in defaults on first use),
    retry conflicts. The handler's context dependency leaves the session on
    ``request.state.world_ctx``.
    """
    world_id = request.path_params.get("world_id")
    for attempt in range(ATTEMPTS):
        try:
            # A route that names no world (the catalogue, an oracle plan, a new world) has
            # nothing to serialise: sharing one lock made ``GET /scenarios`` wait behind a
            # plan being computed.
            async with world_lock(str(world_id)) if world_id else _NO_LOCK:
                response = await handler(request)
                ctx = getattr(request.state, "world_ctx", None)
                if ctx is not None:
                    end = ctx.session.rollback if read_only else ctx.session.commit
                    await run_in_threadpool(end)
            return response
        except Exception as exc:
            if attempt == ATTEMPTS - 1 or not is_conflict(exc):
                raise
            ctx = getattr(request.state, "world_ctx", None)
            if ctx is not None:
                await run_in_threadpool(ctx.session.rollback)
                request.state.world_ctx = None
            await asyncio.sleep(backoff(attempt))
    raise AssertionError("unreachable")


def retry_sync(fn: Callable[[], Any], rollback: Callable[[], None]) -> Any:
    """Run ``fn`` (which commits) again after a database conflict, rolling back in between."""
    for attempt in range(ATTEMPTS):
        try:
            return fn()
        except Exception as exc:
            if attempt == ATTEMPTS - 1 or not is_conflict(exc):
                raise
            rollback()
            time.sleep(backoff(attempt))
    raise AssertionError("unreachable")


def rollback_world(request: Request) -> None:
    """Undo the world's uncommitted writes (the context dependency stored it on the request)."""
    ctx = getattr(request.state, "world_ctx", None)
    if ctx is not None:
        ctx.session.rollback()


def is_http_read(request: Request) -> bool:
    return request.method in ("GET", "HEAD", "OPTIONS")


def world_route(
    render: Callable[[Exception], Response] | None = None,
    reads: Callable[[Request], bool] = is_http_read,
) -> type[APIRoute]:
    """A route class: each call runs under its world's lock, commits before answering (a
    call ``reads`` says is a read rolls back instead) and is retried on a conflict; with
    ``render``, a failure is rolled back and answered in the app's own error shape (without,
    it propagates to the service's handlers)."""

    class WorldScopedRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def route(request: Request) -> Response:
                try:
                    return await run_world_call(request, handler, read_only=reads(request))
                except Exception as exc:
                    if render is None:
                        raise
                    rollback_world(request)
                    return render(exc)

            return route

    return WorldScopedRoute
