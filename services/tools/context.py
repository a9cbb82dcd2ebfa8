"""The per-request view of one world that every app route and action works through.

``WorldCtx`` (a FastAPI dependency) authenticates the world token, opens a session, and hands
the app the world's simulated clock, a seeded RNG per purpose and an action recorder; it
commits when the route returns and rolls back on error. Actions, NPCs and oracle solvers build
a :class:`WorldContext` directly with :func:`open_world`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.tools.models import ActionRow, WorldRow
from services.tools.serial import lock_world, world_route
from shared.errors import APIError


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


@dataclass
class WorldContext:
    world_id: str
    session: Session
    seed: int
    world: WorldRow
    actor: str = "agent"
    _rngs: dict[str, random.Random] = field(default_factory=dict)

    @property
    def now(self) -> datetime:
        """The world's simulated clock (UTC, tz-aware); apps never read the wall clock."""
        return _aware(self.world.clock)

    def rng(self, purpose: str) -> random.Random:
        """A deterministic RNG for ``purpose``, seeded by world seed and purpose.

        It restarts from its seed for every request, so use it for values that are a pure
        function of (seed, purpose); for unique ids use :meth:`new_id`.
        """
        if purpose not in self._rngs:
            digest = hashlib.sha256(f"{self.seed}:{purpose}".encode()).digest()
            self._rngs[purpose] = random.Random(int.from_bytes(digest[:8], "big"))
        return self._rngs[purpose]

    def new_id(self, prefix: str = "", width: int = 16) -> str:
        """A world-unique id, deterministic for the same seed and sequence of actions."""
        self.world.id_counter = (self.world.id_counter or 0) + 1
        raw = hashlib.sha256(f"{self.seed}:{self.world.id_counter}".encode()).hexdigest()
        return prefix + raw[:width]

    def record(self, app: str, action: str, payload: dict[str, Any]) -> None:
        """Append to the world's action log (events trigger on it, checks read it)."""
        seq = (
            self.session.scalar(
                select(func.max(ActionRow.seq)).where(ActionRow.world_id == self.world_id)
            )
            or 0
        ) + 1
        self.session.add(
            ActionRow(
                world_id=self.world_id,
                seq=seq,
                at=self.now,
                actor=self.actor,
                app=app,
                action=action,
                payload=payload,
            )
        )
        self.session.flush()


@contextmanager
def open_world(session: Session, world_id: str, actor: str = "agent") -> Iterator[WorldContext]:
    """A context over ``world_id`` in an existing session (no token check: trusted callers),
    holding the world's database lock until the session's transaction ends."""
    lock_world(session, world_id)
    world = session.get(WorldRow, world_id)
    if world is None:
        raise APIError(404, "not_found", f"world {world_id!r} does not exist")
    yield WorldContext(
        world_id=world_id, session=session, seed=world.seed, world=world, actor=actor
    )


# Query parameters a client may think carry a token; a URL lands in access logs and proxies.
TOKEN_PARAMS = ("token", "access_token")


def presented_world_token(request: Request) -> str | None:
    """The world token from ``Authorization: Bearer`` (what the official SDKs send) or
    ``X-World-Token``; one in the query string is refused (400), not read: URLs end up in logs."""
    named = [p for p in TOKEN_PARAMS if p in request.query_params]
    if named:
        raise APIError(
            400,
            "token_in_query",
            f"the world token may not travel in the URL (query parameter {named[0]!r}): URLs "
            "end up in logs; send 'Authorization: Bearer <world token>' instead",
        )
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("X-World-Token")


def world_context(world_id: str, request: Request) -> Iterator[WorldContext]:
    """FastAPI dependency: authenticate the world token, yield a context, commit after."""
    token = presented_world_token(request)
    if not token:
        raise APIError(
            401, "unauthorized", "missing world token: send 'Authorization: Bearer <world token>'"
        )
    db = request.app.state.db
    with db.session() as session:
        lock_world(session, world_id)  # other workers and replicas wait for this call's commit
        world = session.get(WorldRow, world_id)
        if world is None:
            raise APIError(404, "not_found", f"world {world_id!r} does not exist")
        if world.token_sha256 != token_digest(token):
            raise APIError(403, "forbidden", f"this token does not open world {world_id!r}")
        ctx = WorldContext(world_id=world_id, session=session, seed=world.seed, world=world)
        request.state.world_ctx = ctx  # for WorldRoute's commit-and-retry
        yield ctx


def world_context_by_token(request: Request) -> Iterator[WorldContext]:
    """FastAPI dependency for routes whose URL names no world (e.g. Google's media-upload
    paths, which the official SDK builds from the host alone): the token says which world."""
    token = presented_world_token(request)
    if not token:
        raise APIError(
            401, "unauthorized", "missing world token: send 'Authorization: Bearer <world token>'"
        )
    db = request.app.state.db
    with db.session() as session:
        world = session.scalar(select(WorldRow).where(WorldRow.token_sha256 == token_digest(token)))
        if world is None:
            raise APIError(401, "unauthorized", "this token opens no world")
        lock_world(session, world.id)
        session.refresh(world)  # as the lock holder left it
        ctx = WorldContext(world_id=world.id, session=session, seed=world.seed, world=world)
        request.state.world_ctx = ctx
        yield ctx


# The management routes' class: lock, commit, retry; failures go to the service's handlers.
WorldRoute = world_route()


# scope="function": commit before the response goes out, so a client that gets an answer
# always reads its own write in the next request (and a failing commit is an error answer).
WorldCtx = Annotated[WorldContext, Depends(world_context, scope="function")]
WorldCtxByToken = Annotated[WorldContext, Depends(world_context_by_token, scope="function")]


def rejects(reason: str, status: int = 400) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route whose real API answers ``status`` (400) to some schema-valid
    input (``reason`` says when: a token it did not hand out, a label id naming no label, ...).
    The OpenAPI document keeps it as the route's own response (``app._document_errors``); no
    route answers a schema-valid request with another 4xx than 401/403/404/409/429 and these
    (``tests/tools/test_fuzz.py``)."""
    return {status: {"description": reason}}


def json_body_doc(
    required: dict[str, dict[str, Any]], **optional: dict[str, Any]
) -> dict[str, Any]:
    """``openapi_extra=`` declaring the body of a route that reads it by hand (a ``dict`` or
    ``Request`` dependency, so FastAPI documents none): a required object whose ``required``
    properties the route checks, each schema just the route's own check (no stricter: a value
    outside it is a 400; no looser: a value inside it passes that check); other
    properties pass (``additionalProperties``), as the real APIs ignore unknown ones."""
    schema = {
        "type": "object",
        "required": sorted(required),
        "properties": {**required, **optional},
    }
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
