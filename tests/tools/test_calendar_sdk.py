"""Contract: ``google-api-python-client`` Calendar v3 (bundled static discovery document and an
``api_endpoint`` override) works unchanged against the mock Calendar, over real HTTP."""

from __future__ import annotations

import pytest
from google.oauth2.credentials import Credentials
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

from services.tools.apps.calendar import actions as cal
from tests.tools.apps_conftest import create_world, service_server, world_ctx

ME = "ava@acme.test"
BOB = "bob@acme.test"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with service_server(tmp_path_factory.mktemp("calendar-sdk")) as (app, url):
        yield app, url


@pytest.fixture
def world(server):
    app, url = server
    wid, token = create_world(url)
    with world_ctx(app, wid) as ctx:
        cal.setup_calendar(ctx, agent_email=ME, agent_name="Ava", time_zone="America/New_York")
        cal.create_calendar(ctx, owner_email=BOB, summary=BOB, primary=True)
    service = build(
        "calendar",
        "v3",
        credentials=Credentials(token=token),
        static_discovery=True,
        cache_discovery=False,
        client_options={"api_endpoint": f"{url}/worlds/{wid}/calendar/v3/"},
    )
    return app, wid, service


def test_events_crud_paging_and_freebusy(world):
    _, _, svc = world
    cals = svc.calendarList().list().execute()["items"]
    assert cals[0]["id"] == ME and cals[0]["primary"]
    for day in range(2, 7):
        svc.events().insert(
            calendarId="primary",
            sendUpdates="all",
            body={
                "summary": f"Review {day}",
                "start": {"dateTime": f"2026-03-0{day}T09:00:00", "timeZone": "America/New_York"},
                "end": {"dateTime": f"2026-03-0{day}T10:00:00", "timeZone": "America/New_York"},
                "attendees": [{"email": BOB}],
            },
        ).execute()
    request = svc.events().list(
        calendarId="primary",
        timeMin="2026-03-03T00:00:00Z",
        singleEvents=True,
        orderBy="startTime",
        maxResults=2,
    )
    seen = []
    while request is not None:
        page = request.execute()
        seen += [e["summary"] for e in page["items"]]
        request = svc.events().list_next(request, page)
    assert seen == [f"Review {d}" for d in range(3, 7)]
    first = svc.events().list(calendarId="primary", q="review 2").execute()["items"][0]
    assert first["attendees"] == [{"email": BOB, "responseStatus": "needsAction"}]
    moved = (
        svc.events()
        .patch(
            calendarId="primary",
            eventId=first["id"],
            body={
                "start": {"dateTime": "2026-03-02T11:00:00-05:00"},
                "end": {"dateTime": "2026-03-02T12:00:00-05:00"},
            },
        )
        .execute()
    )
    assert moved["sequence"] == 1
    got = svc.events().get(calendarId="primary", eventId=first["id"]).execute()
    assert got["start"]["dateTime"] == "2026-03-02T11:00:00-05:00"
    fb = (
        svc.freebusy()
        .query(
            body={
                "timeMin": "2026-03-02T00:00:00Z",
                "timeMax": "2026-03-03T00:00:00Z",
                "items": [{"id": "primary"}, {"id": BOB}],
            }
        )
        .execute()
    )
    assert fb["calendars"]["primary"]["busy"] == [
        {"start": "2026-03-02T16:00:00.000Z", "end": "2026-03-02T17:00:00.000Z"}
    ]
    assert fb["calendars"][BOB]["busy"] == fb["calendars"]["primary"]["busy"]
    assert svc.events().delete(calendarId="primary", eventId=first["id"]).execute() == ""
    with pytest.raises(HttpError) as err:
        svc.events().delete(calendarId="primary", eventId=first["id"]).execute()
    assert err.value.resp.status == 410


def test_invitation_answer_and_errors(world):
    app, wid, svc = world
    with world_ctx(app, wid) as ctx:
        inv = cal.insert_event(
            ctx,
            calendar_id="primary",
            as_email=BOB,
            body={
                "summary": "Offer call",
                "start": {"dateTime": "2026-03-04T15:00:00Z"},
                "end": {"dateTime": "2026-03-04T15:30:00Z"},
                "attendees": [{"email": ME}],
            },
        )
    svc.events().patch(
        calendarId="primary",
        eventId=inv["id"],
        body={"attendees": [{"email": ME, "responseStatus": "declined"}]},
    ).execute()
    seen = svc.events().get(calendarId="primary", eventId=inv["id"]).execute()
    assert seen["attendees"][0] == {"email": ME, "responseStatus": "declined", "self": True}
    new_cal = svc.calendars().insert(body={"summary": "Hiring"}).execute()
    assert svc.calendars().get(calendarId=new_cal["id"]).execute()["summary"] == "Hiring"
    mine = (
        svc.events()
        .insert(
            calendarId="primary",
            body={
                "summary": "Panel",
                "start": {"date": "2026-03-09"},
                "end": {"date": "2026-03-10"},
            },
        )
        .execute()
    )
    moved = (
        svc.events()
        .move(calendarId="primary", eventId=mine["id"], destination=new_cal["id"])
        .execute()
    )
    assert [e["id"] for e in svc.events().list(calendarId=new_cal["id"]).execute()["items"]] == [
        moved["id"]
    ]
    svc.calendarList().insert(body={"id": BOB}).execute()
    assert BOB in [c["id"] for c in svc.calendarList().list().execute()["items"]]
    svc.calendarList().delete(calendarId=BOB).execute()
    assert BOB not in [c["id"] for c in svc.calendarList().list().execute()["items"]]
    with pytest.raises(HttpError) as err:
        svc.events().get(calendarId="primary", eventId="doesnotexist").execute()
    assert err.value.resp.status == 404 and err.value.reason == "Not Found"
    with pytest.raises(HttpError) as err:
        svc.events().insert(calendarId="primary", body={"summary": "no time"}).execute()
    assert err.value.resp.status == 400
    with pytest.raises(HttpError) as err:
        svc.events().list(calendarId="primary", orderBy="startTime").execute()
    assert err.value.resp.status == 400
