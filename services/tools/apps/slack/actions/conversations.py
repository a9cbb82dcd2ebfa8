"""Slack's ``conversations.*`` methods (channels, IMs, membership, topic and purpose) and
``users.conversations``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from services.tools.apps.slack.actions._base import (
    _CHANNEL_NAME,
    _TYPES,
    APP,
    _get,
    _limit,
    _page,
    _split,
)
from services.tools.apps.slack.actions.team import (
    _actor,
    _add_member,
    _is_member,
    _new_channel,
    _user,
    agent_user_id,
)
from services.tools.apps.slack.errors import SlackError
from services.tools.apps.slack.models import (
    SlackChannel,
    SlackMember,
)
from services.tools.context import WorldContext


def _members(ctx: WorldContext, channel_id: str) -> list[str]:
    return list(
        ctx.session.scalars(
            select(SlackMember.user_id)
            .where(SlackMember.world_id == ctx.world_id, SlackMember.channel_id == channel_id)
            .order_by(SlackMember.user_id)
        )
    )


def _can_see(ctx: WorldContext, ch: SlackChannel, user_id: str) -> bool:
    return ch.kind == "public" or _is_member(ctx, ch.id, user_id)


def _channel(ctx: WorldContext, channel: str | None, user_id: str | None = None) -> SlackChannel:
    """Resolve an id, ``#name``, ``<#C…|name>`` or bare name; hidden channels are not found."""
    if not channel or not str(channel).strip():
        raise SlackError("channel_not_found", "channel is required")
    key = str(channel).strip()
    m = re.fullmatch(r"<#(\w+)(?:\|[^>]*)?>", key)
    if m:
        key = m.group(1)
    row = _get(ctx, SlackChannel, key)
    if row is None:
        name = key.lstrip("#")
        row = ctx.session.scalar(
            select(SlackChannel)
            .where(
                SlackChannel.world_id == ctx.world_id,
                SlackChannel.name == name,
                SlackChannel.kind.in_(("public", "private")),
            )
            .order_by(SlackChannel.id)
        )
    if row is None:
        raise SlackError("channel_not_found", f"no channel {channel!r}")
    viewer = user_id or agent_user_id(ctx)
    if not _can_see(ctx, row, viewer):
        raise SlackError("channel_not_found", f"no channel {channel!r}")
    return row


def _channel_json(ctx: WorldContext, ch: SlackChannel, viewer: str) -> dict[str, Any]:
    if ch.kind == "im":
        return {
            "id": ch.id,
            "created": ch.created,
            "is_im": True,
            "is_org_shared": False,
            "user": ch.im_user if ch.im_user != viewer else ch.creator,
            "is_user_deleted": False,
            "priority": 0,
        }
    members = _members(ctx, ch.id)
    return {
        "id": ch.id,
        "name": ch.name,
        "is_channel": ch.kind in ("public", "private"),
        "is_group": ch.kind == "private",
        "is_im": False,
        "is_mpim": ch.kind == "mpim",
        "is_private": ch.kind != "public",
        "created": ch.created,
        "is_archived": ch.is_archived,
        "is_general": ch.is_general,
        "unlinked": 0,
        "name_normalized": ch.name,
        "is_shared": False,
        "is_org_shared": False,
        "is_member": viewer in members,
        "creator": ch.creator,
        "num_members": len(members),
        "topic": {"value": ch.topic, "creator": ch.creator if ch.topic else "", "last_set": 0},
        "purpose": {
            "value": ch.purpose,
            "creator": ch.creator if ch.purpose else "",
            "last_set": 0,
        },
    }


def conversations_list(
    ctx: WorldContext,
    *,
    types: str | None = None,
    exclude_archived: bool = False,
    cursor: str | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    viewer = agent_user_id(ctx)
    wanted = set()
    for t in (types or "public_channel").split(","):
        t = t.strip()
        if not t:
            continue
        if t not in _TYPES:
            raise SlackError("invalid_types", f"unknown type {t!r}; use {', '.join(_TYPES)}")
        wanted.add(_TYPES[t])
    rows = ctx.session.scalars(
        select(SlackChannel)
        .where(SlackChannel.world_id == ctx.world_id, SlackChannel.kind.in_(wanted))
        .order_by(SlackChannel.created, SlackChannel.id)
    ).all()
    visible = [
        ch for ch in rows if _can_see(ctx, ch, viewer) and not (exclude_archived and ch.is_archived)
    ]
    chunk, nxt = _page(visible, cursor, _limit(limit, 100, 1000))
    return {
        "channels": [_channel_json(ctx, ch, viewer) for ch in chunk],
        "response_metadata": {"next_cursor": nxt},
    }


def conversations_info(ctx: WorldContext, *, channel: str) -> dict[str, Any]:
    viewer = agent_user_id(ctx)
    return {"channel": _channel_json(ctx, _channel(ctx, channel, viewer), viewer)}


def conversations_members(
    ctx: WorldContext, *, channel: str, cursor: str | None = None, limit: int | None = None
) -> dict[str, Any]:
    ch = _channel(ctx, channel)
    chunk, nxt = _page(_members(ctx, ch.id), cursor, _limit(limit, 100, 1000))
    return {"members": chunk, "response_metadata": {"next_cursor": nxt}}


def conversations_create(
    ctx: WorldContext, *, name: str, is_private: bool = False, as_user: str | None = None
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    name = (name or "").strip()
    if not name:
        raise SlackError("invalid_name_required")
    if len(name) > 80:
        raise SlackError("invalid_name_maxlength")
    if not _CHANNEL_NAME.fullmatch(name):
        raise SlackError(
            "invalid_name_specials", "names are lowercase letters, digits, '-' and '_'"
        )
    taken = ctx.session.scalar(
        select(SlackChannel.id).where(
            SlackChannel.world_id == ctx.world_id,
            SlackChannel.name == name,
            SlackChannel.kind.in_(("public", "private")),
        )
    )
    if taken:
        raise SlackError("name_taken")
    ch = _new_channel(ctx, name, "private" if is_private else "public", actor)
    _add_member(ctx, ch.id, actor)
    ctx.record(APP, "conversations.create", {"channel": ch.id, "name": name, "user": actor})
    return {"channel": _channel_json(ctx, ch, actor)}


def conversations_join(
    ctx: WorldContext, *, channel: str, as_user: str | None = None
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    if ch.kind != "public":
        raise SlackError("method_not_supported_for_channel_type")
    if ch.is_archived:
        raise SlackError("is_archived")
    out: dict[str, Any] = {}
    if _add_member(ctx, ch.id, actor):
        ctx.record(APP, "conversations.join", {"channel": ch.id, "user": actor})
    else:
        out["warning"] = "already_in_channel"
        out["response_metadata"] = {"warnings": ["already_in_channel"]}
    out["channel"] = _channel_json(ctx, ch, actor)
    return out


def conversations_invite(
    ctx: WorldContext, *, channel: str, users: str | Sequence[str], as_user: str | None = None
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    if ch.kind in ("im", "mpim"):
        raise SlackError("method_not_supported_for_channel_type")
    if ch.is_archived:
        raise SlackError("is_archived")
    if not _is_member(ctx, ch.id, actor):
        raise SlackError("not_in_channel")
    ids = _split(users)
    if not ids:
        raise SlackError("no_user")
    resolved = [_user(ctx, u).id for u in ids]
    if actor in resolved:
        raise SlackError("cant_invite_self")
    added = [u for u in resolved if _add_member(ctx, ch.id, u)]
    if not added:
        raise SlackError("already_in_channel")
    ctx.record(APP, "conversations.invite", {"channel": ch.id, "users": added, "user": actor})
    return {"channel": _channel_json(ctx, ch, actor)}


def conversations_archive(
    ctx: WorldContext, *, channel: str, as_user: str | None = None
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    if ch.kind in ("im", "mpim"):
        raise SlackError("method_not_supported_for_channel_type")
    if ch.is_general:
        raise SlackError("cant_archive_general")
    if ch.is_archived:
        raise SlackError("already_archived")
    if not _is_member(ctx, ch.id, actor):
        raise SlackError("not_in_channel")
    ch.is_archived = True
    ctx.record(APP, "conversations.archive", {"channel": ch.id, "user": actor})
    return {}


def conversations_open(
    ctx: WorldContext,
    *,
    users: str | Sequence[str] | None = None,
    channel: str | None = None,
    return_im: bool = False,
    as_user: str | None = None,
) -> dict[str, Any]:
    """Open (find or create) the IM with one user, or the group IM with several."""
    actor = _actor(ctx, as_user)
    if channel:
        ch = _channel(ctx, channel, actor)
        return {"channel": _channel_json(ctx, ch, actor) if return_im else {"id": ch.id}}
    ids = sorted({_user(ctx, u).id for u in _split(users or "")} - {actor})
    if not ids:
        raise SlackError("users_list_not_supplied")
    if len(ids) > 8:
        raise SlackError("too_many_users")
    everyone = sorted({actor, *ids})
    kind = "im" if len(ids) == 1 else "mpim"
    for ch in ctx.session.scalars(
        select(SlackChannel).where(SlackChannel.world_id == ctx.world_id, SlackChannel.kind == kind)
    ):
        if _members(ctx, ch.id) == everyone:
            body = _channel_json(ctx, ch, actor) if return_im else {"id": ch.id}
            return {"no_op": True, "already_open": True, "channel": body}
    if kind == "im":
        ch = _new_channel(ctx, "", "im", actor, im_user=ids[0], prefix="D")
    else:
        names = [_user(ctx, u).name for u in everyone]
        ch = _new_channel(ctx, "mpdm-" + "--".join(names) + "-1", "mpim", actor, prefix="G")
    for u in everyone:
        _add_member(ctx, ch.id, u)
    ctx.record(APP, "conversations.open", {"channel": ch.id, "users": everyone, "user": actor})
    return {"channel": _channel_json(ctx, ch, actor) if return_im else {"id": ch.id}}


def _find_im(ctx: WorldContext, user_a: str, user_b: str) -> str | None:
    """The id of the IM between two users, if one was opened (never creates it)."""
    pair = sorted({user_a, user_b})
    for ch in ctx.session.scalars(
        select(SlackChannel)
        .where(SlackChannel.world_id == ctx.world_id, SlackChannel.kind == "im")
        .order_by(SlackChannel.id)
    ):
        if _members(ctx, ch.id) == pair:
            return ch.id
    return None


def conversations_set_text(
    ctx: WorldContext, *, channel: str, field: str, value: str, as_user: str | None = None
) -> dict[str, Any]:
    """``conversations.setTopic`` / ``setPurpose`` (``field`` is ``topic`` or ``purpose``)."""
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    if ch.kind == "im":
        raise SlackError("method_not_supported_for_channel_type")
    if ch.is_archived:
        raise SlackError("is_archived")
    if not _is_member(ctx, ch.id, actor):
        raise SlackError("not_in_channel")
    if len(value or "") > 250:
        raise SlackError("too_long")
    setattr(ch, field, value or "")
    ctx.record(
        APP,
        f"conversations.set{field.capitalize()}",
        {"channel": ch.id, field: value, "user": actor},
    )
    return {"channel": _channel_json(ctx, ch, actor)}


def conversations_rename(
    ctx: WorldContext, *, channel: str, name: str, as_user: str | None = None
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    if ch.kind not in ("public", "private"):
        raise SlackError("method_not_supported_for_channel_type")
    if not _is_member(ctx, ch.id, actor):
        raise SlackError("not_in_channel")
    name = (name or "").strip()
    if not name:
        raise SlackError("invalid_name_required")
    if not _CHANNEL_NAME.fullmatch(name):
        raise SlackError("invalid_name_specials")
    taken = ctx.session.scalar(
        select(SlackChannel.id).where(
            SlackChannel.world_id == ctx.world_id,
            SlackChannel.name == name,
            SlackChannel.kind.in_(("public", "private")),
            SlackChannel.id != ch.id,
        )
    )
    if taken:
        raise SlackError("name_taken")
    old, ch.name = ch.name, name
    ctx.record(
        APP, "conversations.rename", {"channel": ch.id, "from": old, "to": name, "user": actor}
    )
    return {"channel": _channel_json(ctx, ch, actor)}


def conversations_unarchive(
    ctx: WorldContext, *, channel: str, as_user: str | None = None
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    if not ch.is_archived:
        raise SlackError("not_archived")
    ch.is_archived = False
    ctx.record(APP, "conversations.unarchive", {"channel": ch.id, "user": actor})
    return {}


def conversations_kick(
    ctx: WorldContext, *, channel: str, user: str, as_user: str | None = None
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    if ch.kind in ("im", "mpim"):
        raise SlackError("method_not_supported_for_channel_type")
    if ch.is_general:
        raise SlackError("cant_kick_from_general")
    if not _is_member(ctx, ch.id, actor):
        raise SlackError("not_in_channel")
    target = _user(ctx, user).id
    if target == actor:
        raise SlackError("cant_kick_self")
    row = _get(ctx, SlackMember, ch.id, target)
    if row is None:
        raise SlackError("not_in_channel")
    ctx.session.delete(row)
    ctx.session.flush()
    ctx.record(APP, "conversations.kick", {"channel": ch.id, "kicked": target, "user": actor})
    return {}


def conversations_leave(
    ctx: WorldContext, *, channel: str, as_user: str | None = None
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    if ch.is_general:
        raise SlackError("cant_leave_general")
    if ch.kind == "im":
        raise SlackError("method_not_supported_for_channel_type")
    row = _get(ctx, SlackMember, ch.id, actor)
    if row is None:
        return {"not_in_channel": True}
    ctx.session.delete(row)
    ctx.session.flush()
    ctx.record(APP, "conversations.leave", {"channel": ch.id, "user": actor})
    return {}


def users_conversations(
    ctx: WorldContext,
    *,
    types: str | None = None,
    exclude_archived: bool = False,
    cursor: str | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """The conversations the agent is a member of."""
    viewer = agent_user_id(ctx)
    listed = conversations_list(
        ctx, types=types, exclude_archived=exclude_archived, cursor=None, limit=100_000
    )
    mine = [c for c in listed["channels"] if c.get("is_member") or c.get("is_im")]
    ids = {c["id"] for c in mine}
    rows = [
        ch
        for ch in ctx.session.scalars(
            select(SlackChannel)
            .where(SlackChannel.world_id == ctx.world_id)
            .order_by(SlackChannel.created, SlackChannel.id)
        )
        if ch.id in ids and _is_member(ctx, ch.id, viewer)
    ]
    chunk, nxt = _page(rows, cursor, _limit(limit, 100, 1000))
    return {
        "channels": [_channel_json(ctx, ch, viewer) for ch in chunk],
        "response_metadata": {"next_cursor": nxt},
    }
