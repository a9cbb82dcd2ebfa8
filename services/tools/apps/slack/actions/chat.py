"""Slack's ``chat.*`` methods (post, update, delete, permalinks, scheduled messages) and message
reads (``conversations.history`` / ``conversations.replies``).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import delete, func, or_, select

from services.tools.apps.slack.actions._base import (
    APP,
    MAX_TEXT,
    SCHEDULE_HORIZON,
    _decode_cursor,
    _encode_cursor,
    _get,
    _limit,
    _now_s,
    normalize_ts,
)
from services.tools.apps.slack.actions.conversations import _channel, conversations_open
from services.tools.apps.slack.actions.team import (
    _actor,
    _file_json,
    _is_member,
    next_ts,
    workspace,
)
from services.tools.apps.slack.errors import SlackError
from services.tools.apps.slack.models import (
    SlackChannel,
    SlackFile,
    SlackMessage,
    SlackMeta,
    SlackPin,
    SlackReaction,
    SlackScheduled,
    SlackUser,
)
from services.tools.context import WorldContext

# --------------------------------------------------------------------------- messages


def _message_json(
    ctx: WorldContext, m: SlackMessage, *, with_channel: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "message", "user": m.user, "text": m.text, "ts": m.ts}
    if m.subtype:
        body["subtype"] = m.subtype
    if m.thread_ts:
        body["thread_ts"] = m.thread_ts
        if m.thread_ts != m.ts:
            body["parent_user_id"] = _parent_user(ctx, m.channel_id, m.thread_ts)
    if m.thread_ts == m.ts:
        replies = ctx.session.scalars(
            select(SlackMessage)
            .where(
                SlackMessage.world_id == ctx.world_id,
                SlackMessage.channel_id == m.channel_id,
                SlackMessage.thread_ts == m.ts,
                SlackMessage.ts != m.ts,
            )
            .order_by(SlackMessage.ts)
        ).all()
        body["reply_count"] = len(replies)
        body["reply_users"] = sorted({r.user for r in replies})
        body["reply_users_count"] = len(body["reply_users"])
        body["latest_reply"] = replies[-1].ts if replies else m.ts
    if m.edited_ts:
        body["edited"] = {"user": m.edited_by or m.user, "ts": m.edited_ts}
    if m.blocks:
        body["blocks"] = m.blocks
    if m.file_ids:
        body["files"] = [
            _file_json(ctx, f) for fid in m.file_ids if (f := _get(ctx, SlackFile, fid)) is not None
        ]
    reactions = _reactions(ctx, m.channel_id, m.ts)
    if reactions:
        body["reactions"] = reactions
    if _get(ctx, SlackPin, m.channel_id, m.ts) is not None:
        body["pinned_to"] = [m.channel_id]
    if with_channel:
        body["channel"] = m.channel_id
    return body


def _parent_user(ctx: WorldContext, channel_id: str, thread_ts: str) -> str:
    parent = _get(ctx, SlackMessage, channel_id, thread_ts)
    return parent.user if parent else ""


def _reactions(ctx: WorldContext, channel_id: str, ts: str) -> list[dict[str, Any]]:
    rows = ctx.session.scalars(
        select(SlackReaction)
        .where(
            SlackReaction.world_id == ctx.world_id,
            SlackReaction.channel_id == channel_id,
            SlackReaction.ts == ts,
        )
        .order_by(SlackReaction.seq)
    ).all()
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        entry = out.setdefault(r.name, {"name": r.name, "users": [], "count": 0})
        entry["users"].append(r.user_id)
        entry["count"] += 1
    return list(out.values())


def _message(ctx: WorldContext, channel_id: str, ts: str | None) -> SlackMessage:
    key = normalize_ts(ts)
    row = _get(ctx, SlackMessage, channel_id, key) if key else None
    if row is None:
        raise SlackError("message_not_found")
    return row


def _check_text(text: str | None, blocks: list[Any] | None, files: bool = False) -> str:
    text = text or ""
    if not text.strip() and not blocks and not files:
        raise SlackError("no_text")
    if len(text) > MAX_TEXT:
        raise SlackError("msg_too_long")
    return text


def _postable(ctx: WorldContext, channel: str, actor: str) -> SlackChannel:
    key = str(channel or "").strip()
    # Posting to a user id opens the IM with that user, as Slack does.
    if re.fullmatch(r"[UW][A-Z0-9]+", key) and _get(ctx, SlackUser, key):
        if key == actor:
            raise SlackError("cannot_dm_self")
        opened = conversations_open(ctx, users=key, as_user=actor)
        key = opened["channel"]["id"]
    ch = _channel(ctx, key, actor)
    if ch.is_archived:
        raise SlackError("is_archived")
    if not _is_member(ctx, ch.id, actor):
        raise SlackError("not_in_channel")
    return ch


def post_message(
    ctx: WorldContext,
    *,
    channel: str,
    text: str | None = None,
    thread_ts: str | None = None,
    blocks: list[Any] | None = None,
    reply_broadcast: bool = False,
    as_user: str | None = None,
    file_ids: list[str] | None = None,
    _action: str = "chat.postMessage",
) -> dict[str, Any]:
    """``chat.postMessage``: post to a channel (or into a thread with ``thread_ts``)."""
    actor = _actor(ctx, as_user)
    ch = _postable(ctx, channel, actor)
    text = _check_text(text, blocks, files=bool(file_ids))
    parent_ts = None
    if thread_ts:
        parent = _get(ctx, SlackMessage, ch.id, normalize_ts(thread_ts, "thread_ts"))
        if parent is None:
            raise SlackError("thread_not_found")
        # A reply to a reply joins the same thread.
        parent_ts = parent.thread_ts or parent.ts
        root = _get(ctx, SlackMessage, ch.id, parent_ts)
        if root is not None and root.thread_ts is None:
            root.thread_ts = root.ts
    ts = next_ts(ctx)
    row = SlackMessage(
        world_id=ctx.world_id,
        channel_id=ch.id,
        ts=ts,
        user=actor,
        text=text,
        thread_ts=parent_ts,
        subtype="thread_broadcast" if parent_ts and reply_broadcast else None,
        blocks=blocks or None,
        file_ids=file_ids or None,
    )
    ctx.session.add(row)
    ctx.session.flush()
    ctx.record(
        APP,
        _action,
        {
            "channel": ch.id,
            "ts": ts,
            "thread_ts": parent_ts,
            "user": actor,
            "text": text,
            "mentions": re.findall(r"<@(\w+)", text),
        },
    )
    return {"channel": ch.id, "ts": ts, "message": _message_json(ctx, row)}


def update_message(
    ctx: WorldContext,
    *,
    channel: str,
    ts: str,
    text: str | None = None,
    blocks: list[Any] | None = None,
    as_user: str | None = None,
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    msg = _message(ctx, ch.id, ts)
    if msg.user != actor or msg.subtype == "tombstone":
        raise SlackError("cant_update_message")
    if ch.is_archived:
        raise SlackError("is_archived")
    msg.text = _check_text(text if text is not None else msg.text, blocks or msg.blocks)
    if blocks is not None:
        msg.blocks = blocks or None
    msg.edited_ts = next_ts(ctx)
    msg.edited_by = actor
    ctx.record(
        APP, "chat.update", {"channel": ch.id, "ts": msg.ts, "user": actor, "text": msg.text}
    )
    return {"channel": ch.id, "ts": msg.ts, "text": msg.text, "message": _message_json(ctx, msg)}


def delete_message(
    ctx: WorldContext, *, channel: str, ts: str, as_user: str | None = None
) -> dict[str, Any]:
    """``chat.delete``: a thread parent with replies becomes a tombstone, as in Slack."""
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    msg = _message(ctx, ch.id, ts)
    if msg.user != actor:
        raise SlackError("cant_delete_message")
    has_replies = msg.thread_ts == msg.ts and ctx.session.scalar(
        select(func.count())
        .select_from(SlackMessage)
        .where(
            SlackMessage.world_id == ctx.world_id,
            SlackMessage.channel_id == ch.id,
            SlackMessage.thread_ts == msg.ts,
            SlackMessage.ts != msg.ts,
        )
    )
    for model in (SlackReaction, SlackPin):
        ctx.session.execute(
            delete(model).where(
                model.world_id == ctx.world_id, model.channel_id == ch.id, model.ts == msg.ts
            )
        )
    if has_replies:
        msg.subtype, msg.text, msg.blocks, msg.file_ids = (
            "tombstone",
            "This message was deleted.",
            None,
            None,
        )
    else:
        ctx.session.delete(msg)
    ctx.session.flush()
    ctx.record(APP, "chat.delete", {"channel": ch.id, "ts": msg.ts, "user": actor})
    return {"channel": ch.id, "ts": msg.ts}


def _permalink(ctx: WorldContext, channel_id: str, ts: str, thread_ts: str | None) -> str:
    meta = workspace(ctx)
    link = f"https://{meta.domain}.slack.com/archives/{channel_id}/p{ts.replace('.', '')}"
    if thread_ts and thread_ts != ts:
        link += f"?thread_ts={thread_ts}&cid={channel_id}"
    return link


def get_permalink(ctx: WorldContext, *, channel: str, message_ts: str) -> dict[str, Any]:
    ch = _channel(ctx, channel)
    msg = _message(ctx, ch.id, message_ts)
    return {"channel": ch.id, "permalink": _permalink(ctx, ch.id, msg.ts, msg.thread_ts)}


def schedule_message(
    ctx: WorldContext,
    *,
    channel: str,
    text: str | None,
    post_at: int | str,
    thread_ts: str | None = None,
    blocks: list[Any] | None = None,
    as_user: str | None = None,
) -> dict[str, Any]:
    """``chat.scheduleMessage``: posted by :func:`deliver_due` once the clock reaches it."""
    actor = _actor(ctx, as_user)
    ch = _postable(ctx, channel, actor)
    text = _check_text(text, blocks)
    try:
        when = int(float(post_at))
    except (TypeError, ValueError):
        raise SlackError("invalid_time", "post_at must be a Unix timestamp") from None
    now = _now_s(ctx)
    if when <= now:
        raise SlackError("time_in_past")
    if when > now + int(SCHEDULE_HORIZON.total_seconds()):
        raise SlackError("time_too_far")
    if thread_ts:
        _message(ctx, ch.id, thread_ts)
    sid = "Q" + ctx.new_id(width=10).upper()
    ctx.session.add(
        SlackScheduled(
            world_id=ctx.world_id,
            id=sid,
            channel_id=ch.id,
            user=actor,
            post_at=when,
            text=text,
            thread_ts=normalize_ts(thread_ts),
            blocks=blocks or None,
        )
    )
    ctx.session.flush()
    ctx.record(
        APP,
        "chat.scheduleMessage",
        {"channel": ch.id, "scheduled_message_id": sid, "post_at": when, "text": text},
    )
    return {
        "channel": ch.id,
        "scheduled_message_id": sid,
        "post_at": when,
        "message": {"type": "message", "user": actor, "text": text, "bot_id": None},
    }


def delete_scheduled(
    ctx: WorldContext, *, channel: str, scheduled_message_id: str, as_user: str | None = None
) -> dict[str, Any]:
    """``chat.deleteScheduledMessage``."""
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    row = _get(ctx, SlackScheduled, scheduled_message_id or "")
    if row is None or row.channel_id != ch.id or row.user != actor:
        raise SlackError("invalid_scheduled_message_id")
    ctx.session.delete(row)
    ctx.session.flush()
    ctx.record(
        APP, "chat.deleteScheduledMessage", {"channel": ch.id, "scheduled_message_id": row.id}
    )
    return {}


def deliver_due(ctx: WorldContext) -> list[dict[str, Any]]:
    """Post every scheduled message whose time has come (in ``post_at`` order).

    The world's clock-advance loop calls it; Slack routes call it too before answering, so a
    schedule is visible as soon as the clock passes it.
    """
    if ctx.session.get(SlackMeta, ctx.world_id) is None:
        return []
    due = ctx.session.scalars(
        select(SlackScheduled)
        .where(SlackScheduled.world_id == ctx.world_id, SlackScheduled.post_at <= _now_s(ctx))
        .order_by(SlackScheduled.post_at, SlackScheduled.id)
    ).all()
    posted = []
    for s in due:
        ctx.session.delete(s)
        ctx.session.flush()
        try:
            posted.append(
                post_message(
                    ctx,
                    channel=s.channel_id,
                    text=s.text,
                    thread_ts=s.thread_ts,
                    blocks=s.blocks,
                    as_user=s.user,
                    _action="chat.scheduledMessage.posted",
                )
            )
        except SlackError:
            continue  # the channel was archived or left meanwhile: Slack drops it too
    return posted


def scheduled_list(ctx: WorldContext, *, channel: str | None = None) -> dict[str, Any]:
    q = select(SlackScheduled).where(SlackScheduled.world_id == ctx.world_id)
    if channel:
        q = q.where(SlackScheduled.channel_id == _channel(ctx, channel).id)
    rows = ctx.session.scalars(q.order_by(SlackScheduled.post_at, SlackScheduled.id)).all()
    return {
        "scheduled_messages": [
            {
                "id": s.id,
                "channel_id": s.channel_id,
                "post_at": s.post_at,
                "date_created": s.post_at,
                "text": s.text,
            }
            for s in rows
        ],
        "response_metadata": {"next_cursor": ""},
    }


def _range_filters(q: Any, oldest: str | None, latest: str | None, inclusive: bool) -> Any:
    lo = normalize_ts(oldest, "oldest")
    hi = normalize_ts(latest, "latest")
    if lo:
        q = q.where(SlackMessage.ts >= lo if inclusive else SlackMessage.ts > lo)
    if hi:
        q = q.where(SlackMessage.ts <= hi if inclusive else SlackMessage.ts < hi)
    return q


def conversations_history(
    ctx: WorldContext,
    *,
    channel: str,
    cursor: str | None = None,
    limit: int | None = None,
    oldest: str | None = None,
    latest: str | None = None,
    inclusive: bool = False,
) -> dict[str, Any]:
    """Top-level messages (and thread broadcasts), newest first, cursor-paged."""
    ch = _channel(ctx, channel)
    n = _limit(limit, 100, 999)
    q = select(SlackMessage).where(
        SlackMessage.world_id == ctx.world_id,
        SlackMessage.channel_id == ch.id,
        or_(
            SlackMessage.thread_ts.is_(None),
            SlackMessage.thread_ts == SlackMessage.ts,
            SlackMessage.subtype == "thread_broadcast",
        ),
    )
    q = _range_filters(q, oldest, latest, inclusive)
    before = _decode_cursor(cursor, "before")
    if before:
        q = q.where(SlackMessage.ts < normalize_ts(before))
    rows = ctx.session.scalars(q.order_by(SlackMessage.ts.desc()).limit(n + 1)).all()
    has_more = len(rows) > n
    rows = rows[:n]
    pins = ctx.session.scalar(
        select(func.count())
        .select_from(SlackPin)
        .where(SlackPin.world_id == ctx.world_id, SlackPin.channel_id == ch.id)
    )
    return {
        "messages": [_message_json(ctx, m) for m in rows],
        "has_more": has_more,
        "pin_count": pins or 0,
        "channel_actions_ts": None,
        "channel_actions_count": 0,
        "response_metadata": {
            "next_cursor": _encode_cursor("before", rows[-1].ts) if has_more else ""
        },
    }


def conversations_replies(
    ctx: WorldContext,
    *,
    channel: str,
    ts: str,
    cursor: str | None = None,
    limit: int | None = None,
    oldest: str | None = None,
    latest: str | None = None,
    inclusive: bool = False,
) -> dict[str, Any]:
    """A thread: its parent first, then replies oldest first (the parent leads every page)."""
    ch = _channel(ctx, channel)
    msg = _message(ctx, ch.id, ts)
    root_ts = msg.thread_ts or msg.ts
    root = _get(ctx, SlackMessage, ch.id, root_ts)
    n = _limit(limit, 100, 1000)
    q = select(SlackMessage).where(
        SlackMessage.world_id == ctx.world_id,
        SlackMessage.channel_id == ch.id,
        SlackMessage.thread_ts == root_ts,
        SlackMessage.ts != root_ts,
    )
    q = _range_filters(q, oldest, latest, inclusive)
    after = _decode_cursor(cursor, "after")
    if after:
        q = q.where(SlackMessage.ts > normalize_ts(after))
    rows = ctx.session.scalars(q.order_by(SlackMessage.ts).limit(n + 1)).all()
    has_more = len(rows) > n
    rows = rows[:n]
    messages = ([_message_json(ctx, root)] if root else []) + [_message_json(ctx, m) for m in rows]
    return {
        "messages": messages,
        "has_more": has_more,
        "response_metadata": {
            "next_cursor": _encode_cursor("after", rows[-1].ts) if has_more else ""
        },
    }
