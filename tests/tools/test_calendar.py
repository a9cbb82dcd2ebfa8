"""Mock Google Calendar v3: events, time ranges, invitations and answers, recurrence, freeBusy."""

from __future__ import annotations

import pytest

from services.tools.apps.calendar import actions as cal
from services.tools.apps.calendar.routes import router as calendar_router
from services.tools.apps.calendar.state import export_state
from tests.tools.apps_conftest import make_world, tools_app, world_ctx

ME = "ava@acme.test"
BOB = "bob@acme.test"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with tools_app(tmp_path_factory.mktemp("calendar"), [calendar_router]) as app:
        yield app


@pytest.fixture
def world(app):
    w = make_world(app)
    with world_ctx(app, w.id) as ctx:
        cal.setup_calendar(ctx, agent_email=ME, agent_name="Ava", time_zone="Europe/Paris")
        cal.create_calendar(ctx, owner_email=BOB, owner_name="Bob", summary=BOB, primary=True)
    return w


def api(w, method, path, body=None, **params):
    r = w.client.request(
        method, f"/worlds/{w.id}/calendar/v3/{path}", json=body, params=params or None
    )
    return r.status_code, (r.json() if r.content else None)


def ok(w, method, path, body=None, **params):
    status, data = api(w, method, path, body, **params)
    assert status in (200, 204), data
    return data


def event(summary, start, end, **extra):
    return {"summary": summary, "start": {"dateTime": start}, "end": {"dateTime": end}, **extra}


def test_calendar_list_and_insert(world):
    items = ok(world, "GET", "users/me/calendarList")["items"]
    assert (
        [c["id"] for c in items] == [ME]
        and items[0]["primary"]
        and items[0]["timeZone"] == "Europe/Paris"
    )
    new = ok(world, "POST", "calendars", {"summary": "Hiring"})
    assert new["id"].endswith("@group.calendar.google.com")
    assert len(ok(world, "GET", "users/me/calendarList")["items"]) == 2
    assert ok(world, "GET", "calendars/primary")["id"] == ME
    status, err = api(world, "DELETE", "calendars/primary")
    assert status == 400 and err["error"]["errors"][0]["reason"] == "cannotDeletePrimaryCalendar"
    status, err = api(world, "GET", "calendars/nobody@x.test")
    assert status == 404 and err["error"]["status"] == "NOT_FOUND"


def test_insert_list_time_range_and_query(world):
    a = ok(
        world,
        "POST",
        "calendars/primary/events",
        event("Standup", "2026-03-02T09:30:00Z", "2026-03-02T09:45:00Z"),
    )
    ok(
        world,
        "POST",
        "calendars/primary/events",
        event(
            "Budget review",
            "2026-03-03T14:00:00+01:00",
            "2026-03-03T15:00:00+01:00",
            description="Q3 numbers",
            location="Room 4",
        ),
    )
    ok(
        world,
        "POST",
        "calendars/primary/events",
        {"summary": "Offsite", "start": {"date": "2026-03-05"}, "end": {"date": "2026-03-07"}},
    )
    ok(
        world,
        "POST",
        "calendars/primary/events",
        event("Lunch", "2026-03-02T12:00:00", "2026-03-02T13:00:00")
        | {
            "start": {"dateTime": "2026-03-02T12:00:00", "timeZone": "Europe/Paris"},
            "end": {"dateTime": "2026-03-02T13:00:00", "timeZone": "Europe/Paris"},
        },
    )
    assert (
        a["organizer"] == {"email": ME, "displayName": "Ava", "self": True}
        and a["status"] == "confirmed"
    )

    def summaries(**params):
        return [
            e["summary"] for e in ok(world, "GET", "calendars/primary/events", **params)["items"]
        ]

    assert summaries() == ["Standup", "Lunch", "Budget review", "Offsite"]
    assert summaries(timeMin="2026-03-02T10:00:00Z", timeMax="2026-03-04T00:00:00Z") == [
        "Lunch",
        "Budget review",
    ]
    # an event ending exactly at timeMin is out; one overlapping it is in
    assert summaries(timeMin="2026-03-02T09:45:00Z", timeMax="2026-03-02T11:30:00Z") == ["Lunch"]
    assert summaries(timeMin="2026-03-02T09:40:00Z", timeMax="2026-03-02T09:50:00Z") == ["Standup"]
    assert summaries(q="q3 numbers") == ["Budget review"]
    assert summaries(q="room 4") == ["Budget review"]
    page = ok(world, "GET", "calendars/primary/events", maxResults=3)
    assert len(page["items"]) == 3 and page["nextPageToken"]
    rest = ok(
        world, "GET", "calendars/primary/events", maxResults=3, pageToken=page["nextPageToken"]
    )
    assert [e["summary"] for e in rest["items"]] == ["Offsite"] and "nextPageToken" not in rest


def test_patch_update_delete(world):
    e = ok(
        world,
        "POST",
        "calendars/primary/events",
        event("1:1", "2026-03-04T10:00:00Z", "2026-03-04T10:30:00Z", attendees=[{"email": BOB}]),
    )
    assert e["attendees"][0]["responseStatus"] == "needsAction"
    p = ok(
        world,
        "PATCH",
        f"calendars/primary/events/{e['id']}",
        {"location": "Cafe"},
        sendUpdates="all",
    )
    assert p["location"] == "Cafe" and p["summary"] == "1:1" and p["sequence"] == 0
    moved = ok(
        world,
        "PATCH",
        f"calendars/primary/events/{e['id']}",
        {
            "start": {"dateTime": "2026-03-05T10:00:00Z"},
            "end": {"dateTime": "2026-03-05T10:30:00Z"},
        },
    )
    assert moved["sequence"] == 1
    u = ok(
        world,
        "PUT",
        f"calendars/primary/events/{e['id']}",
        event("1:1 (moved)", "2026-03-05T11:00:00Z", "2026-03-05T11:30:00Z"),
    )
    assert u["summary"] == "1:1 (moved)" and "location" not in u and "attendees" not in u
    status, err = api(world, "PUT", f"calendars/primary/events/{e['id']}", {"summary": "no times"})
    assert status == 400
    ok(world, "DELETE", f"calendars/primary/events/{e['id']}")
    assert ok(world, "GET", f"calendars/primary/events/{e['id']}")["status"] == "cancelled"
    assert ok(world, "GET", "calendars/primary/events")["items"] == []
    assert len(ok(world, "GET", "calendars/primary/events", showDeleted="true")["items"]) == 1
    status, err = api(world, "DELETE", f"calendars/primary/events/{e['id']}")
    assert status == 410 and err["error"]["errors"][0]["reason"] == "deleted"


def test_invitation_and_response(app, world):
    with world_ctx(app, world.id) as ctx:
        inv = cal.insert_event(
            ctx,
            calendar_id="primary",
            body=event(
                "Contract sync",
                "2026-03-04T15:00:00Z",
                "2026-03-04T16:00:00Z",
                attendees=[{"email": BOB}, {"email": ME}],
            ),
            as_email=BOB,
        )
    listed = ok(world, "GET", "calendars/primary/events")["items"]
    assert [e["id"] for e in listed] == [inv["id"]]
    me = next(a for a in listed[0]["attendees"] if a.get("self"))
    assert me["responseStatus"] == "needsAction" and listed[0]["organizer"]["email"] == BOB
    # the attendee can answer, but not change shared properties
    status, err = api(
        world, "PATCH", f"calendars/primary/events/{inv['id']}", {"summary": "mine now"}
    )
    assert status == 403
    ans = ok(
        world,
        "PATCH",
        f"calendars/primary/events/{inv['id']}",
        {"attendees": [{"email": ME, "responseStatus": "accepted"}]},
    )
    assert next(a for a in ans["attendees"] if a["email"] == ME)["responseStatus"] == "accepted"
    assert next(a for a in ans["attendees"] if a["email"] == BOB)["responseStatus"] == "accepted"
    status, _ = api(world, "DELETE", f"calendars/primary/events/{inv['id']}")
    assert status == 403


def test_recurrence_single_events(world):
    weekly = event(
        "Weekly",
        "2026-03-02T08:00:00Z",
        "2026-03-02T08:30:00Z",
        recurrence=["RRULE:FREQ=WEEKLY;BYDAY=MO,WE;COUNT=4"],
    )
    master = ok(world, "POST", "calendars/primary/events", weekly)
    masters = ok(world, "GET", "calendars/primary/events")["items"]
    assert [m["id"] for m in masters] == [master["id"]] and masters[0]["recurrence"]
    inst = ok(world, "GET", "calendars/primary/events", singleEvents="true", orderBy="startTime")[
        "items"
    ]
    assert [i["start"]["dateTime"][:10] for i in inst] == [
        "2026-03-02",
        "2026-03-04",
        "2026-03-09",
        "2026-03-11",
    ]
    assert all(i["recurringEventId"] == master["id"] for i in inst)
    one = ok(world, "GET", f"calendars/primary/events/{inst[1]['id']}")
    assert one["start"] == inst[1]["start"]
    ranged = ok(
        world,
        "GET",
        "calendars/primary/events",
        singleEvents="true",
        timeMin="2026-03-05T00:00:00Z",
        timeMax="2026-03-10T00:00:00Z",
    )["items"]
    assert [i["start"]["dateTime"][:10] for i in ranged] == ["2026-03-09"]
    status, err = api(world, "GET", "calendars/primary/events", orderBy="startTime")
    assert status == 400 and "ordering" in err["error"]["message"]
    inst2 = ok(world, "GET", f"calendars/primary/events/{master['id']}/instances", maxResults=3)
    assert [i["id"] for i in inst2["items"]] == [i["id"] for i in inst[:3]] and inst2[
        "nextPageToken"
    ]


def test_free_busy(app, world):
    ok(
        world,
        "POST",
        "calendars/primary/events",
        event("A", "2026-03-02T10:00:00Z", "2026-03-02T11:00:00Z"),
    )
    ok(
        world,
        "POST",
        "calendars/primary/events",
        event("B", "2026-03-02T10:30:00Z", "2026-03-02T12:00:00Z"),
    )
    ok(
        world,
        "POST",
        "calendars/primary/events",
        event("Free", "2026-03-02T13:00:00Z", "2026-03-02T14:00:00Z", transparency="transparent"),
    )
    with world_ctx(app, world.id) as ctx:
        cal.insert_event(
            ctx,
            calendar_id="primary",
            body=event("Bob's", "2026-03-02T15:00:00Z", "2026-03-02T16:00:00Z"),
            as_email=BOB,
        )
        cal.insert_event(
            ctx,
            calendar_id="primary",
            body=event(
                "Declined",
                "2026-03-02T17:00:00Z",
                "2026-03-02T18:00:00Z",
                attendees=[{"email": ME, "responseStatus": "declined"}],
            ),
            as_email=BOB,
        )
    fb = ok(
        world,
        "POST",
        "freeBusy",
        {
            "timeMin": "2026-03-02T00:00:00Z",
            "timeMax": "2026-03-03T00:00:00Z",
            "items": [{"id": "primary"}, {"id": BOB}, {"id": "ghost@acme.test"}],
        },
    )
    assert fb["calendars"]["primary"]["busy"] == [
        {"start": "2026-03-02T10:00:00.000Z", "end": "2026-03-02T12:00:00.000Z"}
    ]
    assert [b["start"] for b in fb["calendars"][BOB]["busy"]] == [
        "2026-03-02T15:00:00.000Z",
        "2026-03-02T17:00:00.000Z",
    ]
    assert fb["calendars"]["ghost@acme.test"]["errors"][0]["reason"] == "notFound"


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"summary": "x"}, "Missing start"),
        (event("x", "2026-03-02T10:00:00Z", "2026-03-02T09:00:00Z"), "time range is empty"),
        (
            {
                "summary": "x",
                "start": {"dateTime": "2026-03-02T10:00:00"},
                "end": {"dateTime": "2026-03-02T11:00:00"},
            },
            "time zone",
        ),
        (event("x", "tomorrow", "2026-03-02T09:00:00Z"), "Invalid start"),
        (
            event(
                "x", "2026-03-02T10:00:00Z", "2026-03-02T11:00:00Z", attendees=[{"email": "nope"}]
            ),
            "attendee",
        ),
        (
            event("x", "2026-03-02T10:00:00Z", "2026-03-02T11:00:00Z", id="UPPER_case"),
            "resource id",
        ),
        (
            event(
                "x",
                "2026-03-02T10:00:00Z",
                "2026-03-02T11:00:00Z",
                recurrence=["RRULE:FREQ=HOURLY"],
            ),
            "recurrence",
        ),
    ],
    ids=["no-start", "empty-range", "no-tz", "bad-time", "bad-attendee", "bad-id", "bad-rrule"],
)
def test_bad_events_are_google_400s(world, body, fragment):
    status, err = api(world, "POST", "calendars/primary/events", body)
    assert status == 400 and fragment.lower() in err["error"]["message"].lower(), err


def test_other_errors(app, world):
    status, err = api(world, "GET", "calendars/primary/events", timeMin="yesterday")
    assert status == 400 and err["error"]["code"] == 400
    status, err = api(world, "GET", "calendars/primary/events", maxResults="lots")
    assert status == 400
    status, err = api(world, "GET", "calendars/primary/events", pageToken="zzz")
    assert status == 400
    e = ok(
        world,
        "POST",
        "calendars/primary/events",
        event("x", "2026-03-02T10:00:00Z", "2026-03-02T11:00:00Z", id="abc12345"),
    )
    status, err = api(
        world,
        "POST",
        "calendars/primary/events",
        event("x", "2026-03-02T10:00:00Z", "2026-03-02T11:00:00Z", id=e["id"]),
    )
    assert status == 409
    r = world.client.post(
        f"/worlds/{world.id}/calendar/v3/calendars/primary/events",
        content=b"{",
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["error"]["errors"][0]["reason"] == "parseError"
    other = make_world(app)
    r = other.client.get(f"/worlds/{world.id}/calendar/v3/users/me/calendarList")
    assert r.status_code == 401 and r.json()["error"]["status"] == "UNAUTHENTICATED"
    with world_ctx(app, world.id) as ctx:
        assert [e["summary"] for e in export_state(ctx)["events"]] == ["x"]


def test_fuzzed_bodies_never_500(world):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.tools.apps_conftest import json_bodies

    ev = ok(
        world,
        "POST",
        "calendars/primary/events",
        event("e", "2026-03-02T10:00:00Z", "2026-03-02T11:00:00Z"),
    )["id"]
    keys = [
        "summary",
        "start",
        "end",
        "attendees",
        "description",
        "location",
        "recurrence",
        "status",
        "id",
        "timeMin",
        "timeMax",
        "items",
        "timeZone",
        "transparency",
        "dateTime",
        "date",
    ]
    routes = [
        ("POST", "calendars/primary/events"),
        ("PATCH", f"calendars/primary/events/{ev}"),
        ("PUT", f"calendars/primary/events/{ev}"),
        ("POST", "freeBusy"),
        ("POST", "calendars"),
    ]

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(route=st.sampled_from(routes), body=json_bodies(keys))
    def check(route, body):
        status, err = api(world, route[0], route[1], body)
        assert status < 500, (route, body, err)

    check()


@pytest.mark.parametrize(
    "zone, local_start",
    [("Europe/Berlin", "2026-01-05T09:00:00"), ("America/New_York", "2026-01-05T09:00:00")],
)
def test_weekly_recurrence_keeps_local_time_across_both_dst_changes(world, zone, local_start):
    """A weekly 09:00 meeting in a DST zone stays at 09:00 local all year (spring forward in
    March, fall back in October/November): instances are expanded in the event's zone."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    body = {
        "summary": "Weekly sync",
        "start": {"dateTime": local_start, "timeZone": zone},
        "end": {"dateTime": local_start.replace("09:00", "09:30"), "timeZone": zone},
        "recurrence": ["RRULE:FREQ=WEEKLY;COUNT=52"],
    }
    ok(world, "POST", "calendars/primary/events", body)
    items = ok(
        world,
        "GET",
        "calendars/primary/events",
        singleEvents="true",
        orderBy="startTime",
        maxResults="2500",
        timeMin="2026-01-01T00:00:00Z",
        timeMax="2027-01-01T00:00:00Z",
    )["items"]
    starts = [
        datetime.fromisoformat(i["start"]["dateTime"].replace("Z", "+00:00")).astimezone(
            ZoneInfo(zone)
        )
        for i in items
    ]
    assert len(starts) == 52
    assert {(s.hour, s.minute) for s in starts} == {(9, 0)}, sorted({s.utcoffset() for s in starts})
    offsets = [s.utcoffset() for s in starts]
    assert len(set(offsets)) == 2  # both sides of the changes are covered
    # summer time starts and ends within the year: offsets change exactly twice
    assert sum(a != b for a, b in zip(offsets, offsets[1:], strict=False)) == 2
