"""Gmail's messages: storing and threading mail, send / insert / deliver, search, label
changes, trash, delete and attachments.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, defer

from services.tools.apps.gmail import mime
from services.tools.apps.gmail.actions._base import APP, MAX_BATCH, GmailError, not_found
from services.tools.apps.gmail.actions.account import _all_messages, _bump, mailbox
from services.tools.apps.gmail.actions.labels import _check_label_ids, search_env
from services.tools.apps.gmail.models import (
    GmailDraft,
    GmailMessage,
)
from services.tools.apps.gmail.search import (
    SearchDoc,
    SearchError,
    matches,
    mentions_spam_or_trash,
    parse_query,
)
from services.tools.context import WorldContext


def get_message_row(ctx: WorldContext, message_id: str) -> GmailMessage:
    msg = ctx.session.get(GmailMessage, (ctx.world_id, message_id)) if message_id else None
    if msg is None:
        raise not_found()
    return msg


def _thread_for(ctx: WorldContext, parsed: mime.ParsedMessage, thread_id: str | None) -> str | None:
    session: Session = ctx.session
    if thread_id:
        exists = session.scalar(
            select(GmailMessage.id)
            .where(GmailMessage.world_id == ctx.world_id, GmailMessage.thread_id == thread_id)
            .limit(1)
        )
        if exists is None:
            raise GmailError(404, "Requested entity was not found.")
        return thread_id
    refs = parsed.references
    if refs:
        found = session.scalars(
            select(GmailMessage)
            .options(defer(GmailMessage.raw))
            .where(GmailMessage.world_id == ctx.world_id, GmailMessage.rfc822_id.in_(refs))
        )
        rows = sorted(found, key=lambda m: (_aware(m.internal_date), m.created_seq))
        if rows:
            return rows[-1].thread_id
    return None


def _header_date(parsed: mime.ParsedMessage) -> datetime | None:
    try:
        dt = parsedate_to_datetime(parsed.h("date"))
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def store_message(
    ctx: WorldContext,
    raw: bytes,
    labels: list[str],
    *,
    thread_id: str | None = None,
    internal_date: datetime | None = None,
    message_id: str | None = None,
) -> GmailMessage:
    """Parse and store a message (no action recorded: callers say what it was)."""
    try:
        parsed = mime.parse_message(raw)
    except mime.MimeError as exc:
        raise GmailError(400, f"Invalid raw message: {exc}") from None
    tid = _thread_for(ctx, parsed, thread_id)
    mid = message_id or ctx.new_id()
    extra = {}
    if parsed.h("delivered-to"):
        extra["deliveredTo"] = parsed.h("delivered-to")
    if parsed.h("list-id"):
        extra["listId"] = parsed.h("list-id")
    msg = GmailMessage(
        world_id=ctx.world_id,
        id=mid,
        thread_id=tid or mid,
        label_ids=sorted(set(labels)),
        internal_date=internal_date or ctx.now,
        history_id=0,
        size_estimate=len(raw),
        raw=raw,
        sender=parsed.h("from"),
        to=parsed.h("to"),
        cc=parsed.h("cc"),
        bcc=parsed.h("bcc"),
        subject=parsed.h("subject"),
        rfc822_id=parsed.h("message-id").strip(),
        references=parsed.references,
        snippet=parsed.snippet,
        text=parsed.text[:100_000],
        attachments=parsed.attachments,
        extra=extra,
    )
    ctx.session.add(msg)
    msg.history_id = _bump(ctx, "messageAdded", msg, msg.label_ids)
    msg.created_seq = msg.history_id
    ctx.session.flush()
    return msg


def _action_payload(msg: GmailMessage, ctx: WorldContext) -> dict[str, Any]:
    thread = thread_rows(ctx, msg.thread_id)
    return {
        "id": msg.id,
        "threadId": msg.thread_id,
        "from": mime.addresses(msg.sender),
        "to": mime.addresses(msg.to),
        "cc": mime.addresses(msg.cc),
        "subject": msg.subject,
        "rfc822msgid": msg.rfc822_id,
        "thread_msgids": [m.rfc822_id for m in thread if m.rfc822_id],
        "labelIds": list(msg.label_ids),
        "text": msg.text[:4000],
        "attachments": [a["filename"] for a in msg.attachments],
    }


def _new_rfc822_id(ctx: WorldContext) -> str:
    return f"<{ctx.new_id(width=20)}@mail.k3stack.test>"


def send(
    ctx: WorldContext, raw: bytes, thread_id: str | None = None, action: str = "messages.send"
) -> GmailMessage:
    box = mailbox(ctx)
    try:
        raw = mime.ensure_headers(
            raw, sender=box.email, date=ctx.now, message_id=_new_rfc822_id(ctx)
        )
        parsed = mime.parse_message(raw)
    except mime.MimeError as exc:
        raise GmailError(400, f"Invalid raw message: {exc}") from None
    recipients = mime.addresses(parsed.h("to"), parsed.h("cc"), parsed.h("bcc"))
    if not recipients:
        raise GmailError(400, "Invalid To header")
    labels = ["SENT"] + (["INBOX", "UNREAD"] if box.email in recipients else [])
    msg = store_message(ctx, raw, labels, thread_id=thread_id)
    ctx.record(APP, action, _action_payload(msg, ctx))
    return msg


def deliver(ctx: WorldContext, raw: bytes, labels: list[str] | None = None) -> GmailMessage:
    """Incoming mail (scenario events, NPCs): lands in the inbox, unread."""
    msg = store_message(ctx, raw, labels or ["INBOX", "UNREAD", "CATEGORY_PERSONAL"])
    ctx.record(APP, "messages.receive", _action_payload(msg, ctx))
    return msg


def insert(
    ctx: WorldContext,
    raw: bytes,
    label_ids: list[str] | None,
    thread_id: str | None,
    internal_date_source: str = "receivedTime",
    action: str = "messages.insert",
    default_labels: list[str] | None = None,
) -> GmailMessage:
    labels = _check_label_ids(ctx, label_ids or default_labels or [], manual=False)
    internal = None
    if internal_date_source == "dateHeader":
        try:
            internal = _header_date(mime.parse_message(raw))
        except mime.MimeError as exc:
            raise GmailError(400, f"Invalid raw message: {exc}") from None
    msg = store_message(ctx, raw, labels, thread_id=thread_id, internal_date=internal)
    ctx.record(APP, action, _action_payload(msg, ctx))
    return msg


def message_json(
    ctx: WorldContext,
    msg: GmailMessage,
    fmt: str = "full",
    metadata_headers: list[str] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": msg.id,
        "threadId": msg.thread_id,
        "labelIds": list(msg.label_ids),
        "snippet": msg.snippet,
        "sizeEstimate": msg.size_estimate,
        "historyId": str(msg.history_id),
        "internalDate": str(int(_aware(msg.internal_date).timestamp() * 1000)),
    }
    if fmt == "minimal":
        return out
    if fmt == "raw":
        out["raw"] = mime.b64url_encode(msg.raw)
        return out
    payload = mime.part_json(mime.parse_bytes(msg.raw), msg.id)
    if fmt == "metadata":
        wanted = {h.lower() for h in metadata_headers or []}
        headers = [h for h in payload["headers"] if not wanted or h["name"].lower() in wanted]
        payload = {
            "partId": payload["partId"],
            "mimeType": payload["mimeType"],
            "filename": payload["filename"],
            "headers": headers,
            "body": {"size": 0},
        }
    out["payload"] = payload
    return out


def _aware(dt: datetime) -> datetime:
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _doc(msg: GmailMessage) -> SearchDoc:
    return SearchDoc(
        id=msg.id,
        labels=set(msg.label_ids),
        internal_date=_aware(msg.internal_date),
        size=msg.size_estimate,
        sender=msg.sender,
        to=msg.to,
        cc=msg.cc,
        bcc=msg.bcc,
        delivered_to=(msg.extra or {}).get("deliveredTo", ""),
        subject=msg.subject,
        text=msg.text,
        msgid=msg.rfc822_id,
        list_id=(msg.extra or {}).get("listId", ""),
        filenames=[a.get("filename", "") for a in msg.attachments if a.get("filename")],
    )


def search(
    ctx: WorldContext,
    q: str | None = None,
    label_ids: list[str] | None = None,
    include_spam_trash: bool = False,
) -> list[GmailMessage]:
    """Messages matching ``q`` and carrying every label in ``label_ids``, newest first."""
    try:
        node = parse_query(q)
    except SearchError as exc:
        raise GmailError(400, f"Invalid query: {exc}") from None
    wanted = set(label_ids or [])
    env = search_env(ctx)
    keep_spam_trash = (
        include_spam_trash or mentions_spam_or_trash(node) or bool(wanted & {"SPAM", "TRASH"})
    )
    out = []
    for msg in _all_messages(ctx):
        labels = set(msg.label_ids)
        if not wanted <= labels:
            continue
        if not keep_spam_trash and labels & {"SPAM", "TRASH"}:
            continue
        if node is not None:
            try:
                ok = matches(node, _doc(msg), env)
            except SearchError as exc:
                raise GmailError(400, f"Invalid query: {exc}") from None
            if not ok:
                continue
        out.append(msg)
    out.sort(key=lambda m: (_aware(m.internal_date), m.created_seq), reverse=True)
    return out


def _change_labels(ctx: WorldContext, msg: GmailMessage, add: list[str], remove: list[str]) -> bool:
    before = set(msg.label_ids)
    after = (before | set(add)) - set(remove)
    if after == before:
        return False
    msg.label_ids = sorted(after)
    if after - before:
        msg.history_id = _bump(ctx, "labelAdded", msg, sorted(after - before))
    if before - after:
        msg.history_id = _bump(ctx, "labelRemoved", msg, sorted(before - after))
    return True


def modify(ctx: WorldContext, message_id: str, add: list[str], remove: list[str]) -> GmailMessage:
    add = _check_label_ids(ctx, add, manual=True)
    remove = _check_label_ids(ctx, remove, manual=True)
    msg = get_message_row(ctx, message_id)
    if _change_labels(ctx, msg, add, remove):
        ctx.record(
            APP,
            "messages.modify",
            {
                "id": msg.id,
                "threadId": msg.thread_id,
                "rfc822msgid": msg.rfc822_id,
                "add": add,
                "remove": remove,
            },
        )
    return msg


def batch_modify(ctx: WorldContext, ids: list[str], add: list[str], remove: list[str]) -> None:
    if len(ids) > MAX_BATCH:
        raise GmailError(400, f"Too many ids: at most {MAX_BATCH}")
    for mid in ids:
        modify(ctx, mid, add, remove)


def trash(ctx: WorldContext, message_id: str) -> GmailMessage:
    msg = get_message_row(ctx, message_id)
    if _change_labels(ctx, msg, ["TRASH"], []):
        ctx.record(
            APP,
            "messages.trash",
            {"id": msg.id, "threadId": msg.thread_id, "rfc822msgid": msg.rfc822_id},
        )
    return msg


def untrash(ctx: WorldContext, message_id: str) -> GmailMessage:
    msg = get_message_row(ctx, message_id)
    if _change_labels(ctx, msg, [], ["TRASH"]):
        ctx.record(
            APP,
            "messages.untrash",
            {"id": msg.id, "threadId": msg.thread_id, "rfc822msgid": msg.rfc822_id},
        )
    return msg


def delete_message(ctx: WorldContext, message_id: str, record: bool = True) -> None:
    msg = get_message_row(ctx, message_id)
    _bump(ctx, "messageDeleted", msg, [])
    ctx.session.execute(
        delete(GmailDraft).where(
            GmailDraft.world_id == ctx.world_id, GmailDraft.message_id == msg.id
        )
    )
    ctx.session.delete(msg)
    ctx.session.flush()
    if record:
        ctx.record(
            APP,
            "messages.delete",
            {"id": msg.id, "threadId": msg.thread_id, "rfc822msgid": msg.rfc822_id},
        )


def batch_delete(ctx: WorldContext, ids: list[str]) -> None:
    if len(ids) > MAX_BATCH:
        raise GmailError(400, f"Too many ids: at most {MAX_BATCH}")
    for mid in ids:
        if ctx.session.get(GmailMessage, (ctx.world_id, mid)) is not None:
            delete_message(ctx, mid)


def attachment(ctx: WorldContext, message_id: str, att_id: str) -> dict[str, Any]:
    msg = get_message_row(ctx, message_id)
    ref = mime.parse_attachment_id(att_id)
    if ref is None or ref[0] != msg.id:
        raise GmailError(400, "Invalid attachment token")
    part = mime.find_part(msg.raw, ref[1])
    if part is None:
        raise not_found()
    data = mime.part_data(part)
    return {"attachmentId": att_id, "size": len(data), "data": mime.b64url_encode(data)}


# --- threads -----------------------------------------------------------------------------


def thread_rows(ctx: WorldContext, thread_id: str) -> list[GmailMessage]:
    rows = ctx.session.scalars(
        select(GmailMessage)
        .options(defer(GmailMessage.raw))
        .where(GmailMessage.world_id == ctx.world_id, GmailMessage.thread_id == thread_id)
    )
    return sorted(rows, key=lambda m: (_aware(m.internal_date), m.created_seq))
