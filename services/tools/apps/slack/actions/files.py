"""Slack's ``files.*`` methods (upload, the two-step external upload, list, info, bytes)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select

from services.tools.apps.slack.actions._base import APP, _get, _limit, _now_s, _split
from services.tools.apps.slack.actions.chat import _postable, post_message
from services.tools.apps.slack.actions.conversations import _can_see, _channel
from services.tools.apps.slack.actions.team import _actor, _file_json, _user, agent_user_id
from services.tools.apps.slack.errors import SlackError
from services.tools.apps.slack.models import (
    SlackChannel,
    SlackFile,
)
from services.tools.context import WorldContext


def _guess_mimetype(name: str) -> str:
    import mimetypes

    return mimetypes.guess_type(name)[0] or "application/octet-stream"


def _new_file(
    ctx: WorldContext, actor: str, filename: str, title: str | None, content: bytes, status: str
) -> SlackFile:
    name = (filename or "").strip() or "file"
    row = SlackFile(
        world_id=ctx.world_id,
        id="F" + ctx.new_id(width=10).upper(),
        name=name,
        title=title or name,
        mimetype=_guess_mimetype(name),
        user=actor,
        created=_now_s(ctx),
        size=len(content),
        content=content,
        channels=[],
        status=status,
    )
    ctx.session.add(row)
    ctx.session.flush()
    return row


def _share_files(
    ctx: WorldContext,
    files: list[SlackFile],
    channels: Iterable[str],
    actor: str,
    initial_comment: str | None,
    thread_ts: str | None,
) -> None:
    for channel in channels:
        ch = _postable(ctx, channel, actor)
        for f in files:
            f.channels = sorted({*(f.channels or []), ch.id})
        post_message(
            ctx,
            channel=ch.id,
            text=initial_comment or "",
            thread_ts=thread_ts,
            as_user=actor,
            file_ids=[f.id for f in files],
            _action="files.share",
        )


def files_upload(
    ctx: WorldContext,
    *,
    content: bytes | str,
    filename: str | None = None,
    title: str | None = None,
    channels: str | Sequence[str] | None = None,
    initial_comment: str | None = None,
    thread_ts: str | None = None,
    as_user: str | None = None,
) -> dict[str, Any]:
    """``files.upload`` (v1): store the file and share it into ``channels``."""
    actor = _actor(ctx, as_user)
    data = content.encode() if isinstance(content, str) else bytes(content or b"")
    if not data and not filename:
        raise SlackError("no_file_data")
    targets = _split(channels or "")
    for c in targets:
        _postable(ctx, c, actor)  # fail before storing anything
    f = _new_file(ctx, actor, filename or "file", title, data, "complete")
    ctx.record(APP, "files.upload", {"file": f.id, "name": f.name, "user": actor})
    _share_files(ctx, [f], targets, actor, initial_comment, thread_ts)
    return {"file": _file_json(ctx, f)}


def files_get_upload_url(
    ctx: WorldContext, *, filename: str, length: int, as_user: str | None = None
) -> dict[str, Any]:
    """Step 1 of the v2 upload: a pending file; the caller adds ``upload_url`` (it knows the host)."""
    actor = _actor(ctx, as_user)
    if not filename:
        raise SlackError("invalid_arguments", "filename is required")
    if length is None or int(length) < 0:
        raise SlackError("invalid_arguments", "length is required")
    f = _new_file(ctx, actor, filename, None, b"", "pending")
    f.size = int(length)
    return {"file_id": f.id}


def files_receive_upload(ctx: WorldContext, *, file_id: str, data: bytes) -> None:
    """Step 2 of the v2 upload: the bytes arrive at the upload URL."""
    f = _get(ctx, SlackFile, file_id)
    if f is None or f.status != "pending":
        raise SlackError("file_not_found")
    f.content = data
    f.size = len(data)


def files_complete_upload(
    ctx: WorldContext,
    *,
    files: str | list[dict[str, Any]],
    channel_id: str | None = None,
    channels: str | Sequence[str] | None = None,
    initial_comment: str | None = None,
    thread_ts: str | None = None,
    as_user: str | None = None,
) -> dict[str, Any]:
    """Step 3 of the v2 upload: finish the pending files and share them."""
    actor = _actor(ctx, as_user)
    if isinstance(files, str):
        try:
            files = json.loads(files)
        except ValueError:
            raise SlackError("invalid_arguments", "files must be a JSON array") from None
    if not isinstance(files, list) or not files:
        raise SlackError("invalid_arguments", "files must be a non-empty array of {id, title}")
    rows = []
    for item in files:
        fid = item.get("id") if isinstance(item, dict) else None
        f = _get(ctx, SlackFile, str(fid)) if fid else None
        if f is None or f.user != actor:
            raise SlackError("file_not_found", f"no pending file {fid!r}")
        if item.get("title"):
            f.title = str(item["title"])
        rows.append(f)
    targets = [channel_id] if channel_id else _split(channels or "")
    for c in targets:
        _postable(ctx, c, actor)
    for f in rows:
        f.status = "complete"
        ctx.record(APP, "files.upload", {"file": f.id, "name": f.name, "user": actor})
    _share_files(ctx, rows, targets, actor, initial_comment, thread_ts)
    return {"files": [{"id": f.id, "title": f.title} for f in rows]}


def files_list(
    ctx: WorldContext,
    *,
    channel: str | None = None,
    user: str | None = None,
    count: int | None = None,
    page: int | None = None,
) -> dict[str, Any]:
    viewer = agent_user_id(ctx)
    q = select(SlackFile).where(SlackFile.world_id == ctx.world_id, SlackFile.status == "complete")
    if user:
        q = q.where(SlackFile.user == _user(ctx, user).id)
    rows = ctx.session.scalars(q.order_by(SlackFile.created.desc(), SlackFile.id)).all()
    if channel:
        cid = _channel(ctx, channel).id
        rows = [f for f in rows if cid in (f.channels or [])]
    visible_channels = {
        ch.id
        for ch in ctx.session.scalars(
            select(SlackChannel).where(SlackChannel.world_id == ctx.world_id)
        )
        if _can_see(ctx, ch, viewer)
    }
    rows = [f for f in rows if f.user == viewer or set(f.channels or []) & visible_channels]
    per_page = _limit(count, 100, 1000)
    page = max(1, page or 1)
    total = len(rows)
    chunk = rows[(page - 1) * per_page : page * per_page]
    return {
        "files": [_file_json(ctx, f) for f in chunk],
        "paging": {
            "count": per_page,
            "total": total,
            "page": page,
            "pages": max(1, -(-total // per_page)),
        },
    }


def _visible_file(ctx: WorldContext, file: str) -> SlackFile:
    viewer = agent_user_id(ctx)
    f = _get(ctx, SlackFile, file or "")
    if f is None or f.status != "complete":
        raise SlackError("file_not_found")
    if f.user != viewer and not any(
        (ch := _get(ctx, SlackChannel, c)) is not None and _can_see(ctx, ch, viewer)
        for c in f.channels or []
    ):
        raise SlackError("file_not_found")
    return f


def files_info(ctx: WorldContext, *, file: str) -> dict[str, Any]:
    """A file's metadata, and its content as text (``content``; binary bytes are replaced)."""
    f = _visible_file(ctx, file)
    return {"file": _file_json(ctx, f), "content": f.content.decode("utf-8", "replace")}


def file_bytes(ctx: WorldContext, *, file: str) -> tuple[str, bytes]:
    """A file's mimetype and raw bytes."""
    f = _visible_file(ctx, file)
    return f.mimetype, f.content
