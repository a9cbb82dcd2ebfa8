"""Recurrence sets (RFC 5545 RRULE, EXRULE, RDATE, EXDATE) expanded as Google Calendar does.

Every date in a set is brought to one frame before dateutil sees it: naive wall time in the
event's own zone. dateutil compares whatever it is given while it iterates, so a set that
mixes aware values (``EXDATE;TZID=…``, ``…Z``, ``UNTIL=…Z``) with a naive start raised only
when listing; here ``UNTIL=…Z``, ``TZID`` and ``Z`` values are converted first, and
:func:`expand` is the one code path both the insert's validation and every listing take, so
a set that is accepted can always be listed.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil.rrule import rrule, rruleset, rrulestr

FREQS = ("DAILY", "WEEKLY", "MONTHLY", "YEARLY")
DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
# Far enough for any listing, near enough that zone arithmetic never overflows.
LAST = datetime(9000, 1, 1, tzinfo=UTC)
FIRST = datetime(1900, 1, 1, tzinfo=UTC)
# No set is expanded past ten years from its start (Google stops well before), which also
# bounds the work a rule that never matches (BYMONTH=2;BYMONTHDAY=30) can cause.
SPAN = timedelta(days=3660)


class RecurrenceError(ValueError):
    """A recurrence line Google would refuse; its message names the problem."""


def kind(line: str) -> str:
    return line.split(":", 1)[0].split(";", 1)[0].strip().upper()


def has_rule(lines: list[str] | None) -> bool:
    return any(kind(r) == "RRULE" for r in lines or [])


def _params(head: str) -> dict[str, str]:
    out = {}
    for part in head.split(";")[1:]:
        key, sep, value = part.partition("=")
        if not sep:
            raise RecurrenceError(f"Invalid recurrence rule: parameter {part!r}.")
        out[key.strip().upper()] = value.strip().strip('"')
    return out


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise RecurrenceError(f"Invalid recurrence rule: unknown TZID {name!r}.") from None


def _local(value: str, zone: tzinfo, tzid: tzinfo | None, at: time) -> datetime:
    """One RDATE/EXDATE/UNTIL value as naive wall time in ``zone`` (the event's)."""
    v = value.strip().upper()
    try:
        if len(v) == 8 and v.isdigit():
            return datetime.combine(date(int(v[:4]), int(v[4:6]), int(v[6:])), at)
        if v.endswith("Z"):
            dt = datetime.strptime(v[:-1], "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
        else:
            dt = datetime.strptime(v, "%Y%m%dT%H%M%S").replace(tzinfo=tzid or zone)
    except ValueError:
        raise RecurrenceError(f"Invalid recurrence rule: date value {value!r}.") from None
    if not FIRST <= dt <= LAST:
        raise RecurrenceError(f"Invalid recurrence rule: date value {value!r} is out of range.")
    return dt.astimezone(zone).replace(tzinfo=None)


def _rule(line: str, start: datetime, zone: tzinfo, until: datetime) -> rrule:
    body = line.split(":", 1)[1] if ":" in line else ""
    parts: dict[str, str] = {}
    for part in body.split(";"):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise RecurrenceError(f"Invalid recurrence rule: {part!r}.")
        parts[key.strip().upper()] = value.strip().upper()
    freq = parts.get("FREQ")
    if freq not in FREQS:
        raise RecurrenceError(f"Invalid recurrence rule: FREQ={freq} is not supported.")
    for key in ("COUNT", "INTERVAL"):
        if key in parts and not (parts[key].isdigit() and 0 < int(parts[key]) <= 100000):
            raise RecurrenceError(f"Invalid recurrence rule: {key}.")
    if "COUNT" in parts and "UNTIL" in parts:
        raise RecurrenceError("Invalid recurrence rule: COUNT and UNTIL together.")
    if "BYDAY" in parts and any(d.strip()[-2:] not in DAYS for d in parts["BYDAY"].split(",")):
        raise RecurrenceError("Invalid recurrence rule: BYDAY.")
    end = until
    if "UNTIL" in parts:
        # A date UNTIL includes its whole day; a UTC one is converted to the event's wall time.
        raw = parts.pop("UNTIL")
        limit = _local(raw, zone, None, time(23, 59, 59))
        end = min(end, limit)
    text = ";".join(f"{k}={v}" for k, v in parts.items())
    try:
        rule = rrulestr(text, dtstart=start, forceset=False, unfold=True)
        if not isinstance(rule, rrule):
            raise RecurrenceError("Invalid recurrence rule.")
        _probe(rule, start)
        return rule if "COUNT" in parts else rule.replace(until=end)
    except RecurrenceError:
        raise
    except Exception as exc:  # dateutil raises ValueError, TypeError, KeyError, …
        raise RecurrenceError(f"Invalid recurrence rule: {exc}.") from None


def _probe(rule: rrule, start: datetime) -> None:
    """Refuse a rule that matches no date. dateutil tests UNTIL only on dates that match, so
    such a rule (``FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30``) would iterate to the year 9999 on
    every listing; a copy started near that year answers in a few thousand steps."""
    day = min(start.day, 28)
    probe = rule.replace(dtstart=start.replace(year=9980, day=day), count=None, until=None)
    if next(iter(probe), None) is None:
        raise RecurrenceError("Invalid recurrence rule: it matches no date.")


def expand(
    lines: list[str], start: datetime, zone: tzinfo, *, until: datetime, limit: int
) -> list[datetime]:
    """Start instants (UTC) of the set's instances from ``start`` (aware) up to ``until``,
    at most ``limit``; without an RRULE the event is its single ``start``."""
    start = start.astimezone(UTC)
    if not has_rule(lines):
        for line in lines:
            _check_line(line)
        return [start]
    local = start.astimezone(zone).replace(tzinfo=None)
    end = min(max(until, start), start + SPAN if start < LAST - SPAN else LAST)
    horizon = end.astimezone(zone).replace(tzinfo=None)
    rset = rruleset()
    for line in lines:
        name = _check_line(line)
        if name in ("RRULE", "EXRULE"):
            rule = _rule(line, local, zone, horizon)
            (rset.rrule if name == "RRULE" else rset.exrule)(rule)
            continue
        head, _, values = line.partition(":")
        params = _params(head)
        tzid = _zone(params["TZID"]) if "TZID" in params else None
        for value in values.split(","):
            if not value.strip():
                raise RecurrenceError(f"Invalid recurrence rule: empty value in {name}.")
            if params.get("VALUE", "").upper() == "PERIOD" or "/" in value:
                value = value.split("/", 1)[0]
            at = _local(value, zone, tzid, local.time())
            (rset.rdate if name == "RDATE" else rset.exdate)(at)
    out: list[datetime] = []
    try:
        for at in rset:
            if at > horizon or len(out) >= limit:
                break
            out.append(at.replace(tzinfo=zone).astimezone(UTC))
    except Exception as exc:  # anything dateutil raises while iterating is the set's fault
        raise RecurrenceError(f"Invalid recurrence rule: {exc}.") from None
    return out


def _check_line(line: str) -> str:
    name = kind(line)
    if name not in ("RRULE", "EXRULE", "RDATE", "EXDATE") or ":" not in line:
        raise RecurrenceError(f"Invalid recurrence rule: {line[:80]!r}.")
    return name


def validate(lines: object, start: datetime, zone: tzinfo, limit: int) -> list[str] | None:
    """The lines as stored, or :class:`RecurrenceError`: the set is expanded once, over the
    widest window any listing uses, so listing can never meet an error insert did not."""
    if lines is None:
        return None
    if not isinstance(lines, list) or not all(isinstance(r, str) for r in lines):
        raise RecurrenceError("Invalid recurrence rule.")
    if len(lines) > 100 or any(len(r) > 10000 for r in lines):
        raise RecurrenceError("Invalid recurrence rule: too long.")
    if sum(kind(r) == "RRULE" for r in lines) > 1:
        raise RecurrenceError("Invalid recurrence rule: only one RRULE is supported.")
    if not FIRST <= start <= LAST:
        raise RecurrenceError("Invalid recurrence rule: the start is out of range.")
    expand(lines, start, zone, until=LAST, limit=limit)
    return lines or None
