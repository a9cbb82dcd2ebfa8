"""The Responses API store: ``store: true`` keeps a response, so ``previous_response_id`` and
``client.responses.retrieve`` work; ``store: false`` keeps nothing.

A row holds the response as answered and the conversation that led to it (input items, then the
response's own output items), so a follow-up continues from exactly what the model saw. The
store is bounded: rows expire after ``ttl_s``, and beyond ``max_items`` the oldest go first. It
lives in the service's database (``K3STACK_DATABASE_URL``), under its own migrations.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, Float, String, delete, select
from sqlalchemy.orm import Mapped, mapped_column

from services.model.serving.protocol import OpenAIError
from shared.db import ServiceDatabase, service_base

if TYPE_CHECKING:
    from fastapi import Request

    from services.model.serving.responses import ResponsesRequest

MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"

Base = service_base()


class StoredResponse(Base):
    __tablename__ = "model_responses"

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float, index=True)
    expires_at: Mapped[float] = mapped_column(Float, index=True)
    response: Mapped[dict[str, Any]] = mapped_column(JSON)
    conversation: Mapped[list[Any]] = mapped_column(JSON)


class ResponseStore:
    """Stored responses, bounded in number and age."""

    def __init__(self, url: str, *, max_items: int, ttl_s: float) -> None:
        self.db = ServiceDatabase("model", url, MIGRATIONS)
        self.db.migrate()
        self.max_items = max_items
        self.ttl_s = ttl_s

    def put(self, response: dict[str, Any], conversation: list[Any]) -> None:
        now = time.time()
        with self.db.session() as s:
            s.add(
                StoredResponse(
                    id=response["id"],
                    created_at=now,
                    expires_at=now + self.ttl_s,
                    response=response,
                    conversation=conversation,
                )
            )
        self._prune(now)

    def get(self, response_id: str) -> StoredResponse | None:
        with self.db.session() as s:
            row = s.get(StoredResponse, response_id)
            if row is None or row.expires_at <= time.time():
                return None
            s.expunge(row)
            return row

    def delete(self, response_id: str) -> bool:
        with self.db.session() as s:
            return bool(s.execute(delete(StoredResponse).filter_by(id=response_id)).rowcount)

    def _prune(self, now: float) -> None:
        with self.db.session() as s:
            s.execute(delete(StoredResponse).where(StoredResponse.expires_at <= now))
            keep = (
                select(StoredResponse.created_at)
                .order_by(StoredResponse.created_at.desc())
                .offset(self.max_items)
                .limit(1)
                .scalar_subquery()
            )
            s.execute(delete(StoredResponse).where(StoredResponse.created_at <= keep))

    def close(self) -> None:
        self.db.close()


# ----- the routes' side -------------------------------------------------------------------------


def store_of(request: Request) -> ResponseStore | None:
    return getattr(request.app.state, "response_store", None)


def _items(value: str | list[Any]) -> list[Any]:
    return [{"role": "user", "content": value}] if isinstance(value, str) else list(value)


async def with_history(
    store: ResponseStore | None, req: ResponsesRequest
) -> tuple[ResponsesRequest, list[Any]]:
    """``req`` with its ``previous_response_id`` conversation put before its input, and the
    whole conversation so far (without a store the id stays, and the request is refused)."""
    if not req.previous_response_id or store is None:
        return req, _items(req.input)
    row = await asyncio.to_thread(store.get, req.previous_response_id)
    if row is None:
        raise OpenAIError(  # 400, as OpenAI answers an unknown previous_response_id
            400,
            f"previous_response_id: no stored response {req.previous_response_id!r} (never "
            "stored, stored with store: false, expired, or deleted)",
            param="previous_response_id",
            code="response_not_found",
        )
    conversation = [*row.conversation, *_items(req.input)]
    return req.model_copy(update={"input": conversation, "previous_response_id": None}), (
        conversation
    )


async def keep(
    store: ResponseStore | None,
    req: ResponsesRequest,
    conversation: list[Any],
    response: dict[str, Any],
) -> None:
    """Store ``response`` unless the request said ``store: false`` (OpenAI's default is true)."""
    if store is None or req.store is False:
        return
    items = [*conversation, *response.get("output", [])]
    await asyncio.to_thread(store.put, response, items)


async def keep_streamed(
    store: ResponseStore | None,
    req: ResponsesRequest,
    conversation: list[Any],
    events: AsyncIterator[dict[str, Any]],
) -> AsyncIterator[dict[str, Any]]:
    """The stream's events; the response of its ``response.completed`` event is stored."""
    async for event in events:
        if event.get("type") in ("response.completed", "response.incomplete"):
            await keep(store, req, conversation, event["response"])
        yield event


async def retrieve(store: ResponseStore | None, response_id: str) -> dict[str, Any]:
    row = None if store is None else await asyncio.to_thread(store.get, response_id)
    if row is None:
        raise OpenAIError(404, f"no stored response {response_id!r}", code="response_not_found")
    return row.response


async def forget(store: ResponseStore | None, response_id: str) -> None:
    if store is None or not await asyncio.to_thread(store.delete, response_id):
        raise OpenAIError(404, f"no stored response {response_id!r}", code="response_not_found")
