"""Gmail's ``users.history.list``: the mailbox's changes since a ``historyId``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from services.tools.apps.gmail.actions._base import GmailError, not_found
from services.tools.apps.gmail.actions.account import mailbox
from services.tools.apps.gmail.models import (
    GmailHistory,
)
from services.tools.context import WorldContext

# --- history -----------------------------------------------------------------------------

_HISTORY_KEYS = {
    "messageAdded": "messagesAdded",
    "messageDeleted": "messagesDeleted",
    "labelAdded": "labelsAdded",
    "labelRemoved": "labelsRemoved",
}


def history(
    ctx: WorldContext, start: int, types: list[str] | None, label_id: str | None
) -> list[dict[str, Any]]:
    box = mailbox(ctx)
    oldest = ctx.session.scalar(
        select(GmailHistory.id)
        .where(GmailHistory.world_id == ctx.world_id)
        .order_by(GmailHistory.id)
        .limit(1)
    )
    if start > box.history_id or (oldest is not None and start < oldest - 1):
        raise not_found()
    bad = [t for t in types or [] if t not in _HISTORY_KEYS]
    if bad:
        raise GmailError(400, f"Invalid historyTypes: {bad[0]}")
    rows = ctx.session.scalars(
        select(GmailHistory)
        .where(GmailHistory.world_id == ctx.world_id, GmailHistory.id > start)
        .order_by(GmailHistory.id)
    )
    out = []
    for h in rows:
        if types and h.kind not in types:
            continue
        if label_id and label_id not in h.message_labels and label_id not in h.label_ids:
            continue
        ref = {"id": h.message_id, "threadId": h.thread_id}
        entry: dict[str, Any] = {"id": str(h.id), "messages": [ref]}
        item: dict[str, Any] = {"message": ref | {"labelIds": list(h.message_labels)}}
        if h.kind in ("labelAdded", "labelRemoved"):
            item["labelIds"] = list(h.label_ids)
        entry[_HISTORY_KEYS[h.kind]] = [item]
        out.append(entry)
    return out
