"""Calendar's shared plumbing: constants, time parsing and zones, paging and event times."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from services.tools.apps.calendar.errors import bad_request
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
