"""Slack Web API routes: ``/worlds/{world_id}/slack/api/<method>``.

Like Slack, every method takes GET query parameters, a form body, a multipart body or a JSON
body (``slack_sdk`` uses all of these), answers HTTP 200 with ``{"ok": true, ...}`` or
``{"ok": false, "error": "<code>"}``, and reads the world token from ``Authorization: Bearer``.
Unknown methods answer ``unknown_method``. The acting user is the world's agent user.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict
from starlette.datastructures import UploadFile

from services.tools.apps.slack import actions as A
from services.tools.apps.slack import search
from services.tools.apps.slack.errors import SlackError, SlackRoute
from services.tools.bounds import DEFAULT_DEPTH, BodyTooDeep, check_json_text, json_depth_limit
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


class Params:
    """A Slack call's arguments, merged from the query string and the body, with typed getters."""

    def __init__(
        self, values: dict[str, Any], files: dict[str, bytes], max_depth: int = DEFAULT_DEPTH
    ) -> None:
        self.values = values
        self.files = files
        self.max_depth = max_depth

    def str(self, name: str, default: str | None = None) -> str | None:
        value = self.values.get(name)
        if value is None or value == "":
            return default
        if isinstance(value, (dict, list)):
            return json.dumps(value)
        return str(value)

    def need(self, name: str, error: str = "invalid_arguments") -> str:
        value = self.str(name)
        if value is None:
            raise SlackError(error, f"missing required argument {name!r}")
        return value

    def int(self, name: str, default: int | None = None) -> int | None:
        value = self.values.get(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except (TypeError, ValueError):
            raise SlackError("invalid_arguments", f"{name} must be an integer") from None

    def bool(self, name: str, default: bool = False) -> bool:
        value = self.values.get(name)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in ("1", "true", "yes", "on")

    def json(self, name: str) -> Any:
        value = self.values.get(name)
        if value is None or value == "":
            return None
        if isinstance(value, str):
            try:
                # A field the service's body check did not see (multipart, query string).
                check_json_text(value, self.max_depth, f"argument {name!r}")
            except BodyTooDeep as exc:
                raise SlackError("invalid_arguments", str(exc)) from None
            try:
                return json.loads(value)
            except ValueError:
                raise SlackError("invalid_arguments", f"{name} must be JSON") from None
        return value

    def blocks(self) -> list[Any] | None:
        value = self.json("blocks")
        if value is not None and not isinstance(value, list):
            raise SlackError("invalid_blocks", "blocks must be an array")
        return value


async def slack_params(request: Request) -> Params:
    values: dict[str, Any] = dict(request.query_params)
    files: dict[str, bytes] = {}
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.method == "POST":
        if ctype == "application/json":
            try:
                body = json.loads(await request.body() or b"{}")
            except ValueError:
                raise SlackError("invalid_json") from None
            if not isinstance(body, dict):
                raise SlackError("invalid_json", "the body must be a JSON object")
            values.update(body)
        elif ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.form()
            for key, value in form.multi_items():
                if isinstance(value, UploadFile):
                    files[key] = await value.read()
                    values.setdefault("filename", value.filename or "")
                else:
                    values[key] = value
    return Params(values, files, json_depth_limit(request))


SlackParams = Annotated[Params, Depends(slack_params)]
Handler = Callable[[WorldContext, Params, Request], dict[str, Any]]
METHODS: dict[str, Handler] = {}


def method(name: str) -> Callable[[Handler], Handler]:
    """Register a Slack method handler (it returns the body without ``ok``)."""

    def register(fn: Handler) -> Handler:
        METHODS[name] = fn
        return fn

    return register


# --------------------------------------------------------------------------- handlers


@method("auth.test")
def _auth_test(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.auth_test(ctx)


@method("conversations.list")
def _conv_list(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_list(
        ctx,
        types=p.str("types"),
        exclude_archived=p.bool("exclude_archived"),
        cursor=p.str("cursor"),
        limit=p.int("limit"),
    )


@method("conversations.info")
def _conv_info(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_info(ctx, channel=p.need("channel", "channel_not_found"))


@method("conversations.history")
def _conv_history(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_history(
        ctx,
        channel=p.need("channel", "channel_not_found"),
        cursor=p.str("cursor"),
        limit=p.int("limit"),
        oldest=p.str("oldest"),
        latest=p.str("latest"),
        inclusive=p.bool("inclusive"),
    )


@method("conversations.replies")
def _conv_replies(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_replies(
        ctx,
        channel=p.need("channel", "channel_not_found"),
        ts=p.need("ts", "thread_not_found"),
        cursor=p.str("cursor"),
        limit=p.int("limit"),
        oldest=p.str("oldest"),
        latest=p.str("latest"),
        inclusive=p.bool("inclusive"),
    )


@method("conversations.members")
def _conv_members(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_members(
        ctx,
        channel=p.need("channel", "channel_not_found"),
        cursor=p.str("cursor"),
        limit=p.int("limit"),
    )


@method("conversations.create")
def _conv_create(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_create(ctx, name=p.str("name") or "", is_private=p.bool("is_private"))


@method("conversations.join")
def _conv_join(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_join(ctx, channel=p.need("channel", "channel_not_found"))


@method("conversations.invite")
def _conv_invite(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_invite(
        ctx, channel=p.need("channel", "channel_not_found"), users=p.str("users") or ""
    )


@method("conversations.archive")
def _conv_archive(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_archive(ctx, channel=p.need("channel", "channel_not_found"))


@method("conversations.open")
def _conv_open(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_open(
        ctx, users=p.str("users"), channel=p.str("channel"), return_im=p.bool("return_im")
    )


@method("conversations.setTopic")
def _conv_topic(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_set_text(
        ctx,
        channel=p.need("channel", "channel_not_found"),
        field="topic",
        value=p.str("topic") or "",
    )


@method("conversations.setPurpose")
def _conv_purpose(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_set_text(
        ctx,
        channel=p.need("channel", "channel_not_found"),
        field="purpose",
        value=p.str("purpose") or "",
    )


@method("conversations.leave")
def _conv_leave(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_leave(ctx, channel=p.need("channel", "channel_not_found"))


@method("users.conversations")
def _users_conversations(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.users_conversations(
        ctx,
        types=p.str("types"),
        exclude_archived=p.bool("exclude_archived"),
        cursor=p.str("cursor"),
        limit=p.int("limit"),
    )


@method("conversations.rename")
def _conv_rename(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_rename(
        ctx, channel=p.need("channel", "channel_not_found"), name=p.str("name") or ""
    )


@method("conversations.unarchive")
def _conv_unarchive(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_unarchive(ctx, channel=p.need("channel", "channel_not_found"))


@method("conversations.kick")
def _conv_kick(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.conversations_kick(
        ctx, channel=p.need("channel", "channel_not_found"), user=p.need("user", "user_not_found")
    )


@method("chat.deleteScheduledMessage")
def _delete_scheduled(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.delete_scheduled(
        ctx,
        channel=p.need("channel", "channel_not_found"),
        scheduled_message_id=p.need("scheduled_message_id", "invalid_scheduled_message_id"),
    )


@method("users.profile.get")
def _profile_get(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    user = A.users_info(ctx, user=p.str("user") or A.agent_user_id(ctx))["user"]
    return {"profile": user["profile"]}


@method("chat.postMessage")
def _post(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.post_message(
        ctx,
        channel=p.need("channel", "channel_not_found"),
        text=p.str("text"),
        thread_ts=p.str("thread_ts"),
        blocks=p.blocks(),
        reply_broadcast=p.bool("reply_broadcast"),
    )


@method("chat.update")
def _update(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.update_message(
        ctx,
        channel=p.need("channel", "channel_not_found"),
        ts=p.need("ts", "message_not_found"),
        text=p.str("text"),
        blocks=p.blocks(),
    )


@method("chat.delete")
def _delete(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.delete_message(
        ctx, channel=p.need("channel", "channel_not_found"), ts=p.need("ts", "message_not_found")
    )


@method("chat.getPermalink")
def _permalink(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.get_permalink(
        ctx,
        channel=p.need("channel", "channel_not_found"),
        message_ts=p.need("message_ts", "message_not_found"),
    )


@method("chat.scheduleMessage")
def _schedule(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.schedule_message(
        ctx,
        channel=p.need("channel", "channel_not_found"),
        text=p.str("text"),
        post_at=p.need("post_at", "invalid_time"),
        thread_ts=p.str("thread_ts"),
        blocks=p.blocks(),
    )


@method("chat.scheduledMessages.list")
def _scheduled_list(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.scheduled_list(ctx, channel=p.str("channel"))


def _reaction_args(p: Params) -> dict[str, Any]:
    return {
        "channel": p.str("channel") or "",
        "timestamp": p.str("timestamp") or "",
    }


@method("reactions.add")
def _react_add(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.reactions_add(ctx, name=p.str("name") or "", **_reaction_args(p))


@method("reactions.remove")
def _react_remove(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.reactions_remove(ctx, name=p.str("name") or "", **_reaction_args(p))


@method("reactions.get")
def _react_get(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.reactions_get(ctx, **_reaction_args(p))


@method("pins.add")
def _pins_add(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.pins_add(ctx, **_reaction_args(p))


@method("pins.remove")
def _pins_remove(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.pins_remove(ctx, **_reaction_args(p))


@method("pins.list")
def _pins_list(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.pins_list(ctx, channel=p.need("channel", "channel_not_found"))


@method("users.list")
def _users_list(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.users_list(ctx, cursor=p.str("cursor"), limit=p.int("limit"))


@method("users.info")
def _users_info(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.users_info(ctx, user=p.need("user", "user_not_found"))


@method("users.lookupByEmail")
def _users_lookup(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.users_lookup_by_email(ctx, email=p.need("email", "users_not_found"))


@method("search.messages")
def _search(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return search.search_messages(
        ctx,
        query=p.str("query") or "",
        count=p.int("count"),
        page=p.int("page"),
        sort=p.str("sort") or "score",
        sort_dir=p.str("sort_dir") or "desc",
    )


@method("files.upload")
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


@method("files.getUploadURLExternal")
def _files_upload_url(ctx: WorldContext, p: Params, request: Request) -> dict[str, Any]:
    out = A.files_get_upload_url(
        ctx, filename=p.str("filename") or "", length=p.int("length", -1) or 0
    )
    fid = out["file_id"]
    base = str(request.base_url).rstrip("/")
    out["upload_url"] = f"{base}/worlds/{ctx.world_id}/slack/upload/{fid}/{upload_key(ctx, fid)}"
    return out


@method("files.completeUploadExternal")
def _files_complete(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.files_complete_upload(
        ctx,
        files=p.json("files") or [],
        channel_id=p.str("channel_id"),
        channels=p.str("channels"),
        initial_comment=p.str("initial_comment"),
        thread_ts=p.str("thread_ts"),
    )


@method("files.list")
def _files_list(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    return A.files_list(
        ctx,
        channel=p.str("channel"),
        user=p.str("user"),
        count=p.int("count"),
        page=p.int("page"),
    )


@method("files.info")
def _files_info(ctx: WorldContext, p: Params, _: Request) -> dict[str, Any]:
    out = A.files_info(ctx, file=p.need("file", "file_not_found"))
    out.pop("content", None)
    return out


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
