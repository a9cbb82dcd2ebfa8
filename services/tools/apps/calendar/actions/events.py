"""Google Calendar's ``events`` writes and single reads (insert, get, patch, update, delete,
move), the event and instance JSON, attendee views, and the exception rows that override
single instances of a recurring event.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from services.tools.apps.calendar.actions._base import (
    _EVENT_ID,
    _EXTRA_FIELDS,
    _INSTANCE_FIELDS,
    _RESPONSES,
    APP,
    _get,
    _rfc3339,
    _utc,
    _when,
    _zone,
)
from services.tools.apps.calendar.actions.calendars import _calendar, _me, _next_seq, meta
from services.tools.apps.calendar.actions.rrules import (
    _instance_id,
    _occurrences,
    _validate_recurrence,
)
from services.tools.apps.calendar.errors import GoogleError, bad_request, not_found
from services.tools.apps.calendar.models import CalendarEvent, CalendarRow
from services.tools.context import WorldContext

# --------------------------------------------------------------------------- events


def _attendee_view(a: dict[str, Any], viewer: str, organizer: str) -> dict[str, Any]:
    out = {k: v for k, v in a.items() if v is not None}
    if a["email"] == organizer:
        out["organizer"] = True
    if a["email"] == viewer:
        out["self"] = True
    return out


def event_json(ctx: WorldContext, ev: CalendarEvent, viewer: str | None = None) -> dict[str, Any]:
    viewer = viewer or meta(ctx).agent_email
    organizer_cal = _get(ctx, CalendarRow, ev.calendar_id)
    organizer: dict[str, Any] = {"email": ev.organizer_email}
    if organizer_cal is not None and organizer_cal.owner_name:
        organizer["displayName"] = organizer_cal.owner_name
    if ev.organizer_email == viewer:
        organizer["self"] = True
    creator: dict[str, Any] = {"email": ev.creator_email}
    if ev.creator_email == viewer:
        creator["self"] = True
    body: dict[str, Any] = {
        "kind": "calendar#event",
        "etag": f'"{ev.seq}{ev.sequence:04d}{int(ev.updated.timestamp()) if ev.updated else 0}"',
        "id": ev.id,
        "status": ev.status,
        "htmlLink": f"https://www.google.com/calendar/event?eid={ev.id}",
        "created": _rfc3339(ev.created),
        "updated": _rfc3339(ev.updated),
        "summary": ev.summary,
        "creator": creator,
        "organizer": organizer,
        "start": ev.start,
        "end": ev.end,
        "iCalUID": f"{ev.id}@google.com",
        "sequence": ev.sequence,
        "reminders": {"useDefault": True},
        "eventType": "default",
    }
    if ev.description:
        body["description"] = ev.description
    if ev.location:
        body["location"] = ev.location
    if ev.recurrence:
        body["recurrence"] = ev.recurrence
    if ev.attendees:
        body["attendees"] = [_attendee_view(a, viewer, ev.organizer_email) for a in ev.attendees]
    body.update(ev.extra or {})
    return body


def _attendees(value: Any, organizer: str, previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request("Invalid attendees: must be a list.")
    known = {a["email"]: a for a in previous}
    out, seen = [], set()
    for i, a in enumerate(value):
        if not isinstance(a, dict) or not isinstance(a.get("email"), str) or "@" not in a["email"]:
            raise bad_request(f"Invalid attendee email at attendees[{i}].", "invalid")
        email = a["email"].strip().lower()
        if email in seen:
            continue
        seen.add(email)
        status = a.get("responseStatus") or known.get(email, {}).get("responseStatus")
        if status is None:
            status = "accepted" if email == organizer else "needsAction"
        if status not in _RESPONSES:
            raise bad_request(
                f"Invalid responseStatus {status!r}; use one of {', '.join(_RESPONSES)}."
            )
        entry: dict[str, Any] = {"email": email, "responseStatus": status}
        if a.get("displayName") or known.get(email, {}).get("displayName"):
            entry["displayName"] = a.get("displayName") or known[email]["displayName"]
        if a.get("optional"):
            entry["optional"] = True
        if a.get("comment"):
            entry["comment"] = str(a["comment"])
        out.append(entry)
    return out


def _apply(ev: CalendarEvent, body: dict[str, Any], cal: CalendarRow, *, full: bool) -> bool:
    """Apply an insert / update / patch body; returns whether the time changed."""
    time_changed = False
    if full or "start" in body or "end" in body:
        start_obj = body.get("start", None if full else ev.start)
        end_obj = body.get("end", None if full else ev.end)
        start, start_at, all_day_s = _when(start_obj, "start", cal.time_zone)
        end, end_at, all_day_e = _when(end_obj, "end", cal.time_zone)
        if all_day_s != all_day_e:
            raise bad_request("Start and end times must either both be date or both be dateTime.")
        if end_at < start_at or (end_at == start_at and all_day_s):
            raise bad_request("The specified time range is empty.", "timeRangeEmpty")
        time_changed = start_at != _utc(ev.start_at) or end_at != _utc(ev.end_at)
        ev.start, ev.end, ev.start_at, ev.end_at = start, end, start_at, end_at
    for field, attr in (
        ("summary", "summary"),
        ("description", "description"),
        ("location", "location"),
    ):
        if field in body or full:
            value = body.get(field)
            if value is not None and not isinstance(value, str):
                raise bad_request(f"Invalid value for {field}.")
            setattr(ev, attr, value or "")
    if "status" in body or full:
        status = body.get("status") or "confirmed"
        if status not in ("confirmed", "tentative", "cancelled"):
            raise bad_request(f"Invalid value for status: {status}")
        ev.status = status
    if "attendees" in body or full:
        ev.attendees = _attendees(body.get("attendees"), ev.organizer_email, ev.attendees or [])
    if "recurrence" in body or full:
        if body.get("recurrence") and (ev.extra or {}).get("recurringEventId"):
            raise bad_request("An instance of a recurring event cannot have a recurrence.")
        ev.recurrence = _validate_recurrence(body.get("recurrence"), ev)
    elif time_changed and ev.recurrence:
        _validate_recurrence(ev.recurrence, ev)  # the same set from a new start
    kept = {k: v for k, v in (ev.extra or {}).items() if k in _INSTANCE_FIELDS}
    extra = dict(ev.extra or {}) if not full else kept
    for field in _EXTRA_FIELDS:
        if field in body:
            if body[field] is None:
                extra.pop(field, None)
            else:
                extra[field] = body[field]
    if extra.get("transparency") not in (None, "opaque", "transparent"):
        raise bad_request("Invalid value for transparency.")
    ev.extra = extra
    return time_changed


def _event(
    ctx: WorldContext, cal: CalendarRow, event_id: str
) -> tuple[CalendarEvent, dict[str, Any] | None]:
    """The event visible in ``cal`` (organised there, or inviting its owner); for an instance
    id, the master and the instance's start."""
    own = _get(ctx, CalendarEvent, event_id) if event_id else None
    if own is not None and _visible_in(own, cal):
        return own, None  # a plain event, or an instance edited before (its exception row)
    base, _, suffix = (event_id or "").partition("_")
    ev = _get(ctx, CalendarEvent, base)
    if ev is None or not _visible_in(ev, cal):
        raise not_found()
    if not suffix:
        return ev, None
    for at in _occurrences(ev, _utc(ev.start_at) + timedelta(days=3660)):
        all_day = "date" in ev.start
        if _instance_id(ev, at, all_day) == event_id:
            return ev, {"at": at}
    raise not_found()


def _visible_in(ev: CalendarEvent, cal: CalendarRow) -> bool:
    if ev.calendar_id == cal.id:
        return True
    return cal.primary and any(a["email"] == cal.owner_email for a in ev.attendees or [])


def _instance_json(
    ctx: WorldContext, ev: CalendarEvent, at: datetime, viewer: str
) -> dict[str, Any]:
    body = event_json(ctx, ev, viewer)
    all_day = "date" in ev.start
    duration = ev.end_at - ev.start_at
    body.pop("recurrence", None)
    body["id"] = _instance_id(ev, at, all_day)
    body["recurringEventId"] = ev.id
    if all_day:
        tz = _zone(ev.start.get("timeZone") or "UTC")
        d = at.astimezone(tz).date()
        body["start"] = {"date": d.isoformat()}
        body["end"] = {"date": (d + (ev.end_at - ev.start_at).days * timedelta(days=1)).isoformat()}
        body["originalStartTime"] = {"date": d.isoformat()}
    else:
        tz_name = ev.start.get("timeZone")
        tz = _zone(tz_name) if tz_name else datetime.fromisoformat(ev.start["dateTime"]).tzinfo
        s = at.astimezone(tz)
        body["start"] = {"dateTime": s.isoformat(), **({"timeZone": tz_name} if tz_name else {})}
        body["end"] = {
            "dateTime": (s + duration).isoformat(),
            **({"timeZone": ev.end.get("timeZone")} if ev.end.get("timeZone") else {}),
        }
        body["originalStartTime"] = dict(body["start"])
    return body


def _exceptions_of(ctx: WorldContext, master_id: str) -> list[CalendarEvent]:
    rows = ctx.session.scalars(
        select(CalendarEvent).where(
            CalendarEvent.world_id == ctx.world_id, CalendarEvent.id.startswith(master_id + "_")
        )
    )
    return [r for r in rows if (r.extra or {}).get("recurringEventId") == master_id]


def overridden_instances(rows: Any) -> set[str]:
    """Ids of the instances that exception rows replace (their master skips them)."""
    return {r.id for r in rows if (r.extra or {}).get("recurringEventId")}


def _exception(ctx: WorldContext, master: CalendarEvent, at: datetime) -> CalendarEvent:
    """The row that stands for one instance from its first edit on (Google's exception):
    the instance as it was, with ``recurringEventId`` and ``originalStartTime``; the master's
    expansion skips its id from then on."""
    view = _instance_json(ctx, master, at, master.organizer_email)
    row = CalendarEvent(
        world_id=ctx.world_id,
        id=view["id"],
        calendar_id=master.calendar_id,
        status=master.status,
        summary=master.summary,
        description=master.description,
        location=master.location,
        start=view["start"],
        end=view["end"],
        start_at=at,
        end_at=at + (master.end_at - master.start_at),
        attendees=[dict(a) for a in master.attendees or []],
        organizer_email=master.organizer_email,
        creator_email=master.creator_email,
        recurrence=None,
        extra={
            **(master.extra or {}),
            "recurringEventId": master.id,
            "originalStartTime": view["originalStartTime"],
        },
        created=master.created,
        updated=ctx.now,
        sequence=master.sequence,
        seq=_next_seq(ctx),
    )
    ctx.session.add(row)
    ctx.session.flush()
    return row


def insert_event(
    ctx: WorldContext,
    *,
    calendar_id: str,
    body: dict[str, Any],
    send_updates: str | None = None,
    as_email: str | None = None,
) -> dict[str, Any]:
    """``events.insert`` into a calendar the actor owns (the organizer is its owner)."""
    me = _me(ctx, as_email)
    cal = _calendar(ctx, calendar_id, me=me)
    if cal.owner_email != me:
        raise GoogleError(
            403, "requiredAccessLevel", "You need to have writer access to this calendar."
        )
    if not isinstance(body, dict):
        raise bad_request("Invalid event body.")
    eid = body.get("id")
    if eid is not None:
        if not isinstance(eid, str) or not _EVENT_ID.fullmatch(eid):
            raise bad_request("Invalid resource id value.")
        if _get(ctx, CalendarEvent, eid) is not None:
            raise GoogleError(409, "duplicate", "The requested identifier already exists.")
    now = ctx.now
    ev = CalendarEvent(
        world_id=ctx.world_id,
        id=eid or ctx.new_id(width=26),
        calendar_id=cal.id,
        status="confirmed",
        summary="",
        description="",
        location="",
        start={},
        end={},
        start_at=now,
        end_at=now,
        attendees=[],
        organizer_email=cal.owner_email,
        creator_email=me,
        recurrence=None,
        extra={},
        created=now,
        updated=now,
        sequence=0,
        seq=_next_seq(ctx),
    )
    _apply(ev, body, cal, full=True)
    ctx.session.add(ev)
    ctx.session.flush()
    ctx.record(
        APP,
        "events.insert",
        {
            "calendarId": cal.id,
            "eventId": ev.id,
            "summary": ev.summary,
            "start": _rfc3339(ev.start_at),
            "attendees": [a["email"] for a in ev.attendees],
            "sendUpdates": send_updates,
            "user": me,
        },
    )
    return event_json(ctx, ev, me)


def get_event(
    ctx: WorldContext, *, calendar_id: str, event_id: str, as_email: str | None = None
) -> dict[str, Any]:
    me = _me(ctx, as_email)
    cal = _calendar(ctx, calendar_id, me=me)
    ev, inst = _event(ctx, cal, event_id)
    if inst:
        return _instance_json(ctx, ev, inst["at"], me)
    return event_json(ctx, ev, me)


def _modify(
    ctx: WorldContext,
    calendar_id: str,
    event_id: str,
    body: dict[str, Any],
    *,
    full: bool,
    send_updates: str | None,
    as_email: str | None,
) -> dict[str, Any]:
    me = _me(ctx, as_email)
    cal = _calendar(ctx, calendar_id, me=me)
    if not isinstance(body, dict):
        raise bad_request("Invalid event body.")
    ev, inst = _event(ctx, cal, event_id)
    if inst:
        ev = _exception(ctx, ev, inst["at"])
    action = "events.update" if full else "events.patch"
    if ev.status == "cancelled" and body.get("status") in (None, "cancelled"):
        raise GoogleError(410, "deleted", "Resource has been deleted")
    if ev.organizer_email != me:
        # An attendee changes only their own answer (Google keeps other edits to their copy).
        mine = next(
            (a for a in body.get("attendees") or [] if str(a.get("email", "")).lower() == me), None
        )
        if mine is None:
            raise GoogleError(
                403,
                "forbiddenForNonOrganizer",
                "Shared properties can only be changed by the organizer of the event.",
            )
        status = mine.get("responseStatus")
        if status not in _RESPONSES:
            raise bad_request(
                f"Invalid responseStatus {status!r}; use one of {', '.join(_RESPONSES)}."
            )
        ev.attendees = [
            {
                **a,
                "responseStatus": status,
                **({"comment": mine["comment"]} if mine.get("comment") else {}),
            }
            if a["email"] == me
            else a
            for a in ev.attendees
        ]
        ev.updated = ctx.now
        ctx.record(
            APP,
            "events.respond",
            {"calendarId": ev.calendar_id, "eventId": ev.id, "responseStatus": status, "user": me},
        )
        return event_json(ctx, ev, me)
    before = event_json(ctx, ev, me)
    time_changed = _apply(ev, body, cal, full=full)
    if time_changed:
        ev.sequence += 1
        # A new time asks everyone again, as Google does.
        ev.attendees = [
            {
                **a,
                "responseStatus": "accepted" if a["email"] == ev.organizer_email else "needsAction",
            }
            for a in ev.attendees
        ]
    ev.updated = ctx.now
    after = event_json(ctx, ev, me)
    changed = sorted(
        k
        for k in set(before) | set(after)
        if before.get(k) != after.get(k) and k not in ("etag", "updated", "sequence")
    )
    ctx.record(
        APP,
        action,
        {
            "calendarId": ev.calendar_id,
            "eventId": ev.id,
            "changed": changed,
            "summary": ev.summary,
            "start": _rfc3339(ev.start_at),
            "sendUpdates": send_updates,
            "user": me,
        },
    )
    return after


def patch_event(
    ctx: WorldContext,
    *,
    calendar_id: str,
    event_id: str,
    body: dict[str, Any],
    send_updates: str | None = None,
    as_email: str | None = None,
) -> dict[str, Any]:
    return _modify(
        ctx, calendar_id, event_id, body, full=False, send_updates=send_updates, as_email=as_email
    )


def update_event(
    ctx: WorldContext,
    *,
    calendar_id: str,
    event_id: str,
    body: dict[str, Any],
    send_updates: str | None = None,
    as_email: str | None = None,
) -> dict[str, Any]:
    return _modify(
        ctx, calendar_id, event_id, body, full=True, send_updates=send_updates, as_email=as_email
    )


def delete_event(
    ctx: WorldContext,
    *,
    calendar_id: str,
    event_id: str,
    send_updates: str | None = None,
    as_email: str | None = None,
) -> None:
    """``events.delete``: the event becomes ``cancelled`` (visible with ``showDeleted``)."""
    me = _me(ctx, as_email)
    cal = _calendar(ctx, calendar_id, me=me)
    ev, inst = _event(ctx, cal, event_id)
    if inst:
        ev = _exception(ctx, ev, inst["at"])
    if ev.status == "cancelled":
        raise GoogleError(410, "deleted", "Resource has been deleted")
    if ev.organizer_email != me:
        raise GoogleError(
            403,
            "forbiddenForNonOrganizer",
            "Only the organizer can delete the event; decline it instead.",
        )
    ev.status = "cancelled"
    ev.updated = ctx.now
    ev.sequence += 1
    for row in _exceptions_of(ctx, ev.id):  # cancelling a series cancels its edited instances
        row.status, row.updated = "cancelled", ctx.now
    ctx.record(
        APP,
        "events.delete",
        {
            "calendarId": ev.calendar_id,
            "eventId": ev.id,
            "summary": ev.summary,
            "sendUpdates": send_updates,
            "user": me,
        },
    )


def move_event(
    ctx: WorldContext,
    *,
    calendar_id: str,
    event_id: str,
    destination: str,
    as_email: str | None = None,
) -> dict[str, Any]:
    """``events.move``: to another calendar the organizer owns."""
    me = _me(ctx, as_email)
    cal = _calendar(ctx, calendar_id, me=me)
    dest = _calendar(ctx, destination, me=me)
    ev, inst = _event(ctx, cal, event_id)
    if inst or ev.calendar_id != cal.id:
        raise bad_request("Only events organised in the source calendar can be moved.")
    if cal.owner_email != me or dest.owner_email != me:
        raise GoogleError(403, "requiredAccessLevel", "You need to own both calendars.")
    ev.calendar_id = dest.id
    ev.updated = ctx.now
    ctx.record(APP, "events.move", {"eventId": ev.id, "from": cal.id, "to": dest.id, "user": me})
    return event_json(ctx, ev, me)
