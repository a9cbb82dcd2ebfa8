"""Gmail's operations as plain functions over a :class:`WorldContext`.

Routes, the MCP server, NPCs, scenario effects and oracle solvers all call these, so every
path through the app obeys the same rules: messages are immutable except their labels, a
thread is found from ``threadId`` or the References / In-Reply-To headers, every change bumps
the mailbox ``historyId`` and lands in ``history.list``, and every write is recorded in the
world's action log.

Why one file: messages, threads, labels, drafts and history share one mailbox model and its
private helpers (label bookkeeping, history records, threading); the MIME codec (``mime``)
and the query language (``search``) are already apart, and splitting the rest would scatter
one API's rules over modules that all import each other's internals.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, defer

from services.tools.apps.gmail import mime
from services.tools.apps.gmail.models import (
    GmailDraft,
    GmailHistory,
    GmailLabel,
    GmailMailbox,
    GmailMessage,
)
from services.tools.apps.gmail.search import (
    SearchDoc,
    SearchEnv,
    SearchError,
    matches,
    mentions_spam_or_trash,
    parse_query,
)
from services.tools.context import WorldContext

APP = "gmail"
DEFAULT_ADDRESS = "me@k3stack.test"
SYSTEM_LABELS = [
    "CHAT",
    "SENT",
    "INBOX",
    "IMPORTANT",
    "TRASH",
    "DRAFT",
    "SPAM",
    "CATEGORY_FORUMS",
    "CATEGORY_UPDATES",
    "CATEGORY_PERSONAL",
    "CATEGORY_PROMOTIONS",
    "CATEGORY_SOCIAL",
    "STARRED",
    "UNREAD",
]
# Labels a client may not add or remove by hand (Gmail sets them itself).
FIXED_LABELS = {"SENT", "DRAFT", "CHAT"}
HIDDEN_SYSTEM = {
    "CHAT",
    "CATEGORY_FORUMS",
    "CATEGORY_UPDATES",
    "CATEGORY_PERSONAL",
    "CATEGORY_PROMOTIONS",
    "CATEGORY_SOCIAL",
}
MAX_BATCH = 1000

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_EXISTS",
    412: "FAILED_PRECONDITION",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
}
_REASON = {
    400: "badRequest",
    401: "authError",
    403: "forbidden",
    404: "notFound",
    405: "methodNotAllowed",
    409: "duplicate",
    412: "failedPrecondition",
    413: "uploadTooLarge",
    429: "rateLimitExceeded",
    500: "backendError",
}


class GmailError(Exception):
    """An error in Google's shape: ``{"error": {"code", "message", "errors", "status"}}``."""

    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASON.get(code, "error")

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, self.reason)


def error_body(code: int, message: str, reason: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": message,
            "errors": [
                {
                    "message": message,
                    "domain": "global",
                    "reason": reason or _REASON.get(code, "error"),
                }
            ],
            "status": _STATUS.get(code, "UNKNOWN"),
        }
    }


def not_found() -> GmailError:
    return GmailError(404, "Requested entity was not found.")


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


# --- labels ------------------------------------------------------------------------------


def _user_labels(ctx: WorldContext) -> list[GmailLabel]:
    return list(
        ctx.session.scalars(
            select(GmailLabel).where(GmailLabel.world_id == ctx.world_id).order_by(GmailLabel.id)
        )
    )


def _norm(name: str) -> str:
    import re

    return re.sub(r"[\s/_-]+", "-", name.strip().lower())


def search_env(ctx: WorldContext) -> SearchEnv:
    by_name = {_norm(s): s for s in SYSTEM_LABELS}
    by_name.update(
        {_norm(s.removeprefix("CATEGORY_")): s for s in SYSTEM_LABELS if s.startswith("CATEGORY_")}
    )
    users = _user_labels(ctx)
    for lab in users:
        by_name[_norm(lab.name)] = lab.id
    return SearchEnv(
        now=ctx.now,
        me=mailbox(ctx).email,
        label_ids_by_name=by_name,
        user_label_ids={lab.id for lab in users},
    )


def _label_counts(ctx: WorldContext, label_id: str) -> dict[str, int]:
    msgs = [m for m in _all_messages(ctx) if label_id in m.label_ids]
    unread = [m for m in msgs if "UNREAD" in m.label_ids]
    return {
        "messagesTotal": len(msgs),
        "messagesUnread": len(unread),
        "threadsTotal": len({m.thread_id for m in msgs}),
        "threadsUnread": len({m.thread_id for m in unread}),
    }


def label_json(ctx: WorldContext, label_id: str, counts: bool = False) -> dict[str, Any]:
    if label_id in SYSTEM_LABELS:
        out: dict[str, Any] = {"id": label_id, "name": label_id, "type": "system"}
        if label_id not in HIDDEN_SYSTEM:
            out["messageListVisibility"] = "hide" if label_id in ("SPAM", "TRASH") else "show"
            out["labelListVisibility"] = "labelShow"
    else:
        lab = ctx.session.get(GmailLabel, (ctx.world_id, label_id))
        if lab is None:
            raise not_found()
        out = {
            "id": lab.id,
            "name": lab.name,
            "type": "user",
            "messageListVisibility": lab.message_list_visibility,
            "labelListVisibility": lab.label_list_visibility,
        }
        if lab.color:
            out["color"] = lab.color
    if counts:
        out.update(_label_counts(ctx, label_id))
    return out


def list_labels(ctx: WorldContext) -> list[dict[str, Any]]:
    return [label_json(ctx, s) for s in SYSTEM_LABELS] + [
        label_json(ctx, lab.id) for lab in _user_labels(ctx)
    ]


_VIS_MSG = {"show", "hide"}
_VIS_LABEL = {"labelShow", "labelShowIfUnread", "labelHide"}


def _validate_label_fields(ctx: WorldContext, fields: dict[str, Any], own_id: str | None) -> None:
    if "name" in fields:
        name = fields["name"]
        if not isinstance(name, str) or not name.strip() or len(name) > 225:
            raise GmailError(400, "Invalid label name")
        if _norm(name) in {_norm(s) for s in SYSTEM_LABELS}:
            raise GmailError(400, "Invalid label name")
        for lab in _user_labels(ctx):
            if lab.id != own_id and lab.name.lower() == name.strip().lower():
                raise GmailError(409, "Label name exists or conflicts")
    if fields.get("messageListVisibility") not in (None, *_VIS_MSG):
        raise GmailError(400, "Invalid messageListVisibility")
    if fields.get("labelListVisibility") not in (None, *_VIS_LABEL):
        raise GmailError(400, "Invalid labelListVisibility")


def create_label(ctx: WorldContext, fields: dict[str, Any]) -> dict[str, Any]:
    if not fields.get("name"):
        raise GmailError(400, "Invalid label name")
    _validate_label_fields(ctx, fields, None)
    box = mailbox(ctx)
    box.label_seq += 1
    lab = GmailLabel(
        world_id=ctx.world_id,
        id=f"Label_{box.label_seq}",
        name=fields["name"].strip(),
        message_list_visibility=fields.get("messageListVisibility") or "show",
        label_list_visibility=fields.get("labelListVisibility") or "labelShow",
        color=fields.get("color"),
    )
    ctx.session.add(lab)
    ctx.session.flush()
    ctx.record(APP, "labels.create", {"id": lab.id, "name": lab.name})
    return label_json(ctx, lab.id)


def update_label(
    ctx: WorldContext, label_id: str, fields: dict[str, Any], patch: bool
) -> dict[str, Any]:
    if label_id in SYSTEM_LABELS:
        raise GmailError(400, "Invalid update request")
    lab = ctx.session.get(GmailLabel, (ctx.world_id, label_id))
    if lab is None:
        raise not_found()
    if not patch and not fields.get("name"):
        raise GmailError(400, "Invalid label name")
    _validate_label_fields(ctx, fields, label_id)
    if fields.get("name"):
        lab.name = fields["name"].strip()
    if fields.get("messageListVisibility"):
        lab.message_list_visibility = fields["messageListVisibility"]
    if fields.get("labelListVisibility"):
        lab.label_list_visibility = fields["labelListVisibility"]
    if "color" in fields and (fields["color"] is not None or not patch):
        lab.color = fields["color"]
    ctx.record(APP, "labels.update", {"id": lab.id, "name": lab.name})
    return label_json(ctx, lab.id)


def delete_label(ctx: WorldContext, label_id: str) -> None:
    if label_id in SYSTEM_LABELS:
        raise GmailError(400, "Invalid delete request")
    lab = ctx.session.get(GmailLabel, (ctx.world_id, label_id))
    if lab is None:
        raise not_found()
    for msg in _all_messages(ctx):
        if label_id in msg.label_ids:
            msg.label_ids = [x for x in msg.label_ids if x != label_id]
            msg.history_id = _bump(ctx, "labelRemoved", msg, [label_id])
    ctx.session.delete(lab)
    ctx.record(APP, "labels.delete", {"id": label_id, "name": lab.name})


def _check_label_ids(ctx: WorldContext, ids: Iterable[str], manual: bool) -> list[str]:
    users = {lab.id for lab in _user_labels(ctx)}
    out = []
    for lid in ids:
        if not isinstance(lid, str) or (lid not in SYSTEM_LABELS and lid not in users):
            raise GmailError(400, f"Invalid label: {lid}")
        if manual and lid in FIXED_LABELS:
            raise GmailError(400, f"Invalid label: {lid}")
        out.append(lid)
    return out


def label_id_by_name(ctx: WorldContext, name: str) -> str | None:
    if name.upper() in SYSTEM_LABELS:
        return name.upper()
    for lab in _user_labels(ctx):
        if lab.name.lower() == name.lower():
            return lab.id
    return None


# --- messages ----------------------------------------------------------------------------


def _all_messages(ctx: WorldContext, with_raw: bool = False) -> list[GmailMessage]:
    stmt = select(GmailMessage).where(GmailMessage.world_id == ctx.world_id)
    if not with_raw:
        stmt = stmt.options(defer(GmailMessage.raw))
    return list(ctx.session.scalars(stmt))


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
