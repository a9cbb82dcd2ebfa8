"""Calendar effects (the agent's calendar, invites from colleagues) and predicates (events
the agent put on its calendar), over ``services.tools.apps.calendar.actions``."""

from __future__ import annotations

from datetime import datetime, timedelta
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
    """Between ``min_count`` (1) and ``max_count`` (no limit) events match (see
    :func:`agent_events`); ``max_count: 0`` makes it a negative check."""
    found = agent_events(ctx, args)
    hi = args.get("max_count")
    return Outcome(
        len(found) >= int(args.get("min_count", 1)) and (hi is None or len(found) <= int(hi)),
        {"matching": [e.id for e in found][:10], "count": len(found)},
    )


@predicate("calendar.no_overlap")
def no_overlap(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """Negative check: no two confirmed timed events on the agent's primary calendar overlap
    (the assistant did not double-book); recurring events count with every instance up to
    a day past the last single event (and at least 60 days past the clock)."""
    from services.tools.apps.calendar.models import CalendarEvent, CalendarMeta

    actions = _a()
    meta = ctx.session.get(CalendarMeta, ctx.world_id)
    if meta is None:
        return Outcome(True, {})
    rows = [
        e
        for e in ctx.session.scalars(
            select(CalendarEvent).where(
                CalendarEvent.world_id == ctx.world_id,
                CalendarEvent.calendar_id == meta.agent_email,
                CalendarEvent.status != "cancelled",
            )
        )
        if e.start_at is not None and e.end_at is not None
    ]
    overridden = actions.overridden_instances(
        ctx.session.scalars(select(CalendarEvent).where(CalendarEvent.world_id == ctx.world_id))
    )
    until = max([ctx.now + timedelta(days=60), *(_aware(e.end_at) for e in rows)])
    until += timedelta(days=1)
    spans = []
    for e in rows:
        duration = _aware(e.end_at) - _aware(e.start_at)
        if e.recurrence and actions._rrule(e.recurrence):
            for i, at in enumerate(actions._occurrences(e, until, overridden)):
                spans.append((at, at + duration, e.id if i == 0 else f"{e.id}@{at:%Y%m%dT%H%M}"))
        else:
            spans.append((_aware(e.start_at), _aware(e.end_at), e.id))
    spans.sort()
    clashes, open_until, holder = [], None, None
    for start, end, ev_id in spans:
        if open_until is not None and start < open_until:
            clashes.append([holder, ev_id])
        if open_until is None or end > open_until:
            open_until, holder = end, ev_id
    return Outcome(not clashes, {"overlapping": clashes[:5]})
