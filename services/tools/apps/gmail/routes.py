"""Gmail v1 REST routes under ``/worlds/{world_id}/gmail/v1/users/{userId}/…``.

Paths, parameters and bodies follow Google's discovery document, so
``googleapiclient.discovery.build("gmail", "v1", client_options={"api_endpoint":
"<tools>/worlds/<id>/"})`` works unchanged. The SDK sends media uploads to
``/upload/gmail/v1/…`` at the host root, so those routes also exist without a world in the
path (``upload_router``), where the world token alone names the world.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from services.tools.app_common import google_error_model
from services.tools.apps.gmail import actions as gm
from services.tools.apps.gmail import mime
from services.tools.apps.gmail.actions import GmailError
from services.tools.bounds import BodyTooDeep, check_json_text, json_depth_limit
from services.tools.context import WorldContext, WorldCtx, WorldCtxByToken, WorldRoute, rejects

PREFIX = "/worlds/{world_id}/gmail/v1/users/{userId}"
router = APIRouter(prefix=PREFIX, tags=["gmail"], route_class=WorldRoute)
upload_router = APIRouter(tags=["gmail"], route_class=WorldRoute)
MAX_UPLOAD = 36 * 1024 * 1024  # Gmail's limit is 35 MB per message
MAX_PAGE = 500

Format = Literal["full", "metadata", "minimal", "raw"]


ERROR_MODEL = google_error_model("Gmail")


def error_response(status: int, message: str) -> JSONResponse:
    """Google's error body; the tools app uses it for every failure under ``/gmail/``."""
    return JSONResponse(gm.error_body(status, message), status_code=status)


# --- bodies ------------------------------------------------------------------------------


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    raw: str | None = Field(None, max_length=MAX_UPLOAD * 2)
    threadId: str | None = Field(None, max_length=64)
    labelIds: list[str] | None = Field(None, max_length=100)


class RawMessageIn(MessageIn):
    """A message given whole (``send``, ``insert``, ``import``): ``raw`` is required."""

    raw: str = Field(min_length=1, max_length=MAX_UPLOAD * 2)


class ModifyIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    addLabelIds: list[str] = Field(default_factory=list, max_length=100)
    removeLabelIds: list[str] = Field(default_factory=list, max_length=100)


class BatchModifyIn(ModifyIn):
    ids: list[str] = Field(default_factory=list, max_length=gm.MAX_BATCH)


class BatchDeleteIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    ids: list[str] = Field(default_factory=list, max_length=gm.MAX_BATCH)


class DraftIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = Field(None, max_length=64)
    message: MessageIn | None = None


class LabelColor(BaseModel):
    textColor: str | None = Field(None, max_length=16)
    backgroundColor: str | None = Field(None, max_length=16)


class LabelIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = Field(None, max_length=64)
    name: str | None = Field(None, max_length=225)
    messageListVisibility: Literal["show", "hide"] | None = None
    labelListVisibility: Literal["labelShow", "labelShowIfUnread", "labelHide"] | None = None
    type: str | None = Field(None, max_length=16)
    color: LabelColor | None = None

    def fields(self) -> dict[str, Any]:
        out = self.model_dump(exclude_unset=True, exclude={"id", "type"})
        if self.color is not None:
            out["color"] = self.color.model_dump(exclude_none=True)
        return {
            k: v
            for k, v in out.items()
            if k in ("name", "messageListVisibility", "labelListVisibility", "color")
        }


class NamedLabelIn(LabelIn):
    """``labels.create`` and ``labels.update``: the label's name is required."""

    name: str = Field(min_length=1, max_length=225)


PAGE_TOKEN_400 = rejects("`Invalid pageToken`: a page token this list did not hand out")
LABELS_400 = rejects("`Invalid label`: a label id naming no label of the mailbox")
RAW_400 = rejects("`Invalid value for ByteString`: `raw` does not decode (base64url) to a message")
SEND_400 = rejects(
    "`Invalid value for ByteString` or `Recipient address required`: `raw` does not decode "
    "to a message, or the message names no recipient"
)
LABEL_NAME_400 = rejects(
    "`Invalid label name`: a blank name or a system label's; `Invalid update request`: a "
    "system label"
)
DRAFT_400 = rejects(
    "`Missing message`, `Missing draft id`, `Invalid value for ByteString` or `Recipient "
    "address required`: the draft names no message (or no draft), or its message does not "
    "decode or names no recipient"
)


# --- helpers -----------------------------------------------------------------------------


def _raw(body: MessageIn | None) -> bytes:
    if body is None or not body.raw:
        raise GmailError(400, "Missing message: 'raw' (base64url RFC 2822) is required")
    try:
        return mime.b64url_decode(body.raw)
    except mime.MimeError as exc:
        raise GmailError(400, f"Invalid value for ByteString: {exc}") from None


def _page(
    items: list[Any], page_token: str | None, max_results: int
) -> tuple[list[Any], str | None]:
    offset = 0
    if page_token:
        try:
            kind, _, num = (
                base64.urlsafe_b64decode(page_token + "=" * (-len(page_token) % 4))
                .decode()
                .partition(":")
            )
            offset = int(num)
            if kind != "o" or offset < 0:
                raise ValueError
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise GmailError(400, "Invalid pageToken") from None
    size = min(max_results, MAX_PAGE)
    page = items[offset : offset + size]
    nxt = None
    if offset + size < len(items):
        nxt = base64.urlsafe_b64encode(f"o:{offset + size}".encode()).decode().rstrip("=")
    return page, nxt


def _user(ctx: WorldContext, user_id: str) -> None:
    gm.check_user(ctx, user_id)


# --- profile -----------------------------------------------------------------------------


@router.get("/profile", operation_id="gmail.users.getProfile")
def get_profile(userId: str, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    return gm.profile(ctx)


@dataclass
class ListQuery:
    """The query parameters Gmail's ``messages.list`` and ``threads.list`` share."""

    q: str | None = Query(None, max_length=2048)
    labelIds: list[str] | None = Query(None)
    pageToken: str | None = Query(None, max_length=256)
    maxResults: int = Query(100, ge=1, le=100_000)
    includeSpamTrash: bool = False


Listing = Annotated[ListQuery, Depends()]


def _listed(key: str, items: list[Any], page_token: str | None, max_results: int,
            shape: Callable[[Any], Any] = lambda item: item,
            head: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """The answer of every Gmail list: ``head`` (by default the estimate of all the items),
    one page of ``items`` under ``key`` (each made by ``shape``), the next page's token."""
    page, nxt = _page(items, page_token, max_results)
    out = head if head is not None else {"resultSizeEstimate": len(items)}
    if page:
        out[key] = [shape(item) for item in page]
    if nxt:
        out["nextPageToken"] = nxt
    return out


# --- messages ----------------------------------------------------------------------------


@router.get("/messages", operation_id="gmail.users.messages.list", responses=PAGE_TOKEN_400)
def list_messages(userId: str, ctx: WorldCtx, listing: Listing) -> dict[str, Any]:
    _user(ctx, userId)
    msgs = gm.search(ctx, listing.q, listing.labelIds, listing.includeSpamTrash)
    return _listed("messages", msgs, listing.pageToken, listing.maxResults,
                   lambda m: {"id": m.id, "threadId": m.thread_id})  # fmt: skip


@router.get("/messages/{id}", operation_id="gmail.users.messages.get")
def get_message(
    userId: str,
    id: str,
    ctx: WorldCtx,
    format: Format = "full",
    metadataHeaders: list[str] | None = Query(None),
) -> dict[str, Any]:
    _user(ctx, userId)
    return gm.message_json(ctx, gm.get_message_row(ctx, id), format, metadataHeaders)


@router.post("/messages/send", operation_id="gmail.users.messages.send", responses=SEND_400)
def send_message(userId: str, body: RawMessageIn, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    msg = gm.send(ctx, _raw(body), thread_id=body.threadId)
    return {"id": msg.id, "threadId": msg.thread_id, "labelIds": list(msg.label_ids)}


@router.post("/messages", operation_id="gmail.users.messages.insert", responses=RAW_400)
def insert_message(
    userId: str,
    body: RawMessageIn,
    ctx: WorldCtx,
    internalDateSource: Literal["receivedTime", "dateHeader"] = "receivedTime",
    deleted: bool = False,
) -> dict[str, Any]:
    _user(ctx, userId)
    msg = gm.insert(ctx, _raw(body), body.labelIds, body.threadId, internalDateSource)
    return {"id": msg.id, "threadId": msg.thread_id, "labelIds": list(msg.label_ids)}


@router.post("/messages/import", operation_id="gmail.users.messages.import", responses=RAW_400)
def import_message(
    userId: str,
    body: RawMessageIn,
    ctx: WorldCtx,
    internalDateSource: Literal["receivedTime", "dateHeader"] = "dateHeader",
    neverMarkSpam: bool = False,
    processForCalendar: bool = False,
    deleted: bool = False,
) -> dict[str, Any]:
    _user(ctx, userId)
    msg = gm.insert(
        ctx,
        _raw(body),
        body.labelIds,
        body.threadId,
        internalDateSource,
        action="messages.import",
        default_labels=["INBOX", "UNREAD"],
    )
    return {"id": msg.id, "threadId": msg.thread_id, "labelIds": list(msg.label_ids)}


@router.post(
    "/messages/batchModify",
    status_code=204,
    operation_id="gmail.users.messages.batchModify",
    responses=LABELS_400,
)
def batch_modify(userId: str, body: BatchModifyIn, ctx: WorldCtx) -> Response:
    _user(ctx, userId)
    gm.batch_modify(ctx, body.ids, body.addLabelIds, body.removeLabelIds)
    return Response(status_code=204)


@router.post(
    "/messages/batchDelete", status_code=204, operation_id="gmail.users.messages.batchDelete"
)
def batch_delete(userId: str, body: BatchDeleteIn, ctx: WorldCtx) -> Response:
    _user(ctx, userId)
    gm.batch_delete(ctx, body.ids)
    return Response(status_code=204)


@router.post(
    "/messages/{id}/modify", operation_id="gmail.users.messages.modify", responses=LABELS_400
)
def modify_message(userId: str, id: str, body: ModifyIn, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    msg = gm.modify(ctx, id, body.addLabelIds, body.removeLabelIds)
    return gm.message_json(ctx, msg, "minimal")


@router.post("/messages/{id}/trash", operation_id="gmail.users.messages.trash")
def trash_message(userId: str, id: str, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    return gm.message_json(ctx, gm.trash(ctx, id), "minimal")


@router.post("/messages/{id}/untrash", operation_id="gmail.users.messages.untrash")
def untrash_message(userId: str, id: str, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    return gm.message_json(ctx, gm.untrash(ctx, id), "minimal")


@router.delete("/messages/{id}", status_code=204, operation_id="gmail.users.messages.delete")
def delete_message(userId: str, id: str, ctx: WorldCtx) -> Response:
    _user(ctx, userId)
    gm.delete_message(ctx, id)
    return Response(status_code=204)


@router.get(
    "/messages/{messageId}/attachments/{id}", operation_id="gmail.users.messages.attachments.get"
)
def get_attachment(userId: str, messageId: str, id: str, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    return gm.attachment(ctx, messageId, id)


# --- threads -----------------------------------------------------------------------------


@router.get("/threads", operation_id="gmail.users.threads.list", responses=PAGE_TOKEN_400)
def list_threads(userId: str, ctx: WorldCtx, listing: Listing) -> dict[str, Any]:
    _user(ctx, userId)
    threads = gm.list_threads(ctx, listing.q, listing.labelIds, listing.includeSpamTrash)
    return _listed("threads", threads, listing.pageToken, listing.maxResults)


@router.get("/threads/{id}", operation_id="gmail.users.threads.get")
def get_thread(
    userId: str,
    id: str,
    ctx: WorldCtx,
    format: Format = "full",
    metadataHeaders: list[str] | None = Query(None),
) -> dict[str, Any]:
    _user(ctx, userId)
    return gm.thread_json(ctx, id, format, metadataHeaders)


def _thread_min(ctx: WorldContext, thread_id: str) -> dict[str, Any]:
    return gm.thread_json(ctx, thread_id, "minimal")


@router.post(
    "/threads/{id}/modify", operation_id="gmail.users.threads.modify", responses=LABELS_400
)
def modify_thread(userId: str, id: str, body: ModifyIn, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    gm.modify_thread(ctx, id, body.addLabelIds, body.removeLabelIds)
    return _thread_min(ctx, id)


@router.post("/threads/{id}/trash", operation_id="gmail.users.threads.trash")
def trash_thread(userId: str, id: str, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    gm.trash_thread(ctx, id)
    return _thread_min(ctx, id)


@router.post("/threads/{id}/untrash", operation_id="gmail.users.threads.untrash")
def untrash_thread(userId: str, id: str, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    gm.trash_thread(ctx, id, undo=True)
    return _thread_min(ctx, id)


@router.delete("/threads/{id}", status_code=204, operation_id="gmail.users.threads.delete")
def delete_thread(userId: str, id: str, ctx: WorldCtx) -> Response:
    _user(ctx, userId)
    gm.delete_thread(ctx, id)
    return Response(status_code=204)


# --- drafts ------------------------------------------------------------------------------


@router.get("/drafts", operation_id="gmail.users.drafts.list", responses=PAGE_TOKEN_400)
def list_drafts(
    userId: str,
    ctx: WorldCtx,
    q: str | None = Query(None, max_length=2048),
    pageToken: str | None = Query(None, max_length=256),
    maxResults: int = Query(100, ge=1, le=100_000),
    includeSpamTrash: bool = False,
) -> dict[str, Any]:
    _user(ctx, userId)
    drafts = gm.list_drafts(ctx, q, includeSpamTrash)
    return _listed("drafts", drafts, pageToken, maxResults, lambda d: gm.draft_json(ctx, d))


@router.post("/drafts", operation_id="gmail.users.drafts.create", responses=DRAFT_400)
def create_draft(userId: str, body: DraftIn, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    d = gm.create_draft(ctx, _raw(body.message), body.message.threadId if body.message else None)
    return gm.draft_json(ctx, d)


@router.post("/drafts/send", operation_id="gmail.users.drafts.send", responses=DRAFT_400)
def send_draft(userId: str, body: DraftIn, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    if not body.id:
        raise GmailError(400, "Missing draft id")
    raw = _raw(body.message) if body.message and body.message.raw else None
    msg = gm.send_draft(ctx, body.id, raw, body.message.threadId if body.message else None)
    return {"id": msg.id, "threadId": msg.thread_id, "labelIds": list(msg.label_ids)}


@router.get("/drafts/{id}", operation_id="gmail.users.drafts.get")
def get_draft(userId: str, id: str, ctx: WorldCtx, format: Format = "full") -> dict[str, Any]:
    _user(ctx, userId)
    return gm.draft_json(ctx, gm.get_draft_row(ctx, id), format)


@router.put("/drafts/{id}", operation_id="gmail.users.drafts.update", responses=DRAFT_400)
def update_draft(userId: str, id: str, body: DraftIn, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    gm.get_draft_row(ctx, id)
    d = gm.update_draft(
        ctx, id, _raw(body.message), body.message.threadId if body.message else None
    )
    return gm.draft_json(ctx, d)


@router.delete("/drafts/{id}", status_code=204, operation_id="gmail.users.drafts.delete")
def delete_draft(userId: str, id: str, ctx: WorldCtx) -> Response:
    _user(ctx, userId)
    gm.delete_draft(ctx, id)
    return Response(status_code=204)


# --- labels ------------------------------------------------------------------------------


@router.get("/labels", operation_id="gmail.users.labels.list")
def list_labels(userId: str, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    return {"labels": gm.list_labels(ctx)}


@router.post("/labels", operation_id="gmail.users.labels.create", responses=LABEL_NAME_400)
def create_label(userId: str, body: NamedLabelIn, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    return gm.create_label(ctx, body.fields())


@router.get("/labels/{id}", operation_id="gmail.users.labels.get")
def get_label(userId: str, id: str, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    return gm.label_json(ctx, id, counts=True)


@router.put("/labels/{id}", operation_id="gmail.users.labels.update", responses=LABEL_NAME_400)
def update_label(userId: str, id: str, body: NamedLabelIn, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    return gm.update_label(ctx, id, body.fields(), patch=False)


@router.patch("/labels/{id}", operation_id="gmail.users.labels.patch", responses=LABEL_NAME_400)
def patch_label(userId: str, id: str, body: LabelIn, ctx: WorldCtx) -> dict[str, Any]:
    _user(ctx, userId)
    return gm.update_label(ctx, id, body.fields(), patch=True)


@router.delete("/labels/{id}", status_code=204, operation_id="gmail.users.labels.delete")
def delete_label(userId: str, id: str, ctx: WorldCtx) -> Response:
    _user(ctx, userId)
    gm.delete_label(ctx, id)
    return Response(status_code=204)


# --- history -----------------------------------------------------------------------------


@router.get("/history", operation_id="gmail.users.history.list", responses=PAGE_TOKEN_400)
def list_history(
    userId: str,
    ctx: WorldCtx,
    startHistoryId: int = Query(..., ge=0, le=2**62),
    historyTypes: list[str] | None = Query(None),
    labelId: str | None = Query(None, max_length=64),
    pageToken: str | None = Query(None, max_length=256),
    maxResults: int = Query(100, ge=1, le=100_000),
) -> dict[str, Any]:
    _user(ctx, userId)
    entries = gm.history(ctx, startHistoryId, historyTypes, labelId)
    head = {"historyId": str(gm.mailbox(ctx).history_id)}
    return _listed("history", entries, pageToken, maxResults, head=head)


# --- media uploads -----------------------------------------------------------------------


async def _read_upload(request: Request) -> tuple[dict[str, Any], bytes | None]:
    """(JSON metadata, raw message) from an ``uploadType=media|multipart`` request."""
    body = await request.body()
    if len(body) > MAX_UPLOAD:
        raise GmailError(413, "Media upload too large")
    ctype = request.headers.get("content-type", "")
    kind = request.query_params.get("uploadType", "media")
    if kind == "media" or ctype.startswith("message/rfc822"):
        return {}, body
    if kind == "multipart" or ctype.startswith("multipart/"):
        head = f"Content-Type: {ctype}\r\nMIME-Version: 1.0\r\n\r\n".encode()
        try:
            msg = BytesParser(policy=policy.default).parsebytes(head + body)
            parts = msg.get_payload() if msg.is_multipart() else []
        except Exception:  # noqa: BLE001
            parts = []
        if not isinstance(parts, list) or len(parts) < 1:
            raise GmailError(400, "Invalid multipart upload")
        try:
            head_json = parts[0].get_payload(decode=True) or b"{}"
            check_json_text(head_json, json_depth_limit(request), "the upload's JSON metadata")
            meta = json.loads(head_json)
        except BodyTooDeep as exc:
            raise GmailError(400, str(exc)) from None
        except ValueError:
            raise GmailError(400, "Invalid JSON metadata in multipart upload") from None
        raw = parts[1].get_payload(decode=True) if len(parts) > 1 else None
        return (meta if isinstance(meta, dict) else {}), raw
    raise GmailError(400, f"Unsupported uploadType: {kind}")


def _upload_routes(r: APIRouter, prefix: str, dep: Any) -> None:
    """Register the media-upload twins of send / insert / import / drafts under ``prefix``."""

    async def upload_send(userId: str, request: Request, ctx: dep) -> dict[str, Any]:  # type: ignore[valid-type]
        _user(ctx, userId)
        meta, raw = await _read_upload(request)
        if not raw:
            raise GmailError(400, "Missing message body")
        msg = gm.send(ctx, raw, thread_id=meta.get("threadId"))
        return {"id": msg.id, "threadId": msg.thread_id, "labelIds": list(msg.label_ids)}

    async def upload_insert(userId: str, request: Request, ctx: dep) -> dict[str, Any]:  # type: ignore[valid-type]
        _user(ctx, userId)
        meta, raw = await _read_upload(request)
        if not raw:
            raise GmailError(400, "Missing message body")
        msg = gm.insert(ctx, raw, meta.get("labelIds"), meta.get("threadId"))
        return {"id": msg.id, "threadId": msg.thread_id, "labelIds": list(msg.label_ids)}

    async def upload_draft(userId: str, request: Request, ctx: dep) -> dict[str, Any]:  # type: ignore[valid-type]
        _user(ctx, userId)
        meta, raw = await _read_upload(request)
        if not raw:
            raise GmailError(400, "Missing message body")
        tid = (
            (meta.get("message") or {}).get("threadId")
            if isinstance(meta.get("message"), dict)
            else None
        )
        return gm.draft_json(ctx, gm.create_draft(ctx, raw, tid))

    for fn in (upload_send, upload_insert, upload_draft):
        fn.__annotations__["ctx"] = dep  # a real type: FastAPI cannot resolve a local name

    r.add_api_route(
        f"{prefix}/messages/send",
        upload_send,
        methods=["POST"],
        operation_id=f"gmail.upload{prefix.count('world')}.messages.send",
        include_in_schema=False,
    )
    r.add_api_route(
        f"{prefix}/messages",
        upload_insert,
        methods=["POST"],
        operation_id=f"gmail.upload{prefix.count('world')}.messages.insert",
        include_in_schema=False,
    )
    r.add_api_route(
        f"{prefix}/drafts",
        upload_draft,
        methods=["POST"],
        operation_id=f"gmail.upload{prefix.count('world')}.drafts.create",
        include_in_schema=False,
    )


_upload_routes(upload_router, "/upload/gmail/v1/users/{userId}", WorldCtxByToken)
_upload_routes(upload_router, "/worlds/{world_id}/upload/gmail/v1/users/{userId}", WorldCtx)


def _gmail_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GmailError)
    return JSONResponse(exc.body(), status_code=exc.code)


exception_handlers = {GmailError: _gmail_error}
