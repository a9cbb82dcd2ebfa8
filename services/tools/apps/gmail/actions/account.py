"""The world's mailbox: set-up, the user check, the profile, all its messages and the
``historyId`` bump every change makes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import defer

from services.tools.apps.gmail.actions._base import DEFAULT_ADDRESS, GmailError
from services.tools.apps.gmail.models import (
    GmailHistory,
    GmailMailbox,
    GmailMessage,
)
from services.tools.context import WorldContext

# --- mailbox -----------------------------------------------------------------------------


def mailbox(ctx: WorldContext) -> GmailMailbox:
    box = ctx.session.get(GmailMailbox, ctx.world_id)
    if box is None:
        box = GmailMailbox(
            world_id=ctx.world_id,
            email=DEFAULT_ADDRESS,
            display_name="Me",
            history_id=1000,
            label_seq=0,
        )
        ctx.session.add(box)
        ctx.session.flush()
    return box


def setup_mailbox(ctx: WorldContext, email: str, display_name: str = "") -> GmailMailbox:
    box = mailbox(ctx)
    box.email = email.lower()
    box.display_name = display_name
    return box


def check_user(ctx: WorldContext, user_id: str) -> GmailMailbox:
    box = mailbox(ctx)
    if user_id != "me" and user_id.lower() != box.email:
        raise GmailError(403, f"Delegation denied for {box.email}")
    return box


def profile(ctx: WorldContext) -> dict[str, Any]:
    box = mailbox(ctx)
    msgs = _all_messages(ctx)
    return {
        "emailAddress": box.email,
        "messagesTotal": len(msgs),
        "threadsTotal": len({m.thread_id for m in msgs}),
        "historyId": str(box.history_id),
    }


def _bump(ctx: WorldContext, kind: str, msg: GmailMessage, labels: list[str]) -> int:
    box = mailbox(ctx)
    box.history_id += 1
    ctx.session.add(
        GmailHistory(
            world_id=ctx.world_id,
            id=box.history_id,
            kind=kind,
            message_id=msg.id,
            thread_id=msg.thread_id,
            label_ids=sorted(labels),
            message_labels=list(msg.label_ids),
        )
    )
    return box.history_id


# --- messages ----------------------------------------------------------------------------


def _all_messages(ctx: WorldContext, with_raw: bool = False) -> list[GmailMessage]:
    stmt = select(GmailMessage).where(GmailMessage.world_id == ctx.world_id)
    if not with_raw:
        stmt = stmt.options(defer(GmailMessage.raw))
    return list(ctx.session.scalars(stmt))
