"""Google Calendar v3 operations as plain functions over a world.

Each function takes the :class:`~services.tools.context.WorldContext` first and returns the
API's JSON resource, or raises :class:`GoogleError`. The acting identity is the world's agent
(its primary calendar's id is its email; ``"primary"`` names it) unless ``as_email`` names a
colleague (NPCs sending invitations, answering them, moving meetings). Writes are recorded with
``ctx.record("calendar", "events.insert" | ..., ...)``.

Model: an event lives in its organizer's calendar; attendees see it in their own calendar via
their attendee entry, and answer it by patching their own ``responseStatus`` there. Recurring
events (``RRULE`` with FREQ DAILY / WEEKLY / MONTHLY, INTERVAL, COUNT, UNTIL, BYDAY) are
expanded by ``singleEvents=true``; single instances can be read but not modified.

Why one file: events, calendars, ACL-free sharing, free/busy and recurrence expansion share
the same private helpers (time parsing, zones, attendee and organizer views, sequence
numbers) and follow the v3 reference resource by resource; splitting them would scatter one
API's rules over modules that all import each other's internals.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import select

from services.tools.apps.calendar import recurrence as recurrence_set
from services.tools.apps.calendar.errors import GoogleError, bad_request, not_found
from services.tools.apps.calendar.models import CalendarEvent, CalendarMeta, CalendarRow
from services.tools.context import WorldContext

APP = "calendar"
MAX_RESULTS = 2500
DEFAULT_RESULTS = 250
MAX_INSTANCES = 1000
_EVENT_ID = re.compile(r"^[a-v0-9]{5,1024}$")
_RESPONSES = ("needsAction", "declined", "tentative", "accepted")
# What makes a row an exception (one edited instance of a recurring event), as Google shows it.
_INSTANCE_FIELDS = ("recurringEventId", "originalStartTime")
_EXTRA_FIELDS = (
    "colorId",
    "transparency",
    "visibility",
    "reminders",
    "extendedProperties",
    "conferenceData",
    "guestsCanModify",
    "guestsCanInviteOthers",
    "guestsCanSeeOtherGuests",
    "eventType",
    "source",
    "attachments",
)


# --------------------------------------------------------------------------- basics


def _get(ctx: WorldContext, model: Any, key: str) -> Any:
    return ctx.session.get(model, {"world_id": ctx.world_id, "id": key})


def _utc(dt: datetime) -> datetime:
    """SQLite hands back naive datetimes; every stored instant is UTC."""
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def _rfc3339(dt: datetime) -> str:
    dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _zone(name: str | None, field: str = "timeZone") -> ZoneInfo:
    if name is not None and not isinstance(name, str):
        raise bad_request(f"Invalid time zone definition for {field}: {name}")
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise bad_request(f"Invalid time zone definition for {field}: {name}") from None


def parse_time(value: Any, field: str) -> datetime:
    """An RFC 3339 timestamp with offset (what timeMin / timeMax must be)."""
    if not isinstance(value, str) or not value:
        raise bad_request(f"Bad Request: {field} is required", "required")
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(f"Bad Request: {field} must be an RFC 3339 timestamp") from None
    if dt.tzinfo is None:
        raise bad_request(f"Bad Request: {field} must include a time zone offset")
    return dt.astimezone(UTC)


def setup_calendar(
    ctx: WorldContext,
    *,
    agent_email: str = "assistant@k3stack.test",
    agent_name: str = "Assistant",
    time_zone: str = "UTC",
) -> CalendarMeta:
    """Create the agent's identity and primary calendar once (scenario set-up). A world
    starts with the default identity; set-up that names another one replaces it while it is
    untouched (no events, no other calendars)."""
    meta = ctx.session.get(CalendarMeta, ctx.world_id)
    if meta is not None:
        if meta.agent_email == agent_email.lower() or not _pristine_default(ctx, meta):
            return meta
        for row in ctx.session.scalars(
            select(CalendarRow).where(CalendarRow.world_id == ctx.world_id)
        ):
            ctx.session.delete(row)
        ctx.session.delete(meta)
        ctx.session.flush()
    meta = CalendarMeta(world_id=ctx.world_id, agent_email=agent_email.lower())
    meta.seq = 0
    ctx.session.add(meta)
    ctx.session.flush()
    create_calendar(
        ctx,
        owner_email=agent_email,
        owner_name=agent_name,
        summary=agent_email.lower(),
        time_zone=time_zone,
        primary=True,
        _record=False,
    )
    return meta


DEFAULT_AGENT = "assistant@k3stack.test"


def _pristine_default(ctx: WorldContext, meta: CalendarMeta) -> bool:
    if meta.agent_email != DEFAULT_AGENT:
        return False
    has_event = ctx.session.scalar(
        select(CalendarEvent.id).where(CalendarEvent.world_id == ctx.world_id).limit(1)
    )
    calendars = ctx.session.scalars(
        select(CalendarRow.id).where(CalendarRow.world_id == ctx.world_id)
    ).all()
    return has_event is None and list(calendars) == [DEFAULT_AGENT]


def meta(ctx: WorldContext) -> CalendarMeta:
    return ctx.session.get(CalendarMeta, ctx.world_id) or setup_calendar(ctx)


def _me(ctx: WorldContext, as_email: str | None) -> str:
    return (as_email or meta(ctx).agent_email).lower()


def _next_seq(ctx: WorldContext) -> int:
    m = meta(ctx)
    m.seq = (m.seq or 0) + 1
    return m.seq


# --------------------------------------------------------------------------- calendars


def create_calendar(
    ctx: WorldContext,
    *,
    owner_email: str,
    summary: str,
    owner_name: str = "",
    description: str = "",
    time_zone: str = "UTC",
    primary: bool = False,
    in_list: bool | None = None,
    _record: bool = True,
) -> dict[str, Any]:
    """A calendar: a person's primary (id = their email) or a secondary one."""
    me = meta(ctx).agent_email
    _zone(time_zone)
    cid = owner_email.lower() if primary else f"{ctx.new_id(width=26)}@group.calendar.google.com"
    if _get(ctx, CalendarRow, cid) is not None:
        raise GoogleError(409, "duplicate", "The requested identifier already exists.")
    row = CalendarRow(
        world_id=ctx.world_id,
        id=cid,
        summary=summary,
        description=description,
        time_zone=time_zone,
        owner_email=owner_email.lower(),
        owner_name=owner_name,
        primary=primary,
        in_list=(owner_email.lower() == me) if in_list is None else in_list,
        color_id="1",
        deleted=False,
    )
    ctx.session.add(row)
    ctx.session.flush()
    if _record:
        ctx.record(APP, "calendars.insert", {"calendarId": cid, "summary": summary})
    return calendar_json(row)


def _digest(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def calendar_json(c: CalendarRow) -> dict[str, Any]:
    return {
        "kind": "calendar#calendar",
        "etag": f'"{_digest(c.id, c.summary, c.description, c.time_zone)}"',
        "id": c.id,
        "summary": c.summary,
        "description": c.description,
        "timeZone": c.time_zone,
    }


def _list_entry(c: CalendarRow, me: str) -> dict[str, Any]:
    entry = {
        **calendar_json(c),
        "kind": "calendar#calendarListEntry",
        "colorId": c.color_id,
        "backgroundColor": "#9fe1e7",
        "foregroundColor": "#000000",
        "selected": True,
        "accessRole": "owner" if c.owner_email == me else "reader",
        "defaultReminders": [],
    }
    if c.primary and c.owner_email == me:
        entry["primary"] = True
    return entry


def _calendar(
    ctx: WorldContext, calendar_id: str, *, write: bool = False, me: str | None = None
) -> CalendarRow:
    me = me or meta(ctx).agent_email
    cid = me if calendar_id == "primary" else (calendar_id or "").lower()
    row = _get(ctx, CalendarRow, cid)
    if row is None or row.deleted:
        raise not_found()
    if write and row.owner_email != me:
        raise GoogleError(
            403, "requiredAccessLevel", "You need to have writer access to this calendar."
        )
    return row


def get_calendar(ctx: WorldContext, *, calendar_id: str) -> dict[str, Any]:
    return calendar_json(_calendar(ctx, calendar_id))


def insert_calendar(
    ctx: WorldContext, *, summary: str, description: str = "", time_zone: str | None = None
) -> dict[str, Any]:
    if not summary:
        raise bad_request("Missing title.", "required")
    primary = _calendar(ctx, "primary")
    return create_calendar(
        ctx,
        owner_email=primary.owner_email,
        summary=summary,
        description=description,
        time_zone=time_zone or primary.time_zone,
    )


def patch_calendar(ctx: WorldContext, *, calendar_id: str, body: dict[str, Any]) -> dict[str, Any]:
    row = _calendar(ctx, calendar_id, write=True)
    if "summary" in body:
        row.summary = str(body["summary"] or "")
    if "description" in body:
        row.description = str(body["description"] or "")
    if "timeZone" in body:
        _zone(body["timeZone"])
        row.time_zone = body["timeZone"]
    ctx.record(APP, "calendars.patch", {"calendarId": row.id})
    return calendar_json(row)


def delete_calendar(ctx: WorldContext, *, calendar_id: str) -> None:
    row = _calendar(ctx, calendar_id, write=True)
    if row.primary:
        raise bad_request("Cannot delete the primary calendar.", "cannotDeletePrimaryCalendar")
    row.deleted = True
    ctx.record(APP, "calendars.delete", {"calendarId": row.id})


def calendar_list(
    ctx: WorldContext, *, page_token: str | None = None, max_results: int | None = None
) -> dict[str, Any]:
    me = meta(ctx).agent_email
    rows = ctx.session.scalars(
        select(CalendarRow)
        .where(
            CalendarRow.world_id == ctx.world_id,
            CalendarRow.in_list.is_(True),
            CalendarRow.deleted.is_(False),
        )
        .order_by(CalendarRow.primary.desc(), CalendarRow.summary, CalendarRow.id)
    ).all()
    items, nxt = _page([_list_entry(c, me) for c in rows], page_token, max_results)
    out: dict[str, Any] = {"kind": "calendar#calendarList", "etag": '"1"', "items": items}
    if nxt:
        out["nextPageToken"] = nxt
    return out


def calendar_list_get(ctx: WorldContext, *, calendar_id: str) -> dict[str, Any]:
    row = _calendar(ctx, calendar_id)
    if not row.in_list:
        raise not_found()
    return _list_entry(row, meta(ctx).agent_email)


def calendar_list_insert(ctx: WorldContext, *, calendar_id: str) -> dict[str, Any]:
    """``calendarList.insert``: show another (readable) calendar in the user's list."""
    row = _calendar(ctx, calendar_id)
    if row.in_list:
        raise GoogleError(409, "duplicate", "The calendar is already in the list.")
    row.in_list = True
    ctx.record(APP, "calendarList.insert", {"calendarId": row.id})
    return _list_entry(row, meta(ctx).agent_email)


def calendar_list_delete(ctx: WorldContext, *, calendar_id: str) -> None:
    """``calendarList.delete``: hide a calendar from the list (the primary one stays)."""
    row = _calendar(ctx, calendar_id)
    if not row.in_list:
        raise not_found()
    if row.primary and row.owner_email == meta(ctx).agent_email:
        raise bad_request(
            "Cannot remove the primary calendar from the list.", "cannotRemovePrimary"
        )
    row.in_list = False
    ctx.record(APP, "calendarList.delete", {"calendarId": row.id})


# --------------------------------------------------------------------------- paging


def _page(
    items: list[Any], token: str | None, max_results: int | None
) -> tuple[list[Any], str | None]:
    size = DEFAULT_RESULTS if max_results is None else max_results
    if size < 1:
        raise bad_request("Invalid value for maxResults: must be positive")
    size = min(size, MAX_RESULTS)
    start = 0
    if token:
        m = re.fullmatch(r"p(\d+)", token)
        if not m:
            raise bad_request("Invalid page token", "invalid")
        start = int(m.group(1))
    chunk = items[start : start + size]
    nxt = f"p{start + size}" if start + size < len(items) else None
    return chunk, nxt


# --------------------------------------------------------------------------- event times


def _when(value: Any, field: str, default_tz: str) -> tuple[dict[str, Any], datetime, bool]:
    """A ``start`` / ``end`` object -> (stored object, UTC instant, all-day?)."""
    if not isinstance(value, dict):
        raise bad_request(f"Missing {field} time.", "required")
    if value.get("date"):
        try:
            d = date.fromisoformat(str(value["date"]))
        except ValueError:
            raise bad_request(f"Invalid {field} date: {value['date']}") from None
        tz = _zone(value.get("timeZone") or default_tz, f"{field}.timeZone")
        return {"date": d.isoformat()}, datetime.combine(d, time(), tz).astimezone(UTC), True
    if not value.get("dateTime"):
        raise bad_request(f"Missing {field} time.", "required")
    try:
        dt = datetime.fromisoformat(str(value["dateTime"]).replace("Z", "+00:00"))
    except ValueError:
        raise bad_request(f"Invalid {field} dateTime: {value['dateTime']}") from None
    tz_name = value.get("timeZone")
    if dt.tzinfo is None:
        if not tz_name:
            raise bad_request(f"Missing time zone definition for {field} time.", "timeRangeEmpty")
        dt = dt.replace(tzinfo=_zone(tz_name, f"{field}.timeZone"))
    elif tz_name:
        _zone(tz_name, f"{field}.timeZone")
    stored = {"dateTime": dt.isoformat()}
    if tz_name:
        stored["timeZone"] = tz_name
    return stored, dt.astimezone(UTC), False


# --------------------------------------------------------------------------- recurrence


def _rrule(recurrence: list[str] | None) -> bool:
    return recurrence_set.has_rule(recurrence)


def _validate_recurrence(recurrence: Any, ev: CalendarEvent) -> list[str] | None:
    """The lines as stored; any set Google would refuse (or that could not be listed) is a
    400 here, so no stored event ever breaks a listing."""
    try:
        return recurrence_set.validate(
            recurrence, _utc(ev.start_at), _event_zone(ev), MAX_INSTANCES
        )
    except recurrence_set.RecurrenceError as exc:
        raise bad_request(str(exc)) from None


def _occurrences(
    ev: CalendarEvent, until: datetime, overridden: frozenset[str] | set[str] = frozenset()
) -> list[datetime]:
    """Start instants (UTC) of a recurring event's instances, up to ``until``, less those a
    single-instance edit (an exception row, ``overridden``) replaced.

    Expanded in the event's own time zone, so a weekly 09:00 Europe/Berlin meeting stays at
    09:00 Berlin time across both DST changes (RRULE, RDATE, EXRULE and EXDATE lines count)."""
    start = _utc(ev.start_at)
    try:
        starts = recurrence_set.expand(
            ev.recurrence or [], start, _event_zone(ev), until=_utc(until), limit=MAX_INSTANCES
        )
    except recurrence_set.RecurrenceError:
        # Unreachable for sets stored through insert (validated the same way); a row written
        # by older code must not take the whole listing down.
        starts = [start]
    if not overridden:
        return starts
    all_day = "date" in (ev.start or {})
    return [s for s in starts if _instance_id(ev, s, all_day) not in overridden]


def _event_zone(ev: CalendarEvent) -> ZoneInfo | timezone:
    name = (ev.start or {}).get("timeZone")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    return UTC


def _instance_id(ev: CalendarEvent, at: datetime, all_day: bool) -> str:
    return f"{ev.id}_{at.strftime('%Y%m%d') if all_day else at.strftime('%Y%m%dT%H%M%SZ')}"


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
