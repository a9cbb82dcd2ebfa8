"""Slack Web API routes: ``/worlds/{world_id}/slack/api/<method>``.

Like Slack, every method takes GET query parameters, a form body, a multipart body or a JSON
body (``slack_sdk`` uses all of these), answers HTTP 200 with ``{"ok": true, ...}`` or
``{"ok": false, "error": "<code>"}``, and reads the world token from ``Authorization: Bearer``.
Unknown methods answer ``unknown_method``. The acting user is the world's agent user.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from services.tools.apps.slack import actions as A
from services.tools.apps.slack import search
from services.tools.apps.slack.errors import SlackError, SlackRoute
from services.tools.apps.slack.params import (
    BLOCKS,
    BOOL,
    INT,
    JSON_LIST,
    STR,
    TEXT,
    Handler,
    Params,
    call,
    need,
    slack_params,
)
from services.tools.context import WorldContext, WorldCtx, open_world

router = APIRouter(prefix="/worlds/{world_id}/slack", tags=["slack"], route_class=SlackRoute)


def slack_context(ctx: WorldCtx, request: Request) -> WorldContext:
    """The world context, kept on the request so a failing call can be rolled back."""
    request.state.world_ctx = ctx
    A.deliver_due(ctx)
    return ctx


SlackCtx = Annotated[WorldContext, Depends(slack_context)]


class SlackErrorBody(BaseModel):
    """Slack's error body (``{"ok": false, "error": code}``; Slack answers most errors with
    HTTP 200 and this body), documented in OpenAPI for every Slack route."""

    model_config = ConfigDict(extra="allow")
    ok: bool
    error: str
    warning: str | None = None


ERROR_MODEL = SlackErrorBody


def error_response(status: int, message: str) -> JSONResponse:
    """Slack's style for failures the tools app catches outside these routes (unknown paths)."""
    error = {401: "not_authed", 403: "invalid_auth", 404: "unknown_method"}.get(
        status, "invalid_arguments"
    )
    return JSONResponse({"ok": False, "error": error, "warning": message})


SlackParams = Annotated[Params, Depends(slack_params)]


# --------------------------------------------------------------------------- methods


def _profile_get(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    user = A.users_info(ctx, user=p.str("user") or A.agent_user_id(ctx))["user"]
    return {"profile": user["profile"]}


def _files_upload(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    content: bytes | str = p.files.get("file", b"") or (p.str("content") or "")
    return A.files_upload(
        ctx,
        content=content,
        filename=p.str("filename"),
        title=p.str("title"),
        channels=p.str("channels") or p.str("channel"),
        initial_comment=p.str("initial_comment"),
        thread_ts=p.str("thread_ts"),
    )


def upload_key(ctx: WorldContext, file_id: str) -> str:
    """The secret in a v2 upload URL: only a holder of the world token could have asked for it."""
    return hmac.new(ctx.world.token_sha256.encode(), file_id.encode(), hashlib.sha256).hexdigest()[
        :32
    ]


def _files_upload_url(ctx: WorldContext, p: Params, request: Request) -> dict[str, Any]:
    out = A.files_get_upload_url(
        ctx, filename=p.str("filename") or "", length=p.int("length", -1) or 0
    )
    fid = out["file_id"]
    base = str(request.base_url).rstrip("/")
    out["upload_url"] = f"{base}/worlds/{ctx.world_id}/slack/upload/{fid}/{upload_key(ctx, fid)}"
    return out


def _files_info(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    out = A.files_info(ctx, file=p.need("file", "file_not_found"))
    out.pop("content", None)
    return out


CHANNEL = need("channel_not_found")
PAGE = {"cursor": STR, "limit": INT}
WINDOW = {"oldest": STR, "latest": STR, "inclusive": BOOL}
LISTING = {"types": STR, "exclude_archived": BOOL, **PAGE}
ITEM = {"channel": TEXT, "timestamp": TEXT}  # a reaction's or a pin's message

#: Every Slack method this mock answers, in the order its routes are mounted: most only map
#: their arguments onto an action (:func:`call`), the rest are handlers of their own.
METHODS: dict[str, Handler] = {
    "auth.test": call(A.auth_test),
    "conversations.list": call(A.conversations_list, **LISTING),
    "conversations.info": call(A.conversations_info, channel=CHANNEL),
    "conversations.history": call(A.conversations_history, channel=CHANNEL, **PAGE, **WINDOW),
    "conversations.replies": call(
        A.conversations_replies,
        channel=CHANNEL,
        ts=need("thread_not_found"),
        **PAGE,
        **WINDOW,
    ),
    "conversations.members": call(A.conversations_members, channel=CHANNEL, **PAGE),
    "conversations.create": call(A.conversations_create, name=TEXT, is_private=BOOL),
    "conversations.join": call(A.conversations_join, channel=CHANNEL),
    "conversations.invite": call(A.conversations_invite, channel=CHANNEL, users=TEXT),
    "conversations.archive": call(A.conversations_archive, channel=CHANNEL),
    "conversations.open": call(A.conversations_open, users=STR, channel=STR, return_im=BOOL),
    "conversations.setTopic": call(
        partial(A.conversations_set_text, field="topic"), channel=CHANNEL, value=TEXT.of("topic")
    ),
    "conversations.setPurpose": call(
        partial(A.conversations_set_text, field="purpose"),
        channel=CHANNEL,
        value=TEXT.of("purpose"),
    ),
    "conversations.leave": call(A.conversations_leave, channel=CHANNEL),
    "users.conversations": call(A.users_conversations, **LISTING),
    "conversations.rename": call(A.conversations_rename, channel=CHANNEL, name=TEXT),
    "conversations.unarchive": call(A.conversations_unarchive, channel=CHANNEL),
    "conversations.kick": call(A.conversations_kick, channel=CHANNEL, user=need("user_not_found")),
    "chat.deleteScheduledMessage": call(
        A.delete_scheduled,
        channel=CHANNEL,
        scheduled_message_id=need("invalid_scheduled_message_id"),
    ),
    "users.profile.get": _profile_get,
    "chat.postMessage": call(
        A.post_message,
        channel=CHANNEL,
        text=STR,
        thread_ts=STR,
        blocks=BLOCKS,
        reply_broadcast=BOOL,
    ),
    "chat.update": call(
        A.update_message, channel=CHANNEL, ts=need("message_not_found"), text=STR, blocks=BLOCKS
    ),
    "chat.delete": call(A.delete_message, channel=CHANNEL, ts=need("message_not_found")),
    "chat.getPermalink": call(
        A.get_permalink, channel=CHANNEL, message_ts=need("message_not_found")
    ),
    "chat.scheduleMessage": call(
        A.schedule_message,
        channel=CHANNEL,
        text=STR,
        post_at=need("invalid_time"),
        thread_ts=STR,
        blocks=BLOCKS,
    ),
    "chat.scheduledMessages.list": call(A.scheduled_list, channel=STR),
    "reactions.add": call(A.reactions_add, name=TEXT, **ITEM),
    "reactions.remove": call(A.reactions_remove, name=TEXT, **ITEM),
    "reactions.get": call(A.reactions_get, **ITEM),
    "pins.add": call(A.pins_add, **ITEM),
    "pins.remove": call(A.pins_remove, **ITEM),
    "pins.list": call(A.pins_list, channel=CHANNEL),
    "users.list": call(A.users_list, **PAGE),
    "users.info": call(A.users_info, user=need("user_not_found")),
    "users.lookupByEmail": call(A.users_lookup_by_email, email=need("users_not_found")),
    "search.messages": call(
        search.search_messages,
        query=TEXT,
        count=INT,
        page=INT,
        sort=STR.otherwise("score"),
        sort_dir=STR.otherwise("desc"),
    ),
    "files.upload": _files_upload,
    "files.getUploadURLExternal": _files_upload_url,
    "files.completeUploadExternal": call(
        A.files_complete_upload,
        files=JSON_LIST,
        channel_id=STR,
        channels=STR,
        initial_comment=STR,
        thread_ts=STR,
    ),
    "files.list": call(A.files_list, channel=STR, user=STR, count=INT, page=INT),
    "files.info": _files_info,
}


# --------------------------------------------------------------------------- mounting


def _endpoint(name: str, handler: Handler) -> Callable[..., dict[str, Any]]:
    def endpoint(ctx: SlackCtx, params: SlackParams, request: Request) -> dict[str, Any]:
        return {"ok": True, **handler(ctx, params, request)}

    endpoint.__name__ = "slack_" + name.replace(".", "_")
    endpoint.__doc__ = f"Slack `{name}`."
    return endpoint


for _name, _handler in METHODS.items():
    # One route per verb: an OpenAPI operation id must be unique per (path, method).
    for _verb, _suffix in (("POST", ""), ("GET", "_get")):
        router.add_api_route(
            f"/api/{_name}",
            _endpoint(_name, _handler),
            methods=[_verb],
            operation_id="slack_" + _name.replace(".", "_") + _suffix,
            summary=f"Slack {_name}",
        )


@router.post("/upload/{file_id}/{key}", operation_id="slack_uploadFileBytes")
async def upload_bytes(world_id: str, file_id: str, key: str, request: Request) -> Response:
    """Step 2 of ``files_upload_v2``: the raw bytes, authorised by the key in the URL."""
    data = await request.body()
    db = request.app.state.db
    with db.session() as session, open_world(session, world_id) as ctx:
        if not hmac.compare_digest(upload_key(ctx, file_id).encode(), key.encode()):
            raise SlackError("invalid_auth", status=403)
        A.files_receive_upload(ctx, file_id=file_id, data=data)
    return Response(f"OK - {len(data)}", media_type="text/plain")


@router.get("/files/{file_id}", operation_id="slack_downloadFile")
def download_file(ctx: SlackCtx, file_id: str) -> Response:
    """A file's bytes (what ``url_private`` stands for), with the world token."""
    mimetype, data = A.file_bytes(ctx, file=file_id)
    return Response(content=data, media_type=mimetype)


def unknown_method(world_id: str, method_name: str) -> JSONResponse:
    """Any other method: Slack's ``unknown_method``."""
    return JSONResponse({"ok": False, "error": "unknown_method", "req_method": method_name})


router.add_api_route(
    "/api/{method_name}", unknown_method, methods=["POST"], operation_id="slack_unknownMethod"
)
router.add_api_route(
    "/api/{method_name}", unknown_method, methods=["GET"], operation_id="slack_unknownMethod_get"
)
