"""Canvas's part of ``GET /worlds/{id}/state``: every object by kind, in id order."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from services.tools.apps.canvas.models import CanvasMeta, CanvasObject
from services.tools.context import WorldContext


def export_state(ctx: WorldContext) -> dict[str, Any]:
    """Objects grouped by kind with their raw fields (no db internals; never writes)."""
    meta = ctx.session.get(CanvasMeta, ctx.world_id)
    if meta is None:
        return {}
    out: dict[str, Any] = {"agent_id": meta.agent_id}
    for row in ctx.session.scalars(
        select(CanvasObject).where(CanvasObject.world_id == ctx.world_id).order_by(CanvasObject.id)
    ):
        out.setdefault(row.kind + "s", []).append(
            {"id": row.id, "course_id": row.course_id, **row.data}
        )
    return out


def ensure_setup(ctx: WorldContext) -> None:
    """Every world has the agent's Canvas user from creation, so no read ever creates one."""
    from services.tools.apps.canvas.actions import meta

    meta(ctx)
