"""Recurrence rules: RRULE validation, occurrence expansion, the zone and id of an instance."""

from __future__ import annotations

from datetime import UTC, datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from services.tools.apps.calendar import recurrence as recurrence_set
from services.tools.apps.calendar.actions._base import MAX_INSTANCES, _utc
from services.tools.apps.calendar.errors import bad_request
from services.tools.apps.calendar.models import CalendarEvent

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
