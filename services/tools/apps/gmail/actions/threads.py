"""Gmail's ``users.threads`` methods over the messages of one thread."""

from __future__ import annotations

from typing import Any

from services.tools.apps.gmail.actions._base import not_found
from services.tools.apps.gmail.actions.messages import (
    delete_message,
    message_json,
    modify,
    search,
    thread_rows,
    trash,
    untrash,
)
from services.tools.apps.gmail.models import (
    GmailMessage,
)
from services.tools.context import WorldContext


def get_thread_rows(ctx: WorldContext, thread_id: str) -> list[GmailMessage]:
    rows = thread_rows(ctx, thread_id) if thread_id else []
    if not rows:
        raise not_found()
    return rows


def thread_json(
    ctx: WorldContext, thread_id: str, fmt: str = "full", metadata_headers: list[str] | None = None
) -> dict[str, Any]:
    rows = get_thread_rows(ctx, thread_id)
    msgs = [
        message_json(
            ctx,
            ctx.session.get(GmailMessage, (ctx.world_id, m.id)),
            fmt,  # type: ignore[arg-type]
            metadata_headers,
        )
        for m in rows
    ]
    return {"id": thread_id, "historyId": str(max(m.history_id for m in rows)), "messages": msgs}


def list_threads(
    ctx: WorldContext, q: str | None, label_ids: list[str] | None, include_spam_trash: bool
) -> list[dict[str, Any]]:
    seen: dict[str, GmailMessage] = {}
    for msg in search(ctx, q, label_ids, include_spam_trash):
        seen.setdefault(msg.thread_id, msg)
    return [
        {"id": tid, "snippet": m.snippet, "historyId": str(m.history_id)} for tid, m in seen.items()
    ]


def modify_thread(
    ctx: WorldContext, thread_id: str, add: list[str], remove: list[str]
) -> list[GmailMessage]:
    rows = get_thread_rows(ctx, thread_id)
    for m in rows:
        modify(ctx, m.id, add, remove)
    return rows


def trash_thread(ctx: WorldContext, thread_id: str, undo: bool = False) -> list[GmailMessage]:
    rows = get_thread_rows(ctx, thread_id)
    for m in rows:
        (untrash if undo else trash)(ctx, m.id)
    return rows


def delete_thread(ctx: WorldContext, thread_id: str) -> None:
    for m in get_thread_rows(ctx, thread_id):
        delete_message(ctx, m.id)
