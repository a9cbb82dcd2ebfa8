"""Calendar's part of ``GET /worlds/{id}/state``: a stable, diffable export."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from services.tools.apps.calendar.actions import calendar_json, event_json
from services.tools.apps.calendar.models import CalendarEvent, CalendarMeta, CalendarRow
from services.tools.context import WorldContext


def export_state(ctx: WorldContext) -> dict[str, Any]:
    """Calendars (with owner) and every event as the API renders it to its organizer."""
    meta = ctx.session.get(CalendarMeta, ctx.world_id)
    if meta is None:
        return {}
    cals = ctx.session.scalars(
        select(CalendarRow).where(CalendarRow.world_id == ctx.world_id).order_by(CalendarRow.id)
    ).all()
    events = ctx.session.scalars(
        select(CalendarEvent)
        .where(CalendarEvent.world_id == ctx.world_id)
        .order_by(CalendarEvent.id)
    ).all()
    return {
        "agent_email": meta.agent_email,
        "calendars": [
            {**calendar_json(c), "owner": c.owner_email, "primary": c.primary, "deleted": c.deleted}
            for c in cals
        ],
        "events": [
            {**event_json(ctx, e, e.organizer_email), "calendarId": e.calendar_id} for e in events
        ],
    }


def ensure_setup(ctx: WorldContext) -> None:
    """Every world has the agent's calendar from creation, so no read ever creates one."""
    from services.tools.apps.calendar.actions import meta

    meta(ctx)
