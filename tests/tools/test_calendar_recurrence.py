"""Recurrence as Google Calendar has it: EXDATE / RDATE in every form, UNTIL in UTC, edits and
deletions of single instances, and the property that no accepted insert breaks a listing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.tools.apps.calendar import actions as cal
from services.tools.apps.calendar import ops
from services.tools.apps.calendar.routes import router as calendar_router
from tests.tools.apps_conftest import make_world, tools_app, world_ctx

ME = "ava@acme.test"
BERLIN = "Europe/Berlin"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with tools_app(tmp_path_factory.mktemp("recurrence"), [calendar_router]) as app:
        yield app


def new_world(app):
    w = make_world(app)
    with world_ctx(app, w.id) as ctx:
        cal.setup_calendar(ctx, agent_email=ME, agent_name="Ava", time_zone=BERLIN)
    return w


@pytest.fixture
def world(app):
    return new_world(app)


def api(w, method, path, body=None, **params):
    r = w.client.request(
        method, f"/worlds/{w.id}/calendar/v3/{path}", json=body, params=params or None
    )
    return r.status_code, (r.json() if r.content else None)


def weekly(recurrence, start="2026-03-02T09:00:00", zone=BERLIN):
    end = start[:11] + "10" + start[13:]
    return {
        "summary": "Sync",
        "start": {"dateTime": start, "timeZone": zone},
        "end": {"dateTime": end, "timeZone": zone},
        "recurrence": recurrence,
    }


def instances(w, event_id=None):
    if event_id:
        status, body = api(w, "GET", f"calendars/primary/events/{event_id}/instances")
    else:
        status, body = api(w, "GET", "calendars/primary/events", singleEvents="true",
                           orderBy="startTime", timeMax="2026-06-01T00:00:00Z")  # fmt: skip
    assert status == 200, body
    return body["items"]


@pytest.mark.parametrize(
    "exdate",
    [
        "EXDATE;TZID=Europe/Berlin:20260309T090000",
        "EXDATE:20260309T080000Z",
        "EXDATE;VALUE=DATE:20260309",
    ],
)
def test_exdate_in_each_form_removes_the_instance_and_lists(world, exdate):
    """The issue's case: an EXDATE with TZID, with Z, beside UNTIL=…Z; all list fine."""
    rec = ["RRULE:FREQ=WEEKLY;UNTIL=20260324T235959Z", exdate]
    status, master = api(world, "POST", "calendars/primary/events", weekly(rec))
    assert status == 200, master
    days = [i["start"]["dateTime"][:10] for i in instances(world)]
    assert days == ["2026-03-02", "2026-03-16", "2026-03-23"]
    assert len(instances(world, master["id"])) == 3
    status, _ = api(world, "GET", "calendars/primary/events")
    assert status == 200


def test_rdate_adds_an_instance_at_the_series_time(world):
    rec = ["RRULE:FREQ=WEEKLY;COUNT=2", "RDATE;VALUE=DATE:20260305", "RDATE:20260320T120000Z"]
    status, _ = api(world, "POST", "calendars/primary/events", weekly(rec))
    assert status == 200
    starts = [i["start"]["dateTime"] for i in instances(world)]
    assert starts == [
        "2026-03-02T09:00:00+01:00",
        "2026-03-05T09:00:00+01:00",  # a DATE value takes the series' wall time
        "2026-03-09T09:00:00+01:00",
        "2026-03-20T13:00:00+01:00",  # a UTC value is that instant
    ]


@pytest.mark.parametrize(
    "rec",
    [
        ["RRULE:FREQ=WEEKLY", "EXDATE;TZID=Mars/Olympus:20260309T090000"],
        ["RRULE:FREQ=WEEKLY", "EXDATE:2026-03-09"],
        ["RRULE:FREQ=WEEKLY;COUNT=3;UNTIL=20260401T000000Z"],
        ["RRULE:FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30"],  # matches no date: would spin to 9999
        ["RRULE:FREQ=WEEKLY", "RRULE:FREQ=DAILY"],
        ["RRULE:FREQ=WEEKLY;BYDAY=XX"],
        ["RRULE:FREQ=WEEKLY;WKST"],
        ["RRULE:FREQ=SECONDLY"],
        ["RRULE:FREQ=WEEKLY", "EXDATE:"],
        ["RRULE:FREQ=WEEKLY", "VEVENT:x"],
        ["RRULE:FREQ=WEEKLY", "RDATE:99991231T000000Z"],
    ],
)
def test_a_set_google_refuses_is_a_400_at_insert_and_nothing_is_stored(world, rec):
    status, body = api(world, "POST", "calendars/primary/events", weekly(rec))
    assert status == 400, body
    assert "recurrence" in body["error"]["message"].lower()
    status, listed = api(world, "GET", "calendars/primary/events")
    assert status == 200 and listed["items"] == []


def test_editing_one_instance_makes_an_exception_as_google_does(world):
    status, master = api(world, "POST", "calendars/primary/events",
                         weekly(["RRULE:FREQ=WEEKLY;COUNT=3"]))  # fmt: skip
    assert status == 200
    second = instances(world)[1]
    moved = {"start": {"dateTime": "2026-03-10T15:00:00+01:00"},
             "end": {"dateTime": "2026-03-10T16:00:00+01:00"}, "summary": "Sync (moved)"}  # fmt: skip
    status, edited = api(world, "PATCH", f"calendars/primary/events/{second['id']}", moved)
    assert status == 200, edited
    assert edited["id"] == second["id"] and edited["recurringEventId"] == master["id"]
    assert edited["originalStartTime"]["dateTime"] == "2026-03-09T09:00:00+01:00"
    listed = instances(world)
    assert [(i["summary"], i["start"]["dateTime"][:16]) for i in listed] == [
        ("Sync", "2026-03-02T09:00"),
        ("Sync (moved)", "2026-03-10T15:00"),
        ("Sync", "2026-03-16T09:00"),
    ]
    assert [i["id"] for i in instances(world, master["id"])] == [i["id"] for i in listed]
    status, again = api(world, "GET", f"calendars/primary/events/{second['id']}")
    assert status == 200 and again["summary"] == "Sync (moved)"
    # deleting one instance cancels just that one
    third = listed[2]["id"]
    status, _ = api(world, "DELETE", f"calendars/primary/events/{third}")
    assert status == 204
    assert [i["id"] for i in instances(world)] == [listed[0]["id"], second["id"]]
    status, _ = api(world, "DELETE", f"calendars/primary/events/{third}")
    assert status == 410
    # an instance cannot carry a recurrence of its own
    status, _ = api(world, "PATCH", f"calendars/primary/events/{second['id']}",
                    {"recurrence": ["RRULE:FREQ=DAILY"]})  # fmt: skip
    assert status == 400


def test_no_overlap_sees_later_instances_and_edited_ones(app, world):
    status, master = api(world, "POST", "calendars/primary/events",
                         weekly(["RRULE:FREQ=WEEKLY;COUNT=4"]))  # fmt: skip
    assert status == 200
    clash = {"summary": "Dentist", "start": {"dateTime": "2026-03-23T09:30:00+01:00"},
             "end": {"dateTime": "2026-03-23T09:45:00+01:00"}}  # fmt: skip
    status, dentist = api(world, "POST", "calendars/primary/events", clash)
    assert status == 200
    with world_ctx(app, world.id) as ctx:
        out = ops.no_overlap(ctx, {})
    assert not out.passed and dentist["id"] in out.detail["overlapping"][0]
    # moving that instance away clears the clash
    fourth = instances(world)[3]
    assert fourth["recurringEventId"] == master["id"]
    away = {"start": {"dateTime": "2026-03-23T11:00:00+01:00"},
            "end": {"dateTime": "2026-03-23T12:00:00+01:00"}}  # fmt: skip
    status, _ = api(world, "PATCH", f"calendars/primary/events/{fourth['id']}", away)
    assert status == 200
    with world_ctx(app, world.id) as ctx:
        assert ops.no_overlap(ctx, {}).passed


# ---- the property: whatever insert accepts, every listing answers ----------------------

_stamp = st.builds(
    lambda d, h, z: f"202603{d:02d}T{h:02d}0000{'Z' if z else ''}",
    st.integers(1, 31), st.integers(0, 23), st.booleans(),
)  # fmt: skip
_date = st.builds(lambda d: f"202604{d:02d}", st.integers(1, 30))
_tzid = st.sampled_from(["", ";TZID=Europe/Berlin", ";TZID=America/New_York", ";TZID=UTC"])
_values = st.lists(st.one_of(_stamp, _date), min_size=1, max_size=3).map(",".join)
_dated = st.builds(lambda k, t, v: f"{k}{t}:{v}", st.sampled_from(["EXDATE", "RDATE"]), _tzid,
                   _values)  # fmt: skip
_part = st.sampled_from(["COUNT=5", "INTERVAL=2", "BYDAY=MO,TH", "UNTIL=20260420T120000Z",
                         "UNTIL=20260415", "BYMONTHDAY=31", "BYMONTH=2", "BYSETPOS=-1",
                         "WKST=SU", "UNTIL=20260301T000000Z"])  # fmt: skip
_rrule = st.builds(
    lambda f, parts: ";".join([f"RRULE:FREQ={f}", *dict.fromkeys(parts)]),
    st.sampled_from(["DAILY", "WEEKLY", "MONTHLY", "YEARLY"]),
    st.lists(_part, max_size=3),
)  # fmt: skip
_sets = st.lists(st.one_of(_rrule, _dated), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(rec=_sets, zone=st.sampled_from([BERLIN, "America/New_York", "UTC", None]))
def test_listing_never_fails_after_an_accepted_insert(app, rec, zone):
    w = new_world(app)
    body = weekly(rec, zone=zone or BERLIN)
    if zone is None:  # a fixed offset and no timeZone: the set expands in UTC
        body["start"] = {"dateTime": "2026-03-02T09:00:00+01:00"}
        body["end"] = {"dateTime": "2026-03-02T10:00:00+01:00"}
    status, ev = api(w, "POST", "calendars/primary/events", body)
    assert status in (200, 400), ev
    if status == 400:
        return
    for params in ({}, {"singleEvents": "true"}, {"singleEvents": "true", "orderBy": "startTime",
                   "timeMin": "2026-03-01T00:00:00Z", "timeMax": "2026-05-01T00:00:00Z"}):  # fmt: skip
        status, out = api(w, "GET", "calendars/primary/events", **params)
        assert status == 200, (rec, params, out)
    status, inst = api(w, "GET", f"calendars/primary/events/{ev['id']}/instances")
    assert status == 200, inst
    if inst["items"] and inst["items"][0].get("recurringEventId"):
        status, _ = api(w, "GET", f"calendars/primary/events/{inst['items'][0]['id']}")
        assert status == 200
    status, busy = api(w, "POST", "freeBusy", {"timeMin": "2026-03-01T00:00:00Z",
                       "timeMax": "2026-05-01T00:00:00Z", "items": [{"id": "primary"}]})  # fmt: skip
    assert status == 200, busy
