"""The world's calendars: set-up, the agent's meta and acting identity, and Google Calendar's
``calendars`` and ``calendarList`` resources with their JSON.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import select

from services.tools.apps.calendar.actions._base import APP, _get, _page, _zone
from services.tools.apps.calendar.errors import GoogleError, bad_request, not_found
from services.tools.apps.calendar.models import CalendarEvent, CalendarMeta, CalendarRow
from services.tools.context import WorldContext


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
