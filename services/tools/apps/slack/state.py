"""Slack's part of ``GET /worlds/{id}/state``: a stable, diffable export."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

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


def _rows(ctx: WorldContext, model: Any, *order: Any) -> list[Any]:
    return list(
        ctx.session.scalars(select(model).where(model.world_id == ctx.world_id).order_by(*order))
    )


def export_state(ctx: WorldContext) -> dict[str, Any]:
    """Users, channels (with members), messages, reactions, pins, files and schedules."""
    meta = ctx.session.get(SlackMeta, ctx.world_id)
    if meta is None:
        return {}
    members: dict[str, list[str]] = {}
    for m in _rows(ctx, SlackMember, SlackMember.channel_id, SlackMember.user_id):
        members.setdefault(m.channel_id, []).append(m.user_id)
    return {
        "team": {"id": meta.team_id, "name": meta.team_name, "agent_user_id": meta.agent_user_id},
        "users": [
            {
                "id": u.id,
                "name": u.name,
                "real_name": u.real_name,
                "email": u.email,
                "title": u.title,
                "is_bot": u.is_bot,
                "deleted": u.deleted,
            }
            for u in _rows(ctx, SlackUser, SlackUser.id)
        ],
        "channels": [
            {
                "id": c.id,
                "name": c.name,
                "kind": c.kind,
                "is_archived": c.is_archived,
                "topic": c.topic,
                "purpose": c.purpose,
                "members": members.get(c.id, []),
            }
            for c in _rows(ctx, SlackChannel, SlackChannel.id)
        ],
        "messages": [
            {
                "channel": m.channel_id,
                "ts": m.ts,
                "user": m.user,
                "text": m.text,
                "thread_ts": m.thread_ts,
                "subtype": m.subtype,
                "edited_ts": m.edited_ts,
                "files": m.file_ids or [],
            }
            for m in _rows(ctx, SlackMessage, SlackMessage.channel_id, SlackMessage.ts)
        ],
        "reactions": [
            {"channel": r.channel_id, "ts": r.ts, "name": r.name, "user": r.user_id}
            for r in _rows(
                ctx,
                SlackReaction,
                SlackReaction.channel_id,
                SlackReaction.ts,
                SlackReaction.name,
                SlackReaction.user_id,
            )
        ],
        "pins": [
            {"channel": p.channel_id, "ts": p.ts, "pinned_by": p.pinned_by}
            for p in _rows(ctx, SlackPin, SlackPin.channel_id, SlackPin.ts)
        ],
        "files": [
            {
                "id": f.id,
                "name": f.name,
                "title": f.title,
                "user": f.user,
                "size": f.size,
                "channels": f.channels or [],
                "status": f.status,
            }
            for f in _rows(ctx, SlackFile, SlackFile.id)
        ],
        "scheduled": [
            {"id": s.id, "channel": s.channel_id, "post_at": s.post_at, "text": s.text}
            for s in _rows(ctx, SlackScheduled, SlackScheduled.post_at, SlackScheduled.id)
        ],
    }


def ensure_setup(ctx: WorldContext) -> None:
    """Every world has a workspace from creation, so no read ever has to create one."""
    from services.tools.apps.slack.actions import workspace

    workspace(ctx)
