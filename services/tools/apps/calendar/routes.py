"""Google Calendar v3 routes: ``/worlds/{world_id}/calendar/v3/...``.

The paths are the discovery document's (``calendars/{calendarId}/events``, ``freeBusy``,
``users/me/calendarList``) under ``calendar/v3/``, so ``googleapiclient.discovery.build(
"calendar", "v3", static_discovery=True, credentials=Credentials(token=<world token>),
client_options={"api_endpoint": "<tools>/worlds/<id>/calendar/v3/"})`` works unchanged (an
``api_endpoint`` replaces the discovery's root URL *and* service path, as with the real API).
Errors are Google's ``{"error": {...}}`` bodies.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from services.tools.app_common import google_error_model, json_object_body
from services.tools.apps.calendar import actions as A
from services.tools.apps.calendar.errors import (
    GoogleError,
    GoogleRoute,
    bad_request,
    to_google_error,
)
from services.tools.context import WorldContext, WorldCtx, json_body_doc, rejects

router = APIRouter(
    prefix="/worlds/{world_id}/calendar/v3", tags=["calendar"], route_class=GoogleRoute
)


def calendar_context(ctx: WorldCtx, request: Request) -> WorldContext:
    request.state.world_ctx = ctx
    return ctx


CalCtx = Annotated[WorldContext, Depends(calendar_context)]


ERROR_MODEL = google_error_model("Calendar")


def error_response(status: int, message: str) -> JSONResponse:
    """Google's style for failures the tools app catches outside these routes (unknown paths)."""
    from shared.errors import APIError

    if status == 404:
        err = GoogleError(404, "notFound", "Not Found")
    elif status == 405:
        err = GoogleError(405, "httpMethodNotAllowed", message)
    else:
        err = to_google_error(APIError(status, "error", message))
    return JSONResponse(err.body(), status_code=err.code)


json_body = json_object_body(
    lambda: GoogleError(400, "parseError", "Parse Error"),
    lambda: bad_request("The request body must be a JSON object."),
)


Body = Annotated[dict[str, Any], Depends(json_body)]


PAGE_TOKEN = r"^(p[0-9]+)?$"  # the tokens actions._page hands out (``p<offset>``)
RFC3339 = {"format": "date-time"}  # what actions.parse_time reads (an offset required)


def _bool(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


# --------------------------------------------------------------------------- calendars


@router.get("/users/me/calendarList", operation_id="calendar_calendarList_list")
def calendar_list(
    ctx: CalCtx,
    page_token: Annotated[str | None, Query(alias="pageToken", pattern=PAGE_TOKEN)] = None,
    max_results: Annotated[int | None, Query(alias="maxResults", ge=1)] = None,
) -> dict[str, Any]:
    return A.calendar_list(ctx, page_token=page_token, max_results=max_results)


@router.get("/users/me/calendarList/{calendar_id}", operation_id="calendar_calendarList_get")
def calendar_list_get(ctx: CalCtx, calendar_id: str) -> dict[str, Any]:
    return A.calendar_list_get(ctx, calendar_id=calendar_id)


_NONEMPTY = {"type": "string", "minLength": 1}


@router.post(
    "/users/me/calendarList",
    operation_id="calendar_calendarList_insert",
    openapi_extra=json_body_doc({"id": _NONEMPTY}),
)
def calendar_list_insert(ctx: CalCtx, body: Body) -> dict[str, Any]:
    cid = body.get("id")
    if not isinstance(cid, str) or not cid:
        raise bad_request("Required: id", "required")
    return A.calendar_list_insert(ctx, calendar_id=cid)


@router.delete(
    "/users/me/calendarList/{calendar_id}",
    status_code=204,
    operation_id="calendar_calendarList_delete",
)
def calendar_list_delete(ctx: CalCtx, calendar_id: str) -> Response:
    A.calendar_list_delete(ctx, calendar_id=calendar_id)
    return Response(status_code=204)


@router.post(
    "/calendars",
    operation_id="calendar_calendars_insert",
    openapi_extra=json_body_doc({"summary": _NONEMPTY}),
    responses=rejects("`Invalid time zone`: a `timeZone` that names no IANA zone"),
)
def insert_calendar(ctx: CalCtx, body: Body) -> dict[str, Any]:
    summary = body.get("summary")
    if not isinstance(summary, str):
        raise bad_request("Missing title.", "required")
    return A.insert_calendar(
        ctx,
        summary=summary,
        description=str(body.get("description") or ""),
        time_zone=body.get("timeZone"),
    )


@router.get("/calendars/{calendar_id}", operation_id="calendar_calendars_get")
def get_calendar(ctx: CalCtx, calendar_id: str) -> dict[str, Any]:
    return A.get_calendar(ctx, calendar_id=calendar_id)


@router.patch("/calendars/{calendar_id}", operation_id="calendar_calendars_patch")
def patch_calendar(ctx: CalCtx, calendar_id: str, body: Body) -> dict[str, Any]:
    return A.patch_calendar(ctx, calendar_id=calendar_id, body=body)


@router.put("/calendars/{calendar_id}", operation_id="calendar_calendars_update")
def update_calendar(ctx: CalCtx, calendar_id: str, body: Body) -> dict[str, Any]:
    return A.patch_calendar(ctx, calendar_id=calendar_id, body=body)


@router.delete(
    "/calendars/{calendar_id}", status_code=204, operation_id="calendar_calendars_delete"
)
def delete_calendar(ctx: CalCtx, calendar_id: str) -> Response:
    A.delete_calendar(ctx, calendar_id=calendar_id)
    return Response(status_code=204)


# --------------------------------------------------------------------------- events


@router.get("/calendars/{calendar_id}/events", operation_id="calendar_events_list")
def list_events(
    ctx: CalCtx,
    calendar_id: str,
    time_min: Annotated[str | None, Query(alias="timeMin", json_schema_extra=RFC3339)] = None,
    time_max: Annotated[str | None, Query(alias="timeMax", json_schema_extra=RFC3339)] = None,
    q: str | None = None,
    single_events: Annotated[str | None, Query(alias="singleEvents")] = None,
    order_by: Annotated[str | None, Query(alias="orderBy")] = None,
    page_token: Annotated[str | None, Query(alias="pageToken", pattern=PAGE_TOKEN)] = None,
    max_results: Annotated[int | None, Query(alias="maxResults", ge=1)] = None,
    show_deleted: Annotated[str | None, Query(alias="showDeleted")] = None,
    updated_min: Annotated[str | None, Query(alias="updatedMin", json_schema_extra=RFC3339)] = None,
) -> dict[str, Any]:
    return A.list_events(
        ctx,
        calendar_id=calendar_id,
        time_min=time_min,
        time_max=time_max,
        q=q,
        single_events=_bool(single_events),
        order_by=order_by,
        page_token=page_token,
        max_results=max_results,
        show_deleted=_bool(show_deleted),
        updated_min=updated_min,
    )


@router.post("/calendars/{calendar_id}/events", operation_id="calendar_events_insert")
def insert_event(
    ctx: CalCtx,
    calendar_id: str,
    body: Body,
    send_updates: Annotated[str | None, Query(alias="sendUpdates")] = None,
) -> dict[str, Any]:
    return A.insert_event(ctx, calendar_id=calendar_id, body=body, send_updates=send_updates)


@router.get("/calendars/{calendar_id}/events/{event_id}", operation_id="calendar_events_get")
def get_event(ctx: CalCtx, calendar_id: str, event_id: str) -> dict[str, Any]:
    return A.get_event(ctx, calendar_id=calendar_id, event_id=event_id)


@router.get(
    "/calendars/{calendar_id}/events/{event_id}/instances", operation_id="calendar_events_instances"
)
def event_instances(
    ctx: CalCtx,
    calendar_id: str,
    event_id: str,
    time_min: Annotated[str | None, Query(alias="timeMin", json_schema_extra=RFC3339)] = None,
    time_max: Annotated[str | None, Query(alias="timeMax", json_schema_extra=RFC3339)] = None,
    page_token: Annotated[str | None, Query(alias="pageToken", pattern=PAGE_TOKEN)] = None,
    max_results: Annotated[int | None, Query(alias="maxResults", ge=1)] = None,
) -> dict[str, Any]:
    return A.event_instances(
        ctx,
        calendar_id=calendar_id,
        event_id=event_id,
        time_min=time_min,
        time_max=time_max,
        page_token=page_token,
        max_results=max_results,
    )


@router.patch("/calendars/{calendar_id}/events/{event_id}", operation_id="calendar_events_patch")
def patch_event(
    ctx: CalCtx,
    calendar_id: str,
    event_id: str,
    body: Body,
    send_updates: Annotated[str | None, Query(alias="sendUpdates")] = None,
) -> dict[str, Any]:
    return A.patch_event(
        ctx, calendar_id=calendar_id, event_id=event_id, body=body, send_updates=send_updates
    )


@router.put("/calendars/{calendar_id}/events/{event_id}", operation_id="calendar_events_update")
def update_event(
    ctx: CalCtx,
    calendar_id: str,
    event_id: str,
    body: Body,
    send_updates: Annotated[str | None, Query(alias="sendUpdates")] = None,
) -> dict[str, Any]:
    return A.update_event(
        ctx, calendar_id=calendar_id, event_id=event_id, body=body, send_updates=send_updates
    )


@router.delete(
    "/calendars/{calendar_id}/events/{event_id}",
    status_code=204,
    operation_id="calendar_events_delete",
)
def delete_event(
    ctx: CalCtx,
    calendar_id: str,
    event_id: str,
    send_updates: Annotated[str | None, Query(alias="sendUpdates")] = None,
) -> Response:
    A.delete_event(ctx, calendar_id=calendar_id, event_id=event_id, send_updates=send_updates)
    return Response(status_code=204)


@router.post("/calendars/{calendar_id}/events/{event_id}/move", operation_id="calendar_events_move")
def move_event(
    ctx: CalCtx,
    calendar_id: str,
    event_id: str,
    destination: Annotated[str, Query(min_length=1)],
) -> dict[str, Any]:
    return A.move_event(ctx, calendar_id=calendar_id, event_id=event_id, destination=destination)


@router.post(
    "/freeBusy",
    operation_id="calendar_freebusy_query",
    openapi_extra=json_body_doc(
        {
            "timeMin": {"type": "string", "format": "date-time"},
            "timeMax": {"type": "string", "format": "date-time"},
            "items": {
                "type": "array",
                "items": {"type": "object", "required": ["id"], "properties": {"id": _NONEMPTY}},
            },
        }
    ),
    responses=rejects(
        "`timeRangeEmpty`: `timeMax` not after `timeMin`; `Invalid time zone`: a `timeZone` "
        "naming no IANA zone; `Bad Request`: a time outside what RFC 3339 parsers read"
    ),
)
def free_busy(ctx: CalCtx, body: Body) -> dict[str, Any]:
    return A.free_busy(
        ctx,
        time_min=body.get("timeMin"),
        time_max=body.get("timeMax"),
        items=body.get("items"),
        time_zone=body.get("timeZone"),
    )
