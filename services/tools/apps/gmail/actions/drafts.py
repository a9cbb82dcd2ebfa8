"""Gmail's ``users.drafts`` methods."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from services.tools.apps.gmail import mime
from services.tools.apps.gmail.actions._base import APP, GmailError, not_found
from services.tools.apps.gmail.actions.account import _all_messages, mailbox
from services.tools.apps.gmail.actions.messages import (
    _action_payload,
    _aware,
    _new_rfc822_id,
    delete_message,
    get_message_row,
    message_json,
    search,
    send,
    store_message,
)
from services.tools.apps.gmail.models import (
    GmailDraft,
    GmailMessage,
)
from services.tools.context import WorldContext

# --- drafts ------------------------------------------------------------------------------


def get_draft_row(ctx: WorldContext, draft_id: str) -> GmailDraft:
    d = ctx.session.get(GmailDraft, (ctx.world_id, draft_id)) if draft_id else None
    if d is None:
        raise not_found()
    return d


def _draft_message(ctx: WorldContext, raw: bytes, thread_id: str | None) -> GmailMessage:
    box = mailbox(ctx)
    try:
        raw = mime.ensure_headers(
            raw, sender=box.email, date=ctx.now, message_id=_new_rfc822_id(ctx)
        )
    except mime.MimeError as exc:
        raise GmailError(400, f"Invalid raw message: {exc}") from None
    return store_message(ctx, raw, ["DRAFT"], thread_id=thread_id)


def draft_json(ctx: WorldContext, d: GmailDraft, fmt: str | None = None) -> dict[str, Any]:
    msg = get_message_row(ctx, d.message_id)
    if fmt is None:
        return {
            "id": d.id,
            "message": {"id": msg.id, "threadId": msg.thread_id, "labelIds": list(msg.label_ids)},
        }
    return {"id": d.id, "message": message_json(ctx, msg, fmt)}


def create_draft(ctx: WorldContext, raw: bytes, thread_id: str | None) -> GmailDraft:
    msg = _draft_message(ctx, raw, thread_id)
    d = GmailDraft(world_id=ctx.world_id, id="r" + ctx.new_id(width=18), message_id=msg.id)
    ctx.session.add(d)
    ctx.session.flush()
    ctx.record(APP, "drafts.create", {"id": d.id} | _action_payload(msg, ctx))
    return d


def update_draft(ctx: WorldContext, draft_id: str, raw: bytes, thread_id: str | None) -> GmailDraft:
    d = get_draft_row(ctx, draft_id)
    old = d.message_id
    msg = _draft_message(ctx, raw, thread_id)
    d.message_id = msg.id
    delete_message(ctx, old, record=False)
    ctx.record(APP, "drafts.update", {"id": d.id} | _action_payload(msg, ctx))
    return d


def send_draft(
    ctx: WorldContext, draft_id: str, raw: bytes | None = None, thread_id: str | None = None
) -> GmailMessage:
    d = get_draft_row(ctx, draft_id)
    old = get_message_row(ctx, d.message_id)
    body = raw if raw is not None else ctx.session.get(GmailMessage, (ctx.world_id, old.id)).raw  # type: ignore[union-attr]
    tid = thread_id or (old.thread_id if old.thread_id != old.id else None)
    delete_message(ctx, old.id, record=False)
    return send(ctx, body, thread_id=tid, action="messages.send")


def list_drafts(ctx: WorldContext, q: str | None, include_spam_trash: bool) -> list[GmailDraft]:
    drafts = list(
        ctx.session.scalars(select(GmailDraft).where(GmailDraft.world_id == ctx.world_id))
    )
    if q:
        ok = {m.id for m in search(ctx, q, ["DRAFT"], include_spam_trash)}
        drafts = [d for d in drafts if d.message_id in ok]
    by_msg = {m.id: m for m in _all_messages(ctx)}
    drafts.sort(
        key=lambda d: (
            _aware(by_msg[d.message_id].internal_date),
            by_msg[d.message_id].created_seq,
        ),
        reverse=True,
    )
    return drafts


def delete_draft(ctx: WorldContext, draft_id: str) -> None:
    d = get_draft_row(ctx, draft_id)
    mid = d.message_id
    delete_message(ctx, mid, record=False)
    ctx.record(APP, "drafts.delete", {"id": draft_id})
