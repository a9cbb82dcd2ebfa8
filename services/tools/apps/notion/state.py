"""Notion's part of ``GET /worlds/{id}/state``: a stable, diffable export."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from services.tools.apps.notion.actions import block_json, comment_json, database_json, page_json
from services.tools.apps.notion.models import (
    NotionBlock,
    NotionComment,
    NotionDatabase,
    NotionMeta,
    NotionPage,
    NotionUser,
)
from services.tools.context import WorldContext


def _rows(ctx: WorldContext, model: Any) -> list[Any]:
    return list(
        ctx.session.scalars(select(model).where(model.world_id == ctx.world_id).order_by(model.id))
    )


def export_state(ctx: WorldContext) -> dict[str, Any]:
    """Users, databases, pages (properties as the API renders them), blocks and comments."""
    if ctx.session.get(NotionMeta, ctx.world_id) is None:
        return {}
    return {
        "users": [
            {"id": u.id, "type": u.type, "name": u.name, "email": u.email}
            for u in _rows(ctx, NotionUser)
        ],
        "databases": [database_json(ctx, d) for d in _rows(ctx, NotionDatabase)],
        "pages": [page_json(ctx, p) for p in _rows(ctx, NotionPage)],
        "blocks": [{**block_json(ctx, b), "position": b.position} for b in _rows(ctx, NotionBlock)],
        "comments": [comment_json(c) for c in _rows(ctx, NotionComment)],
    }


def ensure_setup(ctx: WorldContext) -> None:
    """Every world has a workspace from creation, so no read ever has to create one."""
    from services.tools.apps.notion.actions import workspace

    workspace(ctx)
