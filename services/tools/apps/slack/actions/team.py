"""The Slack team (workspace) of a world: its set-up, the agent and acting users, ``ts``
allocation, channel membership rows and the JSON of users and files that every method renders.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import delete, select

from services.tools.apps.slack.actions._base import APP, DEFAULT_AGENT, _get, _now_s
from services.tools.apps.slack.errors import SlackError
from services.tools.apps.slack.models import (
    SlackChannel,
    SlackFile,
    SlackMember,
    SlackMessage,
    SlackMeta,
    SlackUser,
)
from services.tools.context import WorldContext


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
