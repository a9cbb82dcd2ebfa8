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

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from services.tools.apps.canvas import actions as A
from services.tools.apps.canvas import comms as C
from services.tools.apps.canvas import coursework as W
from services.tools.apps.canvas.args import Params, paged
from services.tools.apps.canvas.errors import PREFIX, CanvasRoute
from services.tools.context import WorldCtx, json_body_doc, rejects

router = APIRouter(prefix=PREFIX, tags=["canvas"], route_class=CanvasRoute)


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
