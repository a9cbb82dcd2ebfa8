"""Slack's operations as plain functions over a world (routes, MCP tools, NPCs, oracles).

Each function takes the :class:`~services.tools.context.WorldContext` first and returns the
JSON Slack's Web API would (without the ``ok`` wrapper), or raises :class:`SlackError` with
Slack's error code. The acting user is the world's agent user unless ``as_user`` names another
(NPCs and scenario set-up post as colleagues). Every write is recorded with ``ctx.record`` under
the Slack method name (``chat.postMessage``, ...), so events can trigger on it.

Identifiers: users ``U…``, channels ``C…`` (public and private), IMs ``D…``, group IMs ``G…``,
files ``F…``, scheduled messages ``Q…``; message ids are ``ts`` strings (``"1718000000.000100"``)
from the world's simulated clock, strictly increasing per world (:func:`next_ts`).

Why one file: every Web API method here shares the same private helpers (actors, channel
access and membership, ``ts`` allocation, message rendering) and follows Slack's method
reference; the search engine (``search``) is already apart, and splitting the rest would
scatter one API's rules over modules that all import each other's internals.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select

from services.tools.apps.slack.errors import SlackError
from services.tools.apps.slack.models import (
    SlackChannel,
    SlackFile,
    SlackMember,
    SlackMessage,
    SlackMeta,
    SlackPin,
    SlackReaction,
    SlackScheduled,
    SlackUser,
)
from services.tools.context import WorldContext

APP = "slack"
MAX_TEXT = 40_000
SCHEDULE_HORIZON = timedelta(days=120)
_CHANNEL_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,79}$")
_TYPES = {"public_channel": "public", "private_channel": "private", "im": "im", "mpim": "mpim"}


# --------------------------------------------------------------------------- workspace, ids


def _get(ctx: WorldContext, model: Any, *keys: Any) -> Any:
    """A row of this world by its own key columns (in declaration order), or None."""
    names = [c.key for c in model.__mapper__.primary_key if c.key != "world_id"]
    return ctx.session.get(model, {"world_id": ctx.world_id, **dict(zip(names, keys, strict=True))})


def setup_workspace(
    ctx: WorldContext,
    *,
    team_name: str = "k3stack",
    agent_name: str = "assistant",
    agent_real_name: str = "Assistant",
    agent_email: str = "assistant@k3stack.test",
    general_channel: str = "general",
) -> SlackMeta:
    """Create the world's workspace (team, agent user, #general) once; returns its meta row.

    Scenario set-up calls it with the world's people; any Slack call made before that gets the
    defaults, so an empty world still has a usable workspace.
    """
    existing = ctx.session.get(SlackMeta, ctx.world_id)
    if existing is not None:
        if not _pristine_default(ctx, existing, agent_email):
            return existing
        # the world's default workspace, never used: the set-up's identity replaces it
        for model in (SlackMember, SlackChannel, SlackUser):
            ctx.session.execute(delete(model).where(model.world_id == ctx.world_id))
        ctx.session.delete(existing)
        ctx.session.flush()
    meta = SlackMeta(
        world_id=ctx.world_id,
        team_id="T" + ctx.new_id(width=8).upper(),
        team_name=team_name,
        domain=re.sub(r"[^a-z0-9-]", "", team_name.lower()) or "k3stack",
        agent_user_id="",
        last_ts_us=0,
    )
    ctx.session.add(meta)
    ctx.session.flush()
    agent = create_user(
        ctx, name=agent_name, real_name=agent_real_name, email=agent_email, _record=False
    )
    meta.agent_user_id = agent["id"]
    channel = _new_channel(ctx, general_channel, "public", agent["id"], is_general=True)
    _add_member(ctx, channel.id, agent["id"])
    ctx.session.flush()
    return meta


DEFAULT_AGENT = "assistant@k3stack.test"


def _pristine_default(ctx: WorldContext, meta: SlackMeta, wanted_email: str) -> bool:
    """The default workspace every world starts with, untouched, while set-up asks for
    another identity."""
    agent = ctx.session.get(SlackUser, (ctx.world_id, meta.agent_user_id))
    if agent is None or agent.email != DEFAULT_AGENT or wanted_email.lower() == DEFAULT_AGENT:
        return False
    users = ctx.session.scalars(select(SlackUser.id).where(SlackUser.world_id == ctx.world_id))
    posted = ctx.session.scalar(
        select(SlackMessage.ts).where(SlackMessage.world_id == ctx.world_id).limit(1)
    )
    return posted is None and list(users) == [meta.agent_user_id]


def workspace(ctx: WorldContext) -> SlackMeta:
    """The world's workspace meta row, created with defaults on first use."""
    return ctx.session.get(SlackMeta, ctx.world_id) or setup_workspace(ctx)


def agent_user_id(ctx: WorldContext) -> str:
    return workspace(ctx).agent_user_id


def _actor(ctx: WorldContext, as_user: str | None) -> str:
    if as_user is None:
        return agent_user_id(ctx)
    workspace(ctx)
    return _user(ctx, as_user).id


def next_ts(ctx: WorldContext) -> str:
    """A new message ts: the world clock in microseconds, bumped to stay strictly increasing."""
    meta = workspace(ctx)
    now_us = int(ctx.now.timestamp() * 1_000_000)
    value = max(now_us, (meta.last_ts_us or 0) + 1)
    meta.last_ts_us = value
    return f"{value // 1_000_000}.{value % 1_000_000:06d}"


def normalize_ts(value: str | float | int | None, field: str = "ts") -> str | None:
    """``"1718000000.0001"`` / ``1718000000`` -> ``"1718000000.000100"`` (comparable as text)."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    m = re.fullmatch(r"(\d{1,12})(?:\.(\d{1,6}))?", text)
    if not m:
        raise SlackError("invalid_arguments", f"{field} must look like 1718000000.000100")
    return f"{int(m.group(1)):010d}.{(m.group(2) or '0').ljust(6, '0')}"


def _ts_datetime(ts: str) -> datetime:
    sec, _, frac = ts.partition(".")
    return datetime.fromtimestamp(int(sec), UTC) + timedelta(microseconds=int(frac or 0))


def _now_s(ctx: WorldContext) -> int:
    return int(ctx.now.timestamp())


def _encode_cursor(kind: str, value: str | int) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{value}".encode()).decode()


def _decode_cursor(cursor: str | None, kind: str) -> str | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor.encode() + b"=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise SlackError("invalid_cursor", "the cursor was not issued by this method") from None
    prefix, _, value = raw.partition(":")
    if prefix != kind or not value:
        raise SlackError("invalid_cursor", "the cursor was not issued by this method")
    return value


def _offset(cursor: str | None) -> int:
    value = _decode_cursor(cursor, "offset")
    if value is None:
        return 0
    if not value.isdigit():
        raise SlackError("invalid_cursor")
    return int(value)


def _limit(limit: int | None, default: int, maximum: int) -> int:
    if limit is None or limit <= 0:
        return default
    return min(limit, maximum)


def _page(items: list[Any], cursor: str | None, limit: int) -> tuple[list[Any], str]:
    start = _offset(cursor)
    chunk = items[start : start + limit]
    nxt = _encode_cursor("offset", start + limit) if start + limit < len(items) else ""
    return chunk, nxt


# --------------------------------------------------------------------------- users


def create_user(
    ctx: WorldContext,
    *,
    name: str,
    real_name: str = "",
    email: str = "",
    title: str = "",
    tz: str = "UTC",
    is_bot: bool = False,
    is_admin: bool = False,
    user_id: str | None = None,
    _record: bool = True,
) -> dict[str, Any]:
    """Add a workspace member (scenario set-up; NPC colleagues)."""
    if ctx.session.get(SlackMeta, ctx.world_id) is None and _record:
        workspace(ctx)
    uid = user_id or "U" + ctx.new_id(width=10).upper()
    if _get(ctx, SlackUser, uid) is not None:
        raise SlackError("user_already_exists", uid)
    row = SlackUser(
        world_id=ctx.world_id,
        id=uid,
        name=name,
        real_name=real_name or name,
        email=email,
        title=title,
        tz=tz,
        is_bot=is_bot,
        is_admin=is_admin,
        deleted=False,
    )
    ctx.session.add(row)
    ctx.session.flush()
    # Everyone is in #general, as in a fresh Slack workspace.
    general = ctx.session.scalar(
        select(SlackChannel).where(
            SlackChannel.world_id == ctx.world_id, SlackChannel.is_general.is_(True)
        )
    )
    if general is not None:
        _add_member(ctx, general.id, uid)
    if _record:
        ctx.record(APP, "users.create", {"user": uid, "name": name})
    return _user_json(ctx, row)


def _user(ctx: WorldContext, user: str) -> SlackUser:
    key = user.strip()
    m = re.fullmatch(r"<@(\w+)(?:\|[^>]*)?>", key)
    if m:
        key = m.group(1)
    row = _get(ctx, SlackUser, key) if key else None
    if row is None and key:
        name = key.lstrip("@")
        row = ctx.session.scalar(
            select(SlackUser)
            .where(SlackUser.world_id == ctx.world_id, SlackUser.name == name)
            .order_by(SlackUser.id)
        )
    if row is None:
        raise SlackError("user_not_found", f"no user {user!r}")
    return row


def _user_json(ctx: WorldContext, u: SlackUser) -> dict[str, Any]:
    meta = ctx.session.get(SlackMeta, ctx.world_id)
    return {
        "id": u.id,
        "team_id": meta.team_id if meta else "",
        "name": u.name,
        "deleted": u.deleted,
        "real_name": u.real_name,
        "tz": u.tz,
        "is_admin": u.is_admin,
        "is_bot": u.is_bot,
        "profile": {
            "real_name": u.real_name,
            "display_name": u.name,
            "email": u.email,
            "title": u.title,
        },
    }


def users_list(
    ctx: WorldContext, *, cursor: str | None = None, limit: int | None = None
) -> dict[str, Any]:
    workspace(ctx)
    rows = ctx.session.scalars(
        select(SlackUser).where(SlackUser.world_id == ctx.world_id).order_by(SlackUser.id)
    ).all()
    chunk, nxt = _page(list(rows), cursor, _limit(limit, 200, 1000))
    return {
        "members": [_user_json(ctx, u) for u in chunk],
        "cache_ts": _now_s(ctx),
        "response_metadata": {"next_cursor": nxt},
    }


def users_info(ctx: WorldContext, *, user: str) -> dict[str, Any]:
    workspace(ctx)
    return {"user": _user_json(ctx, _user(ctx, user))}


def users_lookup_by_email(ctx: WorldContext, *, email: str) -> dict[str, Any]:
    workspace(ctx)
    row = ctx.session.scalar(
        select(SlackUser).where(
            SlackUser.world_id == ctx.world_id,
            func.lower(SlackUser.email) == email.strip().lower(),
        )
    )
    if row is None or not email.strip():
        raise SlackError("users_not_found")
    return {"user": _user_json(ctx, row)}


def auth_test(ctx: WorldContext) -> dict[str, Any]:
    meta = workspace(ctx)
    agent = _user(ctx, meta.agent_user_id)
    return {
        "url": f"https://{meta.domain}.slack.com/",
        "team": meta.team_name,
        "user": agent.name,
        "team_id": meta.team_id,
        "user_id": agent.id,
        "is_enterprise_install": False,
    }


# --------------------------------------------------------------------------- conversations


def _new_channel(
    ctx: WorldContext,
    name: str,
    kind: str,
    creator: str,
    *,
    is_general: bool = False,
    im_user: str = "",
    prefix: str = "C",
) -> SlackChannel:
    row = SlackChannel(
        world_id=ctx.world_id,
        id=prefix + ctx.new_id(width=10).upper(),
        name=name,
        kind=kind,
        is_archived=False,
        is_general=is_general,
        created=_now_s(ctx),
        creator=creator,
        topic="",
        purpose="",
        im_user=im_user,
    )
    ctx.session.add(row)
    ctx.session.flush()
    return row


def _add_member(ctx: WorldContext, channel_id: str, user_id: str) -> bool:
    if _get(ctx, SlackMember, channel_id, user_id) is not None:
        return False
    ctx.session.add(SlackMember(world_id=ctx.world_id, channel_id=channel_id, user_id=user_id))
    ctx.session.flush()
    return True


def _is_member(ctx: WorldContext, channel_id: str, user_id: str) -> bool:
    return _get(ctx, SlackMember, channel_id, user_id) is not None


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


# --------------------------------------------------------------------------- reactions, pins


_REACTION_NAME = re.compile(r"^[a-z0-9_+\-']{1,100}$")


def _reaction_target(ctx: WorldContext, channel: str | None, timestamp: str | None) -> SlackMessage:
    if not channel or not timestamp:
        raise SlackError("no_item_specified")
    ch = _channel(ctx, channel)
    return _message(ctx, ch.id, timestamp)


def reactions_add(
    ctx: WorldContext,
    *,
    channel: str,
    timestamp: str,
    name: str,
    as_user: str | None = None,
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    name = (name or "").strip().strip(":")
    if not _REACTION_NAME.fullmatch(name):
        raise SlackError("invalid_name")
    msg = _reaction_target(ctx, channel, timestamp)
    if _get(ctx, SlackReaction, msg.channel_id, msg.ts, name, actor):
        raise SlackError("already_reacted")
    seq = (
        ctx.session.scalar(
            select(func.max(SlackReaction.seq)).where(SlackReaction.world_id == ctx.world_id)
        )
        or 0
    ) + 1
    ctx.session.add(
        SlackReaction(
            world_id=ctx.world_id,
            channel_id=msg.channel_id,
            ts=msg.ts,
            name=name,
            user_id=actor,
            seq=seq,
        )
    )
    ctx.session.flush()
    ctx.record(
        APP, "reactions.add", {"channel": msg.channel_id, "ts": msg.ts, "name": name, "user": actor}
    )
    return {}


def reactions_remove(
    ctx: WorldContext,
    *,
    channel: str,
    timestamp: str,
    name: str,
    as_user: str | None = None,
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    name = (name or "").strip().strip(":")
    msg = _reaction_target(ctx, channel, timestamp)
    row = _get(ctx, SlackReaction, msg.channel_id, msg.ts, name, actor)
    if row is None:
        raise SlackError("no_reaction")
    ctx.session.delete(row)
    ctx.session.flush()
    ctx.record(
        APP,
        "reactions.remove",
        {"channel": msg.channel_id, "ts": msg.ts, "name": name, "user": actor},
    )
    return {}


def reactions_get(ctx: WorldContext, *, channel: str, timestamp: str) -> dict[str, Any]:
    msg = _reaction_target(ctx, channel, timestamp)
    return {
        "type": "message",
        "channel": msg.channel_id,
        "message": _message_json(ctx, msg),
    }


def pins_add(
    ctx: WorldContext, *, channel: str, timestamp: str, as_user: str | None = None
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    if not _is_member(ctx, ch.id, actor):
        raise SlackError("not_in_channel")
    if not timestamp:
        raise SlackError("no_item_specified")
    msg = _message(ctx, ch.id, timestamp)
    if _get(ctx, SlackPin, ch.id, msg.ts) is not None:
        raise SlackError("already_pinned")
    ctx.session.add(
        SlackPin(
            world_id=ctx.world_id, channel_id=ch.id, ts=msg.ts, pinned_by=actor, created=_now_s(ctx)
        )
    )
    ctx.session.flush()
    ctx.record(APP, "pins.add", {"channel": ch.id, "ts": msg.ts, "user": actor})
    return {}


def pins_remove(
    ctx: WorldContext, *, channel: str, timestamp: str, as_user: str | None = None
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    ch = _channel(ctx, channel, actor)
    if not timestamp:
        raise SlackError("no_item_specified")
    msg = _message(ctx, ch.id, timestamp)
    row = _get(ctx, SlackPin, ch.id, msg.ts)
    if row is None:
        raise SlackError("no_pin")
    ctx.session.delete(row)
    ctx.session.flush()
    ctx.record(APP, "pins.remove", {"channel": ch.id, "ts": msg.ts, "user": actor})
    return {}


def pins_list(ctx: WorldContext, *, channel: str) -> dict[str, Any]:
    ch = _channel(ctx, channel)
    rows = ctx.session.scalars(
        select(SlackPin)
        .where(SlackPin.world_id == ctx.world_id, SlackPin.channel_id == ch.id)
        .order_by(SlackPin.created.desc(), SlackPin.ts.desc())
    ).all()
    items = []
    for p in rows:
        msg = _get(ctx, SlackMessage, ch.id, p.ts)
        if msg is None:
            continue
        items.append(
            {
                "type": "message",
                "created": p.created,
                "created_by": p.pinned_by,
                "channel": ch.id,
                "message": _message_json(ctx, msg),
            }
        )
    return {"items": items}


# --------------------------------------------------------------------------- files


def _file_json(ctx: WorldContext, f: SlackFile) -> dict[str, Any]:
    meta = workspace(ctx)
    ext = f.name.rsplit(".", 1)[-1].lower() if "." in f.name else "binary"
    return {
        "id": f.id,
        "created": f.created,
        "timestamp": f.created,
        "name": f.name,
        "title": f.title or f.name,
        "mimetype": f.mimetype,
        "filetype": ext,
        "pretty_type": ext.upper(),
        "user": f.user,
        "size": f.size,
        "mode": "hosted",
        "is_external": False,
        "is_public": False,
        "url_private": f"https://files.slack.com/files-pri/{meta.team_id}-{f.id}/{f.name}",
        "url_private_download": (
            f"https://files.slack.com/files-pri/{meta.team_id}-{f.id}/download/{f.name}"
        ),
        "permalink": f"https://{meta.domain}.slack.com/files/{f.user}/{f.id}/{f.name}",
        "channels": list(f.channels or []),
    }


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


# --------------------------------------------------------------------------- helpers


def _split(values: str | Sequence[str] | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        items: Iterable[str] = values.split(",")
    else:
        items = values
    return [v.strip() for v in items if v and v.strip()]
