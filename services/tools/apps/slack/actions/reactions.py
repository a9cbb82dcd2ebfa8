"""Slack's ``reactions.*`` and ``pins.*`` methods."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import func, select

from services.tools.apps.slack.actions._base import APP, _get, _now_s
from services.tools.apps.slack.actions.chat import _message, _message_json
from services.tools.apps.slack.actions.conversations import _channel
from services.tools.apps.slack.actions.team import _actor, _is_member
from services.tools.apps.slack.errors import SlackError
from services.tools.apps.slack.models import (
    SlackMessage,
    SlackPin,
    SlackReaction,
)
from services.tools.context import WorldContext

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
