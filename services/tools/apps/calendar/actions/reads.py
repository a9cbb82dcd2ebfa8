"""Google Calendar's list reads: ``events.list``, ``events.instances`` and ``freebusy.query``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from services.tools.apps.calendar.actions._base import (
    _get,
    _page,
    _rfc3339,
    _utc,
    _zone,
    parse_time,
)
from services.tools.apps.calendar.actions.calendars import _calendar, _me, meta
from services.tools.apps.calendar.actions.events import (
    _event,
    _exceptions_of,
    _instance_json,
    _visible_in,
    event_json,
    overridden_instances,
)
from services.tools.apps.calendar.actions.rrules import _occurrences, _rrule
from services.tools.apps.calendar.errors import bad_request, not_found
from services.tools.apps.calendar.models import CalendarEvent, CalendarRow
from services.tools.context import WorldContext


def _matches_q(ev: CalendarEvent, q: str) -> bool:
    hay = " ".join(
        [ev.summary, ev.description, ev.location, ev.organizer_email]
        + [a["email"] + " " + a.get("displayName", "") for a in ev.attendees or []]
    ).lower()
    return all(word in hay for word in q.lower().split())


def list_events(
    ctx: WorldContext,
    *,
    calendar_id: str,
    time_min: str | None = None,
    time_max: str | None = None,
    q: str | None = None,
    single_events: bool = False,
    order_by: str | None = None,
    page_token: str | None = None,
    max_results: int | None = None,
    show_deleted: bool = False,
    updated_min: str | None = None,
    as_email: str | None = None,
) -> dict[str, Any]:
    """``events.list`` over one calendar (its own events and its owner's invitations)."""
    me = _me(ctx, as_email)
    cal = _calendar(ctx, calendar_id, me=me)
    lo = parse_time(time_min, "timeMin") if time_min else None
    hi = parse_time(time_max, "timeMax") if time_max else None
    if lo and hi and hi <= lo:
        raise bad_request("The specified time range is empty.", "timeRangeEmpty")
    upd = parse_time(updated_min, "updatedMin") if updated_min else None
    if order_by not in (None, "startTime", "updated"):
        raise bad_request(f"Invalid value for orderBy: {order_by}")
    if order_by == "startTime" and not single_events:
        raise bad_request(
            "The requested ordering is not available for the particular query.", "badRequest"
        )
    rows = ctx.session.scalars(
        select(CalendarEvent)
        .where(CalendarEvent.world_id == ctx.world_id)
        .order_by(CalendarEvent.seq)
    ).all()
    horizon = hi or (ctx.now + timedelta(days=730))
    overridden = overridden_instances(rows)
    items: list[tuple[datetime, datetime, int, dict[str, Any]]] = []
    for ev in rows:
        if not _visible_in(ev, cal):
            continue
        if ev.status == "cancelled" and not show_deleted:
            continue
        if q and not _matches_q(ev, q):
            continue
        updated = ev.updated if ev.updated.tzinfo else ev.updated.replace(tzinfo=UTC)
        if upd and updated < upd:
            continue
        start = ev.start_at if ev.start_at.tzinfo else ev.start_at.replace(tzinfo=UTC)
        duration = ev.end_at - ev.start_at
        if ev.recurrence and _rrule(ev.recurrence):
            starts = _occurrences(ev, horizon, overridden)
            in_range = [s for s in starts if (not lo or s + duration > lo) and (not hi or s < hi)]
            if single_events:
                for s in in_range:
                    items.append((s, updated, ev.seq, _instance_json(ctx, ev, s, me)))
            elif in_range:
                items.append((start, updated, ev.seq, event_json(ctx, ev, me)))
            continue
        if (lo and start + duration <= lo) or (hi and start >= hi):
            continue
        items.append((start, updated, ev.seq, event_json(ctx, ev, me)))
    if order_by == "updated":
        items.sort(key=lambda i: (i[1], i[2]))
    else:
        items.sort(key=lambda i: (i[0], i[2]))
    page, nxt = _page([i[3] for i in items], page_token, max_results)
    out: dict[str, Any] = {
        "kind": "calendar#events",
        "etag": f'"{len(items)}"',
        "summary": cal.summary,
        "description": cal.description,
        "updated": _rfc3339(ctx.now),
        "timeZone": cal.time_zone,
        "accessRole": "owner" if cal.owner_email == me else "reader",
        "defaultReminders": [],
        "items": page,
    }
    if nxt:
        out["nextPageToken"] = nxt
    return out


def event_instances(
    ctx: WorldContext,
    *,
    calendar_id: str,
    event_id: str,
    time_min: str | None = None,
    time_max: str | None = None,
    page_token: str | None = None,
    max_results: int | None = None,
    as_email: str | None = None,
) -> dict[str, Any]:
    """``events.instances``: the occurrences of a recurring event (a single event is its own)."""
    me = _me(ctx, as_email)
    cal = _calendar(ctx, calendar_id, me=me)
    ev, inst = _event(ctx, cal, event_id)
    if inst:
        raise not_found()
    lo = parse_time(time_min, "timeMin") if time_min else None
    hi = parse_time(time_max, "timeMax") if time_max else None
    duration = ev.end_at - ev.start_at
    horizon = hi or (_utc(ev.start_at) + timedelta(days=730))
    items = []
    if ev.recurrence and _rrule(ev.recurrence):
        edited = {r.id: r for r in _exceptions_of(ctx, ev.id)}
        found: list[tuple[datetime, dict[str, Any]]] = []
        for s in _occurrences(ev, horizon, set(edited)):
            if not ((lo and s + duration <= lo) or (hi and s >= hi)):
                found.append((s, _instance_json(ctx, ev, s, me)))
        for row in edited.values():
            s, e = _utc(row.start_at), _utc(row.end_at)
            if row.status != "cancelled" and not ((lo and e <= lo) or (hi and s >= hi)):
                found.append((s, event_json(ctx, row, me)))
        items = [body for _, body in sorted(found, key=lambda f: f[0])]
    else:
        items.append(event_json(ctx, ev, me))
    page, nxt = _page(items, page_token, max_results)
    out: dict[str, Any] = {
        "kind": "calendar#events",
        "summary": cal.summary,
        "timeZone": cal.time_zone,
        "accessRole": "owner" if cal.owner_email == me else "reader",
        "items": page,
    }
    if nxt:
        out["nextPageToken"] = nxt
    return out


# --------------------------------------------------------------------------- free / busy


def free_busy(
    ctx: WorldContext, *, time_min: str, time_max: str, items: Any, time_zone: str | None = None
) -> dict[str, Any]:
    """``freebusy.query``: merged busy intervals per calendar (or person's email).

    Busy time is every confirmed or tentative, opaque event in the calendar and every
    invitation its owner has not declined.
    """
    lo = parse_time(time_min, "timeMin")
    hi = parse_time(time_max, "timeMax")
    if hi <= lo:
        raise bad_request("The specified time range is empty.", "timeRangeEmpty")
    if time_zone:
        _zone(time_zone)
    if not isinstance(items, list):
        raise bad_request("items is required", "required")
    me = meta(ctx).agent_email
    rows = ctx.session.scalars(
        select(CalendarEvent).where(
            CalendarEvent.world_id == ctx.world_id, CalendarEvent.status != "cancelled"
        )
    ).all()
    overridden = overridden_instances(
        ctx.session.scalars(select(CalendarEvent).where(CalendarEvent.world_id == ctx.world_id))
    )
    calendars: dict[str, Any] = {}
    for item in items:
        raw = item.get("id") if isinstance(item, dict) else None
        if not raw or not isinstance(raw, str):
            raise bad_request("items[].id is required", "required")
        cid = me if raw == "primary" else str(raw).lower()
        cal = _get(ctx, CalendarRow, cid)
        if cal is None or cal.deleted:
            calendars[raw] = {"errors": [{"domain": "global", "reason": "notFound"}], "busy": []}
            continue
        spans: list[tuple[datetime, datetime]] = []
        for ev in rows:
            if (ev.extra or {}).get("transparency") == "transparent":
                continue
            if ev.calendar_id != cal.id:
                mine = next((a for a in ev.attendees or [] if a["email"] == cal.owner_email), None)
                if not cal.primary or mine is None or mine["responseStatus"] == "declined":
                    continue
            duration = ev.end_at - ev.start_at
            starts = (
                _occurrences(ev, hi, overridden)
                if ev.recurrence and _rrule(ev.recurrence)
                else [ev.start_at]
            )
            for s in starts:
                s = s if s.tzinfo else s.replace(tzinfo=UTC)
                e = s + duration
                if e > lo and s < hi:
                    spans.append((max(s, lo), min(e, hi)))
        spans.sort()
        merged: list[list[datetime]] = []
        for s, e in spans:
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        calendars[raw] = {"busy": [{"start": _rfc3339(s), "end": _rfc3339(e)} for s, e in merged]}
    return {
        "kind": "calendar#freeBusy",
        "timeMin": _rfc3339(lo),
        "timeMax": _rfc3339(hi),
        "calendars": calendars,
    }
