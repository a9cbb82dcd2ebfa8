"""Canvas REST routes beyond the core ones (:mod:`routes`, which mounts them): what ``canvasapi`` 3.6.0 calls for
``assignment.edit``, ``submissions_bulk_update``, assignment groups, a course's submissions
across assignments, users by id (profile, courses, assignments), upcoming events, discussion
entries, tabs, pages, files and quizzes. Same arguments, paging and errors as :mod:`routes`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from services.tools.apps.canvas import extras as X
from services.tools.apps.canvas.actions import CanvasError
from services.tools.apps.canvas.args import Params, paged
from services.tools.apps.canvas.errors import PREFIX, CanvasRoute
from services.tools.context import WorldCtx, json_body_doc, rejects

extra_router = APIRouter(prefix=PREFIX, tags=["canvas"], route_class=CanvasRoute)
r = extra_router


@r.put(
    "/courses/{course_id}/assignments/{assignment_id}",
    operation_id="canvas_editAssignment",
    openapi_extra=json_body_doc({}, assignment={"type": "object"}),
    responses=rejects(
        "a blank `assignment[name]`, a negative or non-numeric `points_possible`, or a `due_at` that is no ISO 8601 time"
    ),
)
def edit_assignment(
    ctx: WorldCtx, course_id: str, assignment_id: str, args: Params
) -> dict[str, Any]:
    changes = args.get("assignment", default={})
    if not isinstance(changes, dict):
        raise CanvasError(400, "assignment must hold the fields to change (assignment[name], ...)")
    return X.edit_assignment(ctx, course_id, assignment_id, changes)


@r.post(
    "/courses/{course_id}/assignments/{assignment_id}/submissions/update_grades",
    operation_id="canvas_updateGrades",
    openapi_extra=json_body_doc({"grade_data": {"type": "object"}}),
    responses=rejects("no `grade_data`, or a `posted_grade` that is no grade"),
)
def update_grades(
    ctx: WorldCtx, course_id: str, assignment_id: str, args: Params
) -> dict[str, Any]:
    return X.bulk_grade(ctx, course_id, assignment_id, args.get("grade_data", default={}))


@r.get("/courses/{course_id}/assignment_groups", operation_id="canvas_listAssignmentGroups")
def assignment_groups(
    ctx: WorldCtx, request: Request, course_id: str, args: Params
) -> JSONResponse:
    full = "assignments" in args.strings("include")
    return paged(request, args, X.assignment_groups(ctx, course_id, full))


@r.get(
    "/courses/{course_id}/assignment_groups/{group_id}", operation_id="canvas_getAssignmentGroup"
)
def assignment_group(ctx: WorldCtx, course_id: str, group_id: str, args: Params) -> dict[str, Any]:
    full = "assignments" in args.strings("include")
    return X.assignment_group(ctx, course_id, group_id, full)


@r.get("/courses/{course_id}/students/submissions", operation_id="canvas_listCourseSubmissions")
def course_submissions(
    ctx: WorldCtx, request: Request, course_id: str, args: Params
) -> JSONResponse:
    found = X.course_submissions(
        ctx, course_id, args.strings("student_ids"), args.strings("assignment_ids")
    )
    return paged(request, args, found)


@r.get("/users/self/upcoming_events", operation_id="canvas_upcomingEvents")
def upcoming_events(ctx: WorldCtx) -> list[dict[str, Any]]:
    return X.upcoming_events(ctx)


@r.get("/users/{user_id}", operation_id="canvas_getUser")
def get_user(ctx: WorldCtx, user_id: str) -> dict[str, Any]:
    return X.get_user(ctx, user_id)


@r.get("/users/{user_id}/profile", operation_id="canvas_getUserProfile")
def user_profile(ctx: WorldCtx, user_id: str) -> dict[str, Any]:
    return X.user_profile(ctx, user_id)


@r.get("/users/{user_id}/courses", operation_id="canvas_listUserCourses")
def user_courses(ctx: WorldCtx, request: Request, user_id: str, args: Params) -> JSONResponse:
    return paged(request, args, X.user_courses(ctx, user_id))


@r.get(
    "/users/{user_id}/courses/{course_id}/assignments", operation_id="canvas_listUserAssignments"
)
def user_assignments(
    ctx: WorldCtx, request: Request, user_id: str, course_id: str, args: Params
) -> JSONResponse:
    return paged(request, args, X.user_assignments(ctx, user_id, course_id))


@r.get(
    "/courses/{course_id}/discussion_topics/{topic_id}", operation_id="canvas_getDiscussionTopic"
)
def get_topic(ctx: WorldCtx, course_id: str, topic_id: str) -> dict[str, Any]:
    return X.get_topic(ctx, course_id, topic_id)


@r.get(
    "/courses/{course_id}/discussion_topics/{topic_id}/entries",
    operation_id="canvas_listTopicEntries",
)
def topic_entries(
    ctx: WorldCtx, request: Request, course_id: str, topic_id: str, args: Params
) -> JSONResponse:
    return paged(request, args, X.topic_entries(ctx, course_id, topic_id))


@r.get("/courses/{course_id}/tabs", operation_id="canvas_listTabs")
def tabs(ctx: WorldCtx, course_id: str) -> list[dict[str, Any]]:
    return X.tabs(ctx, course_id)


def _empty(kind: str) -> None:
    def listing(ctx: WorldCtx, request: Request, course_id: str, args: Params) -> JSONResponse:
        return paged(request, args, X.empty_listing(ctx, course_id))

    r.add_api_route(
        f"/courses/{{course_id}}/{kind}",
        listing,
        methods=["GET"],
        operation_id=f"canvas_list{kind.capitalize()}",
        summary=f"Canvas: a course's {kind} (none here)",
    )


for _kind in ("pages", "files", "quizzes"):
    _empty(_kind)
