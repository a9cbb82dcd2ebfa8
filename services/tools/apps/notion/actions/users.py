"""Notion's users endpoints (list, retrieve, me) and the user JSON."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from services.tools.apps.notion.actions._base import _get, _list, _new_id, _paginate, workspace
from services.tools.apps.notion.errors import not_found
from services.tools.apps.notion.models import (
    NotionUser,
)
from services.tools.apps.notion.values import normalize_id
from services.tools.context import WorldContext

# --------------------------------------------------------------------------- users


def create_user(
    ctx: WorldContext, *, name: str, email: str = "", user_id: str | None = None
) -> dict[str, Any]:
    """Add a person to the workspace (scenario set-up)."""
    workspace(ctx)
    uid = normalize_id(user_id) if user_id else _new_id(ctx)
    ctx.session.add(
        NotionUser(world_id=ctx.world_id, id=uid, type="person", name=name, email=email)
    )
    ctx.session.flush()
    return user_json(ctx, _get(ctx, NotionUser, uid))


def user_json(ctx: WorldContext, u: NotionUser) -> dict[str, Any]:
    body: dict[str, Any] = {
        "object": "user",
        "id": u.id,
        "type": u.type,
        "name": u.name,
        "avatar_url": u.avatar_url,
    }
    if u.type == "person":
        body["person"] = {"email": u.email}
    else:
        body["bot"] = {
            "owner": {"type": "workspace", "workspace": True},
            "workspace_name": workspace(ctx).workspace_name,
        }
    return body


def users_list(
    ctx: WorldContext, *, start_cursor: str | None = None, page_size: int | None = None
) -> dict[str, Any]:
    workspace(ctx)
    rows = ctx.session.scalars(
        select(NotionUser)
        .where(NotionUser.world_id == ctx.world_id)
        .order_by(NotionUser.type.desc(), NotionUser.name, NotionUser.id)
    ).all()
    chunk, nxt = _paginate(list(rows), start_cursor, page_size, lambda u: u.id)
    return _list([user_json(ctx, u) for u in chunk], nxt, "user")


def users_retrieve(ctx: WorldContext, *, user_id: str) -> dict[str, Any]:
    workspace(ctx)
    u = _get(ctx, NotionUser, normalize_id(user_id))
    if u is None:
        raise not_found(user_id, "user")
    return user_json(ctx, u)


def users_me(ctx: WorldContext) -> dict[str, Any]:
    return users_retrieve(ctx, user_id=workspace(ctx).bot_user_id)
