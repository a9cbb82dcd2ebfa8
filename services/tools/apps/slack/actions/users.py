"""Slack's ``users.*`` and ``auth.test`` methods."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from services.tools.apps.slack.actions._base import _limit, _now_s, _page
from services.tools.apps.slack.actions.team import _user, _user_json, workspace
from services.tools.apps.slack.errors import SlackError
from services.tools.apps.slack.models import (
    SlackUser,
)
from services.tools.context import WorldContext


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
