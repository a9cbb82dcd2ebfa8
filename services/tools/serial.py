"""One world, one writer at a time: serialise a world's calls, across processes, and retry
only real database conflicts.

Agents call tools in parallel, and a deployed service runs several workers and replicas. Two
calls on one world that both read-then-write (the next Slack ``ts``, the next Notion ``seq``,
the world's id counter) would otherwise race. Two locks keep them apart:

- in the database, held by the call's transaction (:func:`lock_world`): on PostgreSQL the
  world's row is taken ``FOR UPDATE`` when a call opens the world, so a second worker or
  replica waits for the first to commit; SQLite takes its write lock up front
  (``BEGIN IMMEDIATE``, ``shared.db``), which serialises every process on the file;
- in the process, a per-world asyncio lock, so waiting calls queue on the event loop instead
  of each holding a thread (and a connection) while the database makes them wait.

A call the database still refuses for a transient reason (busy/locked, a serialisation
failure, a deadlock) is re-run on a fresh session with backoff (tenacity); anything else,
an ``IntegrityError`` included (with the lock held, a duplicate key is a bug or bad input,
not a race), surfaces at once.

:func:`world_route` makes the one route class every world-scoped route uses (the management
routes and each app's, which only differ in how a failure is rendered); the MCP endpoint takes
the locks directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import tenacity
from fastapi import Request, Response
from fastapi.routing import APIRoute
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

ATTEMPTS = 6
_NO_LOCK = contextlib.nullcontext()
_LOCKS: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = weakref.WeakValueDictionary()

# SQLSTATEs of transient conflicts: serialization failure, deadlock, lock not available.
_RETRY_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
_RETRY_MESSAGES = ("database is locked", "database table is locked", "database is busy")


def world_lock(world_id: str) -> asyncio.Lock:
    """The lock of ``world_id`` on the running event loop (kept while anyone holds it)."""
    key = (id(asyncio.get_running_loop()), world_id)
    lock = _LOCKS.get(key)
    if lock is None:
        lock = asyncio.Lock()
        _LOCKS[key] = lock
    return lock


def lock_world(session: Session, world_id: str) -> None:
    """Take ``world_id``'s lock in the database for the rest of ``session``'s transaction.

    PostgreSQL: the world's row ``FOR UPDATE`` (another transaction that opens the world
    waits for this one's commit or rollback, whichever worker or replica it runs in). SQLite
    needs nothing here: every transaction there begins ``IMMEDIATE``, holding the file's write
    lock until it ends."""
    if session.get_bind().dialect.name == "sqlite":
        return
    from services.tools.models import WorldRow

    session.execute(select(WorldRow.id).where(WorldRow.id == world_id).with_for_update())


def is_conflict(exc: BaseException) -> bool:
    """A transient database conflict worth re-running the call for (not a bug in the call)."""
    if not isinstance(exc, DBAPIError) or exc.orig is None:
        return False
    orig = exc.orig
    state = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if state in _RETRY_SQLSTATES:
        return True
    text = str(orig).lower()
    return type(orig).__name__ == "OperationalError" and any(m in text for m in _RETRY_MESSAGES)


def retry_policy(rollback: Callable[[], Any] | None = None) -> dict[str, Any]:
    """tenacity's arguments for the one retry policy: conflicts only, ``ATTEMPTS`` tries,
    jittered exponential backoff up to 0.5 s, the last error re-raised as it was."""

    def before_sleep(_: tenacity.RetryCallState) -> None:
        if rollback is not None:
            rollback()

    return {
        "retry": tenacity.retry_if_exception(is_conflict),
        "stop": tenacity.stop_after_attempt(ATTEMPTS),
        "wait": tenacity.wait_random_exponential(multiplier=0.01, max=0.5),
        "reraise": True,
        "before_sleep": before_sleep,
    }


async def run_world_call(
    request: Request, handler: Callable[[Request], Awaitable[Response]], read_only: bool = False
) -> Response:
    """Run a route handler under its world's lock, commit before answering (roll back, for a
    read: reads never change a world, even where an app fills in defaults on first use),
    retry conflicts. The handler's context dependency leaves the session on
    ``request.state.world_ctx``.
    """
    world_id = request.path_params.get("world_id")

    async def attempt() -> Response:
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

    async def forget_session(_: tenacity.RetryCallState) -> None:
        ctx = getattr(request.state, "world_ctx", None)
        if ctx is not None:
            await run_in_threadpool(ctx.session.rollback)
            request.state.world_ctx = None

    policy = {**retry_policy(), "before_sleep": forget_session}
    async for retrying in tenacity.AsyncRetrying(**policy):
        with retrying:
            return await attempt()
    raise AssertionError("unreachable")


def retry_sync(fn: Callable[[], Any], rollback: Callable[[], None]) -> Any:
    """Run ``fn`` (which commits) again after a database conflict, rolling back in between.

    The first try runs bare: building tenacity's loop costs ~100 µs, and an oracle or a
    scripted driver makes thousands of calls that almost never conflict."""
    try:
        return fn()
    except Exception as exc:
        if not is_conflict(exc):
            raise
    policy = retry_policy(rollback)
    rollback()
    time.sleep(random.uniform(0, 0.01))  # the first wait; tenacity's policy takes the rest
    return tenacity.Retrying(**{**policy, "stop": tenacity.stop_after_attempt(ATTEMPTS - 1)})(fn)


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
