"""Gmail's part of ``GET /worlds/{id}/state``: the mailbox as a verifier reads it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import defer

from services.tools.apps.gmail.models import GmailDraft, GmailLabel, GmailMailbox, GmailMessage
from services.tools.context import WorldContext, _aware


def export_state(ctx: WorldContext) -> dict[str, Any]:
    box = ctx.session.get(GmailMailbox, ctx.world_id)
    msgs = ctx.session.scalars(
        select(GmailMessage)
        .options(defer(GmailMessage.raw))
        .where(GmailMessage.world_id == ctx.world_id)
        .order_by(GmailMessage.internal_date, GmailMessage.id)
    )
    labels = ctx.session.scalars(
        select(GmailLabel).where(GmailLabel.world_id == ctx.world_id).order_by(GmailLabel.id)
    )
    drafts = ctx.session.scalars(
        select(GmailDraft).where(GmailDraft.world_id == ctx.world_id).order_by(GmailDraft.id)
    )
    return {
        "emailAddress": box.email if box else None,
        "historyId": box.history_id if box else None,
        "labels": [{"id": lab.id, "name": lab.name} for lab in labels],
        "drafts": [{"id": d.id, "messageId": d.message_id} for d in drafts],
        "messages": [
            {
                "id": m.id,
                "threadId": m.thread_id,
                "labelIds": list(m.label_ids),
                "internalDate": _aware(m.internal_date).isoformat(),
                "from": m.sender,
                "to": m.to,
                "cc": m.cc,
                "subject": m.subject,
                "messageId": m.rfc822_id,
                "text": m.text,
                "attachments": [a.get("filename") for a in m.attachments],
            }
            for m in msgs
        ],
    }


def ensure_setup(ctx: WorldContext) -> None:
    """Every world has a mailbox from creation, so no read ever has to create one."""
    from services.tools.apps.gmail.actions import mailbox

    mailbox(ctx)
