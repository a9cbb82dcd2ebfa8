"""Calendar effects (the agent's calendar, invites from colleagues) and predicates (events
the agent put on its calendar), over ``services.tools.apps.calendar.actions``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from services.tools.context import WorldContext, _aware
from services.tools.events.registry import EffectEnv, Outcome, effect, lower_all, predicate


def _a():  # type: ignore[no-untyped-def]
    from services.tools.apps.calendar import actions

    return actions


@effect("calendar.setup")
def setup(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    _a().setup_calendar(ctx, agent_email=args["email"], agent_name=args.get("name", ""))


@effect("calendar.add")
def add(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    """An event on the agent's primary calendar (set-up: existing commitments)."""
    _a().insert_event(ctx, calendar_id="primary", body=args["event"])


def agent_events(ctx: WorldContext, args: dict[str, Any]) -> list[Any]:
    """Confirmed events on the agent's calendars matching ``summary_contains`` (all, any case),
    ``start`` (ISO, exact instant), ``on_date`` (YYYY-MM-DD), ``attendees`` (emails, all),
    ``location_contains``."""
    from services.tools.apps.calendar.models import CalendarEvent, CalendarMeta

    if ctx.session.get(CalendarMeta, ctx.world_id) is None:
        return []
    start = datetime.fromisoformat(args["start"]) if args.get("start") else None
    out = []
    for ev in ctx.session.scalars(
        select(CalendarEvent).where(
            CalendarEvent.world_id == ctx.world_id, CalendarEvent.status != "cancelled"
        )
    ):
        text = (ev.summary or "").lower()
        if any(s not in text for s in lower_all(args.get("summary_contains"))):
            continue
        if start is not None and _aware(ev.start_at) != start:
            continue
        if args.get("on_date") and _aware(ev.start_at).date().isoformat() != args["on_date"]:
            continue
        emails = {str(a.get("email", "")).lower() for a in ev.attendees or []}
        if any(e not in emails for e in lower_all(args.get("attendees"))):
            continue
        if any(
            s not in (ev.location or "").lower() for s in lower_all(args.get("location_contains"))
        ):
            continue
        out.append(ev)
    return out


@predicate("calendar.has_event")
def has_event(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    found = agent_events(ctx, args)
    return Outcome(
        len(found) >= int(args.get("min_count", 1)),
        {"matching": [e.id for e in found][:10], "count": len(found)},
    )
