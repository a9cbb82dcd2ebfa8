"""Google Calendar MCP tools, named as the popular Google Calendar MCP server names them
(``list-events``, ``create-event``, ``get-freebusy``, ...).

Times are ISO 8601 strings: ``2026-03-02T10:00:00`` (interpreted in ``timeZone``, default the
calendar's), ``2026-03-02T10:00:00Z`` / ``+01:00`` (absolute), or ``2026-03-02`` (all day).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from services.tools.apps.calendar import actions as cal
from services.tools.context import WorldContext
from services.tools.mcp.registry import NoArgs, forward, tool

CALENDAR = Field("primary", description='Calendar id, or "primary" for the user\'s own.')


def _when(value: str, tz: str | None) -> dict[str, Any]:
    if len(value) == 10:
        return {"date": value}
    out: dict[str, Any] = {"dateTime": value}
    if tz:
        out["timeZone"] = tz
    elif not (value.endswith("Z") or "+" in value[10:] or value[10:].count("-") > 0):
        out["timeZone"] = None  # filled with the calendar's zone below
    return out


def _times(
    ctx: WorldContext, calendar_id: str, start: str, end: str, tz: str | None
) -> dict[str, Any]:
    zone = tz or cal.get_calendar(ctx, calendar_id=calendar_id)["timeZone"]
    body = {"start": _when(start, tz), "end": _when(end, tz)}
    for key in ("start", "end"):
        if "timeZone" in body[key] and body[key]["timeZone"] is None:
            body[key]["timeZone"] = zone
    return body


def _range(t: str | None) -> str | None:
    """timeMin / timeMax without an offset are taken as UTC (the API insists on one)."""
    if t and len(t) == 10:
        return t + "T00:00:00Z"
    if t and not (t.endswith("Z") or "+" in t[10:] or t[10:].count("-") > 0):
        return t + "Z"
    return t


IDS = {"calendarId": "calendar_id", "eventId": "event_id"}  # public names -> the actions'

forward(
    "calendar",
    "list-calendars",
    NoArgs,
    cal.calendar_list,
    read_only=True,
    description="List all calendars the user can see.",
)


class ListEvents(BaseModel):
    calendarId: str = CALENDAR  # noqa: N815 - the public tool's argument name
    timeMin: str | None = Field(None, description="Only events ending after this time.")  # noqa: N815
    timeMax: str | None = Field(None, description="Only events starting before this time.")  # noqa: N815
    maxResults: int = Field(250, ge=1, le=2500)  # noqa: N815
    pageToken: str | None = None  # noqa: N815


def _events(ctx: WorldContext, a: ListEvents, q: str | None = None) -> Any:
    return cal.list_events(
        ctx,
        calendar_id=a.calendarId,
        q=q,
        time_min=_range(a.timeMin),
        time_max=_range(a.timeMax),
        single_events=True,
        order_by="startTime",
        max_results=a.maxResults,
        page_token=a.pageToken,
    )


@tool("calendar", "list-events", ListEvents, read_only=True)
def list_events(ctx: WorldContext, a: ListEvents) -> Any:
    """List events in a time range, recurring events expanded, in start order."""
    return _events(ctx, a)


class SearchEvents(ListEvents):
    query: str = Field(description="Words to find in title, description, location, attendees.")


@tool("calendar", "search-events", SearchEvents, read_only=True)
def search_events(ctx: WorldContext, a: SearchEvents) -> Any:
    """Search events by text."""
    return _events(ctx, a, q=a.query)


class EventRef(BaseModel):
    """Get one event."""

    calendarId: str = CALENDAR  # noqa: N815
    eventId: str = Field(description="The event's id.")  # noqa: N815


forward("calendar", "get-event", EventRef, cal.get_event, read_only=True, rename=IDS)


class CreateEvent(BaseModel):
    calendarId: str = CALENDAR  # noqa: N815
    summary: str = Field(description="Title.")
    start: str = Field(description="Start time (ISO 8601) or date (YYYY-MM-DD).")
    end: str = Field(description="End time (ISO 8601) or date (exclusive, for all-day).")
    timeZone: str | None = Field(None, description="IANA zone for times without an offset.")  # noqa: N815
    description: str | None = None
    location: str | None = None
    attendees: list[str] | None = Field(None, description="Attendee email addresses.")
    recurrence: list[str] | None = Field(None, description='e.g. ["RRULE:FREQ=WEEKLY;COUNT=4"]')
    sendUpdates: Literal["all", "externalOnly", "none"] | None = None  # noqa: N815


@tool("calendar", "create-event", CreateEvent)
def create_event(ctx: WorldContext, a: CreateEvent) -> Any:
    """Create an event, inviting attendees."""
    body: dict[str, Any] = {
        "summary": a.summary,
        **_times(ctx, a.calendarId, a.start, a.end, a.timeZone),
    }
    if a.description is not None:
        body["description"] = a.description
    if a.location is not None:
        body["location"] = a.location
    if a.attendees:
        body["attendees"] = [{"email": e} for e in a.attendees]
    if a.recurrence:
        body["recurrence"] = a.recurrence
    return cal.insert_event(ctx, calendar_id=a.calendarId, body=body, send_updates=a.sendUpdates)


class UpdateEvent(BaseModel):
    calendarId: str = CALENDAR  # noqa: N815
    eventId: str = Field(description="The event's id.")  # noqa: N815
    summary: str | None = None
    start: str | None = Field(None, description="New start (give end too).")
    end: str | None = Field(None, description="New end.")
    timeZone: str | None = None  # noqa: N815
    description: str | None = None
    location: str | None = None
    attendees: list[str] | None = Field(None, description="The full new attendee list.")
    sendUpdates: Literal["all", "externalOnly", "none"] | None = None  # noqa: N815


@tool("calendar", "update-event", UpdateEvent)
def update_event(ctx: WorldContext, a: UpdateEvent) -> Any:
    """Change an event's title, time, place, description or attendees (the rest is kept)."""
    body: dict[str, Any] = {}
    for field in ("summary", "description", "location"):
        if getattr(a, field) is not None:
            body[field] = getattr(a, field)
    if a.start or a.end:
        current = cal.get_event(ctx, calendar_id=a.calendarId, event_id=a.eventId)

        def as_text(when: dict[str, Any]) -> str:
            return when.get("dateTime") or when.get("date")

        times = _times(
            ctx,
            a.calendarId,
            a.start or as_text(current["start"]),
            a.end or as_text(current["end"]),
            a.timeZone,
        )
        body.update(times)
    if a.attendees is not None:
        body["attendees"] = [{"email": e} for e in a.attendees]
    return cal.patch_event(
        ctx, calendar_id=a.calendarId, event_id=a.eventId, body=body, send_updates=a.sendUpdates
    )


@tool("calendar", "delete-event", EventRef)
def delete_event(ctx: WorldContext, a: EventRef) -> Any:
    """Delete (cancel) an event you organise."""
    cal.delete_event(ctx, calendar_id=a.calendarId, event_id=a.eventId)
    return {"deleted": True, "eventId": a.eventId}


class RespondToEvent(EventRef):
    response: Literal["accepted", "declined", "tentative"] = Field(description="Your answer.")
    comment: str | None = None


@tool("calendar", "respond-to-event", RespondToEvent)
def respond_to_event(ctx: WorldContext, a: RespondToEvent) -> Any:
    """Accept, decline or tentatively accept an invitation."""
    me = cal.meta(ctx).agent_email
    mine: dict[str, Any] = {"email": me, "responseStatus": a.response}
    if a.comment:
        mine["comment"] = a.comment
    current = cal.get_event(ctx, calendar_id=a.calendarId, event_id=a.eventId)
    attendees = [mine]
    if current["organizer"].get("self"):
        # The organizer patches the whole list: keep everyone else's answers.
        others = [x for x in current.get("attendees", []) if x["email"] != me]
        attendees = [{"email": x["email"], "responseStatus": x["responseStatus"]} for x in others]
        attendees.append(mine)
    return cal.patch_event(
        ctx, calendar_id=a.calendarId, event_id=a.eventId, body={"attendees": attendees}
    )


class FreeBusy(BaseModel):
    calendars: list[str] = Field(description='Calendar ids or people\'s emails ("primary" ok).')
    timeMin: str = Field(description="Start of the window.")  # noqa: N815
    timeMax: str = Field(description="End of the window.")  # noqa: N815


@tool("calendar", "get-freebusy", FreeBusy, read_only=True)
def get_freebusy(ctx: WorldContext, a: FreeBusy) -> Any:
    """Busy intervals of calendars or people in a window."""
    return cal.free_busy(
        ctx,
        time_min=_range(a.timeMin) or "",
        time_max=_range(a.timeMax) or "",
        items=[{"id": c} for c in a.calendars],
    )
