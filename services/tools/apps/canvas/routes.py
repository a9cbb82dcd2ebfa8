"""Canvas REST routes (``/worlds/{world_id}/canvas/api/v1/...``), as the official ``canvasapi``
client calls them.

Arguments come as Canvas takes them: query string, form body or JSON, with Rails' bracket
names (``submission[submission_type]``, ``context_codes[]``) read into nested values. Lists page
with ``page`` / ``per_page`` (10 by default, at most 100) and a ``Link`` header of absolute
``current`` / ``next`` / ``prev`` / ``first`` / ``last`` URLs, which ``canvasapi``'s
``PaginatedList`` follows. Errors are Canvas's ``{"errors": [{"message": ...}]}``; a bad token
answers 401 with ``WWW-Authenticate`` (what makes ``canvasapi`` raise ``InvalidAccessToken``).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from services.tools.apps.canvas import actions as A
from services.tools.apps.canvas import comms as C
from services.tools.apps.canvas import coursework as W
from services.tools.apps.canvas.actions import CanvasError
from services.tools.context import WorldCtx, json_body_doc, rejects
from services.tools.serial import is_http_read, world_route
from shared.errors import APIError

log = logging.getLogger("k3stack.tools.canvas")
PER_PAGE, MAX_PER_PAGE = 10, 100
MAX_KEY_DEPTH = (
    32  # ``a[b][c]...``: deeper is a 400, as a deep JSON body is (services/tools/bounds.py)
)
_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")


class CanvasErrorMessage(BaseModel):
    message: str


class CanvasErrorBody(BaseModel):
    """Canvas's error body, documented in OpenAPI for every Canvas route."""

    errors: list[CanvasErrorMessage]


ERROR_MODEL = CanvasErrorBody


def _render_error(err: CanvasError) -> JSONResponse:
    headers = (
        {"WWW-Authenticate": 'Bearer realm="canvas-lms"'}
        if err.status == 401 and ("access token" in err.message)
        else None
    )
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def to_canvas_error(exc: Exception) -> CanvasError:
    if isinstance(exc, CanvasError):
        return exc
    if isinstance(exc, APIError):
        if exc.status in (401, 403):
            return CanvasError(401, f"Invalid access token. ({exc.message})")
        return CanvasError(exc.status, exc.message)
    if isinstance(exc, RequestValidationError):
        parts = [
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'is invalid')}"
            for e in exc.errors()[:3]
        ]
        return CanvasError(400, "; ".join(parts))
    if isinstance(exc, HTTPException):
        return CanvasError(exc.status_code, str(exc.detail))
    log.exception("unexpected error on a Canvas route")
    return CanvasError(500, "An unexpected error occurred.")


def render(exc: Exception) -> JSONResponse:
    return _render_error(to_canvas_error(exc))


def error_response(status: int, message: str) -> JSONResponse:
    """Canvas's style for failures the tools app catches outside these routes."""
    if status in (401, 403):
        return _render_error(CanvasError(401, f"Invalid access token. ({message})"))
    if status == 404:
        message = f"The specified resource does not exist. ({message})"
    return _render_error(CanvasError(status, message))


def _reads(request: Request) -> bool:
    """GETs only read, except opening a conversation, which marks it read (as Canvas does)."""
    return is_http_read(request) and not re.search(r"/conversations/[^/]+$", request.url.path)


router = APIRouter(
    prefix="/worlds/{world_id}/canvas/api/v1",
    tags=["canvas"],
    route_class=world_route(render, reads=_reads),
)


# -- arguments ---------------------------------------------------------------------------------


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    """Store ``a[b][]=v`` as ``{"a": {"b": [v]}}`` (Rails' parameter nesting)."""
    m = _KEY.match(key)
    if m is None:
        raise CanvasError(400, f"unreadable parameter name {key!r}")
    parts = [m.group(1), *re.findall(r"\[([^\[\]]*)\]", m.group(2))]
    if len(parts) > MAX_KEY_DEPTH:
        raise CanvasError(400, f"parameter {key[:40]!r}... nests more than {MAX_KEY_DEPTH} levels")
    node: Any = out
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        nxt_is_list = not last and parts[i + 1] == ""
        if part == "":
            if not isinstance(node, list):
                raise CanvasError(400, f"parameter {key!r} mixes a list and an object")
            if last:
                node.append(value)
                return
            raise CanvasError(400, f"parameter {key!r}: nesting under [] is not supported")
        if not isinstance(node, dict):
            raise CanvasError(400, f"parameter {key!r} mixes a list and an object")
        if last:
            node[part] = value
        else:
            node = node.setdefault(part, [] if nxt_is_list else {})


class Args:
    """A call's arguments, merged from the query string and the body."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def get(self, *path: str, default: Any = None) -> Any:
        node: Any = self.values
        for p in path:
            if not isinstance(node, dict) or p not in node:
                return default
            node = node[p]
        return node

    def text(self, *path: str, required: bool = False) -> str | None:
        value = self.get(*path)
        if value is None and required:
            raise CanvasError(400, f"{'['.join(path)}{']' * (len(path) - 1)} is required")
        if value is not None and not isinstance(value, str | int | float):
            raise CanvasError(400, f"{path[-1]} must be a string")
        return None if value is None else str(value)

    def strings(self, *path: str) -> list[str]:
        value = self.get(*path)
        if value is None:
            return []
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str | int) for v in items):
            raise CanvasError(400, f"{path[-1]} must be a list of strings")
        return [str(v) for v in items]

    def flag(self, *path: str) -> bool:
        value = self.get(*path)
        return value is True or str(value).lower() in ("1", "true", "yes", "on")

    def number(self, *path: str, default: float) -> float:
        value = self.get(*path)
        if value in (None, ""):
            return default
        try:
            return float(value)
        except (TypeError, ValueError):
            raise CanvasError(400, f"{path[-1]} must be a number") from None


async def canvas_args(request: Request) -> Args:
    values: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        _put(values, key, value)
    raw = await request.body()
    if raw.strip():
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "application/json":
            try:
                body = json.loads(raw)
            except ValueError:
                raise CanvasError(400, "the body is not valid JSON") from None
            if not isinstance(body, dict):
                raise CanvasError(400, "the JSON body must be an object")
            values.update(body)
        elif ctype in ("application/x-www-form-urlencoded", ""):
            for key, value in parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True):
                _put(values, key, value)
        else:
            raise CanvasError(415, f"unsupported content type {ctype!r}: send form or JSON")
    return Args(values)


Params = Annotated[Args, Depends(canvas_args)]


def paged(request: Request, args: Args, items: list[dict[str, Any]]) -> JSONResponse:
    """One page of ``items`` with Canvas's ``Link`` header."""
    try:
        page = int(args.get("page", default=1))
        per_page = int(args.get("per_page", default=PER_PAGE))
    except (TypeError, ValueError):
        raise CanvasError(400, "page and per_page must be integers") from None
    if page < 1 or per_page < 1:
        raise CanvasError(400, "page and per_page must be at least 1")
    per_page = min(per_page, MAX_PER_PAGE)
    last = max(1, -(-len(items) // per_page))
    links = {"current": page, "first": 1, "last": last}
    if page < last:
        links["next"] = page + 1
    if page > 1:
        links["prev"] = page - 1
    header = ",".join(
        f'<{request.url.include_query_params(page=n, per_page=per_page)}>; rel="{rel}"'
        for rel, n in links.items()
    )
    body = items[(page - 1) * per_page : page * per_page]
    return JSONResponse(body, headers={"Link": header})


# -- users and courses -------------------------------------------------------------------------


@router.get("/users/self", operation_id="canvas_getSelf")
def get_self(ctx: WorldCtx) -> dict[str, Any]:
    return A.current_user(ctx)


@router.get("/users/self/profile", operation_id="canvas_getProfile")
def get_profile(ctx: WorldCtx) -> dict[str, Any]:
    return {**A.current_user(ctx), "primary_email": A.current_user(ctx)["email"]}


@router.get("/courses", operation_id="canvas_listCourses")
def list_courses(ctx: WorldCtx, request: Request, args: Params) -> JSONResponse:
    return paged(request, args, A.list_courses(ctx))


@router.get("/courses/{course_id}", operation_id="canvas_getCourse")
def get_course(ctx: WorldCtx, course_id: str) -> dict[str, Any]:
    return A.get_course(ctx, course_id)


@router.get("/courses/{course_id}/users", operation_id="canvas_listCourseUsers")
@router.get("/courses/{course_id}/search_users", operation_id="canvas_searchCourseUsers")
def course_users(ctx: WorldCtx, request: Request, course_id: str, args: Params) -> JSONResponse:
    types = args.strings("enrollment_type")
    return paged(request, args, A.list_users(ctx, course_id, types))


@router.get("/courses/{course_id}/enrollments", operation_id="canvas_listEnrollments")
def enrollments(ctx: WorldCtx, request: Request, course_id: str, args: Params) -> JSONResponse:
    return paged(request, args, A.list_enrollments(ctx, course_id))


# What ``Args.text`` takes for a text argument (a JSON scalar; ``null`` is a missing one).
TEXT = {"type": ["string", "number", "boolean"]}


def _within(name: str, *fields: str) -> dict[str, Any]:
    """A nested argument (``assignment[name]``, sent as JSON ``{"assignment": {...}}``)."""
    return {
        name: {
            "type": "object",
            "required": list(fields),
            "properties": dict.fromkeys(fields, TEXT),
        }
    }


# -- modules -----------------------------------------------------------------------------------


@router.get("/courses/{course_id}/modules", operation_id="canvas_listModules")
def modules(ctx: WorldCtx, request: Request, course_id: str, args: Params) -> JSONResponse:
    return paged(request, args, W.list_modules(ctx, course_id))


@router.post(
    "/courses/{course_id}/modules",
    operation_id="canvas_createModule",
    openapi_extra=json_body_doc(_within("module", "name")),
    responses=rejects("`module[name] is required`: a blank name"),
)
def create_module(ctx: WorldCtx, course_id: str, args: Params) -> dict[str, Any]:
    return W.create_module(ctx, course_id, args.text("module", "name", required=True) or "")


@router.get("/courses/{course_id}/modules/{module_id}/items", operation_id="canvas_listModuleItems")
def module_items(
    ctx: WorldCtx, request: Request, course_id: str, module_id: str, args: Params
) -> JSONResponse:
    return paged(request, args, W.list_module_items(ctx, course_id, module_id))


@router.post(
    "/courses/{course_id}/modules/{module_id}/items",
    operation_id="canvas_createModuleItem",
    openapi_extra=json_body_doc(_within("module_item", "title")),
    responses=rejects(
        "a blank `module_item[title]`, a `module_item[type]` Canvas has not, or a `content_id` it needs missing"
    ),
)
def create_module_item(
    ctx: WorldCtx, course_id: str, module_id: str, args: Params
) -> dict[str, Any]:
    content = args.text("module_item", "content_id")
    return W.add_module_item(
        ctx,
        course_id,
        module_id,
        title=args.text("module_item", "title", required=True) or "",
        type=args.text("module_item", "type") or "Page",
        content_id=int(content) if content and content.isdigit() else None,
    )


# -- assignments and submissions ---------------------------------------------------------------


@router.get("/courses/{course_id}/assignments", operation_id="canvas_listAssignments")
def assignments(ctx: WorldCtx, request: Request, course_id: str, args: Params) -> JSONResponse:
    return paged(request, args, W.list_assignments(ctx, course_id))


@router.post(
    "/courses/{course_id}/assignments",
    operation_id="canvas_createAssignment",
    openapi_extra=json_body_doc(_within("assignment", "name")),
    responses=rejects(
        "a blank `assignment[name]`, unknown `submission_types`, a negative or non-numeric `points_possible`, or a `due_at` that is no ISO 8601 time"
    ),
)
def create_assignment(ctx: WorldCtx, course_id: str, args: Params) -> dict[str, Any]:
    return W.create_assignment(
        ctx,
        course_id,
        name=args.text("assignment", "name", required=True) or "",
        description=args.text("assignment", "description") or "",
        due_at=args.text("assignment", "due_at"),
        points_possible=args.number("assignment", "points_possible", default=100),
        submission_types=args.strings("assignment", "submission_types") or None,
    )


@router.get("/courses/{course_id}/assignments/{assignment_id}", operation_id="canvas_getAssignment")
def get_assignment(ctx: WorldCtx, course_id: str, assignment_id: str) -> dict[str, Any]:
    return W.get_assignment(ctx, course_id, assignment_id)


@router.get(
    "/courses/{course_id}/assignments/{assignment_id}/submissions",
    operation_id="canvas_listSubmissions",
)
def submissions(
    ctx: WorldCtx, request: Request, course_id: str, assignment_id: str, args: Params
) -> JSONResponse:
    return paged(request, args, W.list_submissions(ctx, course_id, assignment_id))


@router.post(
    "/courses/{course_id}/assignments/{assignment_id}/submissions",
    operation_id="canvas_submit",
    openapi_extra=json_body_doc(_within("submission", "submission_type")),
    responses=rejects(
        "a `submission_type` the assignment does not take, or the `body` / `url` it needs missing or malformed"
    ),
)
def submit(ctx: WorldCtx, course_id: str, assignment_id: str, args: Params) -> dict[str, Any]:
    return W.submit(
        ctx,
        course_id,
        assignment_id,
        submission_type=args.text("submission", "submission_type", required=True) or "",
        body=args.text("submission", "body"),
        url=args.text("submission", "url"),
        comment=args.text("comment", "text_comment"),
    )


@router.get(
    "/courses/{course_id}/assignments/{assignment_id}/submissions/{user_id}",
    operation_id="canvas_getSubmission",
)
def get_submission(
    ctx: WorldCtx, course_id: str, assignment_id: str, user_id: str
) -> dict[str, Any]:
    return W.get_submission(ctx, course_id, assignment_id, user_id)


@router.put(
    "/courses/{course_id}/assignments/{assignment_id}/submissions/{user_id}",
    operation_id="canvas_gradeSubmission",
)
def grade(
    ctx: WorldCtx, course_id: str, assignment_id: str, user_id: str, args: Params
) -> dict[str, Any]:
    return W.grade(
        ctx,
        course_id,
        assignment_id,
        user_id,
        posted_grade=args.text("submission", "posted_grade"),
        text_comment=args.text("comment", "text_comment"),
    )


# -- announcements and discussions -------------------------------------------------------------


@router.get("/announcements", operation_id="canvas_listAnnouncements")
def announcements(ctx: WorldCtx, request: Request, args: Params) -> JSONResponse:
    return paged(request, args, C.list_announcements(ctx, args.strings("context_codes")))


@router.get("/courses/{course_id}/discussion_topics", operation_id="canvas_listDiscussionTopics")
def topics(ctx: WorldCtx, request: Request, course_id: str, args: Params) -> JSONResponse:
    only = args.flag("only_announcements")
    return paged(request, args, C.list_topics(ctx, course_id, only_announcements=only))


@router.post(
    "/courses/{course_id}/discussion_topics",
    operation_id="canvas_createDiscussionTopic",
    openapi_extra=json_body_doc({"title": TEXT}),
    responses=rejects("`title is required`: a blank title"),
)
def create_topic(ctx: WorldCtx, course_id: str, args: Params) -> dict[str, Any]:
    return C.create_topic(
        ctx,
        course_id,
        title=args.text("title", required=True) or "",
        message=args.text("message") or "",
        is_announcement=args.flag("is_announcement"),
    )


# -- conversations -----------------------------------------------------------------------------


@router.get("/conversations", operation_id="canvas_listConversations")
def conversations(ctx: WorldCtx, request: Request, args: Params) -> JSONResponse:
    return paged(request, args, C.list_conversations(ctx, args.text("scope")))


@router.post(
    "/conversations",
    operation_id="canvas_createConversation",
    openapi_extra=json_body_doc({"body": TEXT}),
    responses=rejects(
        "a blank `body`, no `recipients` (or only the sender), or a recipient not of the form Canvas takes"
    ),
)
def create_conversation(ctx: WorldCtx, args: Params) -> list[dict[str, Any]]:
    return [
        C.create_conversation(
            ctx,
            recipients=args.strings("recipients"),
            body=args.text("body", required=True) or "",
            subject=args.text("subject") or "",
        )
    ]


@router.get("/conversations/{conversation_id}", operation_id="canvas_getConversation")
def get_conversation(ctx: WorldCtx, conversation_id: str) -> dict[str, Any]:
    return C.get_conversation(ctx, conversation_id)


@router.post(
    "/conversations/{conversation_id}/add_message",
    operation_id="canvas_addMessage",
    openapi_extra=json_body_doc({"body": TEXT}),
    responses=rejects("a blank `body`, or an author not in the conversation"),
)
def add_message(ctx: WorldCtx, conversation_id: str, args: Params) -> dict[str, Any]:
    return C.add_message(ctx, conversation_id, args.text("body", required=True) or "")


# -- calendar events ---------------------------------------------------------------------------


@router.get("/calendar_events", operation_id="canvas_listCalendarEvents")
def calendar_events(ctx: WorldCtx, request: Request, args: Params) -> JSONResponse:
    events = C.list_calendar_events(
        ctx, args.strings("context_codes"), args.text("start_date"), args.text("end_date")
    )
    return paged(request, args, events)


@router.post(
    "/calendar_events",
    operation_id="canvas_createCalendarEvent",
    openapi_extra=json_body_doc(_within("calendar_event", "context_code", "title", "start_at")),
    responses=rejects(
        "a `context_code` other than `course_<id>` / `user_<your id>`, a blank `title`, a `start_at` / `end_at` that is no ISO 8601 time, or an `end_at` before `start_at`"
    ),
)
def create_calendar_event(ctx: WorldCtx, args: Params) -> dict[str, Any]:
    return C.create_calendar_event(
        ctx,
        context_code=args.text("calendar_event", "context_code", required=True) or "",
        title=args.text("calendar_event", "title", required=True) or "",
        start_at=args.text("calendar_event", "start_at", required=True) or "",
        end_at=args.text("calendar_event", "end_at"),
        description=args.text("calendar_event", "description") or "",
        location_name=args.text("calendar_event", "location_name") or "",
    )
