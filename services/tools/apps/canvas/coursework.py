"""Canvas coursework: modules and their items, assignments, submissions and grades.

Apart from :mod:`actions` (users, courses, enrollments) because a course's work has its own
rules: a student submits and sees only its own submission, staff see and grade everyone's, a
grade is points, a percentage or a letter of the assignment's points, and a submission after
``due_at`` on the world clock is late.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.tools.apps.canvas.actions import (
    SUBMISSION_TYPES,
    CanvasError,
    CanvasObject,
    _all,
    _course,
    _get,
    _iso,
    _new,
    _record,
    _staff,
    _submission_row,
    _touch,
    _user_id,
    agent_id,
    parse_time,
    role_in,
)
from services.tools.context import WorldContext

LETTERS = {"A": 95.0, "B": 85.0, "C": 75.0, "D": 65.0, "F": 50.0}


# -- modules -----------------------------------------------------------------------------------


def module_json(row: CanvasObject) -> dict[str, Any]:
    return {
        "id": row.id,
        "course_id": row.course_id,
        "name": row.data["name"],
        "position": row.data["position"],
        "published": True,
        "items_count": row.data.get("items_count", 0),
    }


def create_module(ctx: WorldContext, course_id: Any, name: str) -> dict[str, Any]:
    course = _course(ctx, course_id)
    _staff(ctx, course)
    if not name.strip():
        raise CanvasError(400, "module[name] is required")
    position = len(_all(ctx, "module", course.id)) + 1
    row = _new(ctx, "module", course.id, {"name": name, "position": position})
    _record(ctx, "modules.create", {"course_id": course.id, "id": row.id, "text": name})
    return module_json(row)


def list_modules(ctx: WorldContext, course_id: Any) -> list[dict[str, Any]]:
    course = _course(ctx, course_id)
    return [module_json(m) for m in _all(ctx, "module", course.id)]


def add_module_item(
    ctx: WorldContext,
    course_id: Any,
    module_id: Any,
    title: str,
    type: str = "Page",
    content_id: int | None = None,
) -> dict[str, Any]:
    course = _course(ctx, course_id)
    _staff(ctx, course)
    module = _get(ctx, "module", module_id, course.id)
    if type not in ("Page", "Assignment", "File", "Discussion", "ExternalUrl", "SubHeader"):
        raise CanvasError(400, f"module_item[type] {type!r} is not a Canvas module item type")
    if type == "Assignment":
        _get(ctx, "assignment", content_id, course.id)
    _touch(module, items_count=module.data.get("items_count", 0) + 1)
    row = _new(
        ctx,
        "module_item",
        course.id,
        {
            "module_id": module.id,
            "title": title,
            "type": type,
            "content_id": content_id,
            "position": module.data["items_count"],
        },
    )
    return module_item_json(row)


def module_item_json(row: CanvasObject) -> dict[str, Any]:
    d = row.data
    return {
        "id": row.id,
        "module_id": d["module_id"],
        "title": d["title"],
        "type": d["type"],
        "content_id": d["content_id"],
        "position": d["position"],
        "indent": 0,
    }


def list_module_items(ctx: WorldContext, course_id: Any, module_id: Any) -> list[dict[str, Any]]:
    course = _course(ctx, course_id)
    module = _get(ctx, "module", module_id, course.id)
    rows = [r for r in _all(ctx, "module_item", course.id) if r.data["module_id"] == module.id]
    return [module_item_json(r) for r in rows]


# -- assignments -------------------------------------------------------------------------------


def assignment_json(ctx: WorldContext, row: CanvasObject) -> dict[str, Any]:
    d = row.data
    out = {
        "id": row.id,
        "course_id": row.course_id,
        "name": d["name"],
        "description": d.get("description", ""),
        "due_at": d.get("due_at"),
        "points_possible": d.get("points_possible", 0),
        "submission_types": d.get("submission_types", ["online_text_entry"]),
        "published": True,
        "grading_type": "points",
        "html_url": f"/courses/{row.course_id}/assignments/{row.id}",
    }
    if role_in(ctx, row.course_id or 0) == "student":
        sub = _submission_row(ctx, row, agent_id(ctx))
        out["has_submitted_submissions"] = bool(sub and sub.data.get("submitted_at"))
    return out


def create_assignment(
    ctx: WorldContext,
    course_id: Any,
    name: str,
    description: str = "",
    due_at: str | None = None,
    points_possible: float = 100,
    submission_types: list[str] | None = None,
) -> dict[str, Any]:
    course = _course(ctx, course_id)
    _staff(ctx, course)
    if not name.strip():
        raise CanvasError(400, "assignment[name] is required")
    types = submission_types or ["online_text_entry"]
    bad = [t for t in types if t not in SUBMISSION_TYPES]
    if bad:
        raise CanvasError(400, f"assignment[submission_types]: unknown {', '.join(bad)}")
    if float(points_possible) < 0:
        raise CanvasError(400, "assignment[points_possible] must not be negative")
    row = _new(
        ctx,
        "assignment",
        course.id,
        {
            "name": name,
            "description": description,
            "due_at": parse_time(due_at, "assignment[due_at]"),
            "points_possible": float(points_possible),
            "submission_types": types,
        },
    )
    _record(ctx, "assignments.create", {"course_id": course.id, "id": row.id, "text": name})
    return assignment_json(ctx, row)


def list_assignments(ctx: WorldContext, course_id: Any) -> list[dict[str, Any]]:
    course = _course(ctx, course_id)
    return [assignment_json(ctx, a) for a in _all(ctx, "assignment", course.id)]


def get_assignment(ctx: WorldContext, course_id: Any, assignment_id: Any) -> dict[str, Any]:
    course = _course(ctx, course_id)
    return assignment_json(ctx, _get(ctx, "assignment", assignment_id, course.id))


# -- submissions -------------------------------------------------------------------------------


def submission_json(
    row: CanvasObject | None, assignment: CanvasObject, user_id: int
) -> dict[str, Any]:
    d = row.data if row is not None else {}
    return {
        "id": row.id if row is not None else None,
        "assignment_id": assignment.id,
        "course_id": assignment.course_id,
        "user_id": user_id,
        "submission_type": d.get("submission_type"),
        "body": d.get("body"),
        "url": d.get("url"),
        "submitted_at": d.get("submitted_at"),
        "attempt": d.get("attempt"),
        "score": d.get("score"),
        "grade": d.get("grade"),
        "graded_at": d.get("graded_at"),
        "workflow_state": d.get("workflow_state", "unsubmitted"),
        "late": bool(d.get("late")),
        "submission_comments": d.get("comments", []),
    }


def submit(
    ctx: WorldContext,
    course_id: Any,
    assignment_id: Any,
    submission_type: str,
    body: str | None = None,
    url: str | None = None,
    user_id: int | None = None,
    comment: str | None = None,
) -> dict[str, Any]:
    """Submit as the agent (a student of the course) or, for the scenario, as ``user_id``."""
    course = _course(ctx, course_id)
    a = _get(ctx, "assignment", assignment_id, course.id)
    uid = agent_id(ctx) if user_id is None or ctx.actor == "agent" else int(user_id)
    if role_in(ctx, course.id, uid) != "student":
        raise CanvasError(401, "user not authorized to perform that action")
    if submission_type not in a.data.get("submission_types", []):
        raise CanvasError(
            400,
            f"submission[submission_type] {submission_type!r} is not allowed here "
            f"(allowed: {', '.join(a.data.get('submission_types', []))})",
        )
    if submission_type == "online_text_entry" and not (body or "").strip():
        raise CanvasError(400, "submission[body] is required for online_text_entry")
    if submission_type == "online_url" and not (url or "").startswith(("http://", "https://")):
        raise CanvasError(400, "submission[url] must be an http(s) URL for online_url")
    row = _submission_row(ctx, a, uid)
    due = a.data.get("due_at")
    late = due is not None and ctx.now > datetime.fromisoformat(due.replace("Z", "+00:00"))
    fields = {
        "submission_type": submission_type,
        "body": body,
        "url": url,
        "submitted_at": _iso(ctx.now),
        "workflow_state": "submitted",
        "late": late,
        "score": None,
        "grade": None,
    }
    if row is None:
        fields.update(assignment_id=a.id, user_id=uid, attempt=1, comments=[])
        row = _new(ctx, "submission", course.id, fields)
    else:
        _touch(row, **fields, attempt=(row.data.get("attempt") or 0) + 1)
    if comment:
        _add_comment(ctx, row, uid, comment)
    _record(
        ctx,
        "submissions.create",
        {
            "course_id": course.id,
            "course_code": course.data["course_code"],
            "assignment_id": a.id,
            "assignment": a.data["name"],
            "user_id": uid,
            "late": late,
            "text": body or url or "",
        },
    )
    return submission_json(row, a, uid)


def _add_comment(ctx: WorldContext, row: CanvasObject, author: int, text: str) -> None:
    author_row = _get(ctx, "user", author)
    comments = [
        *row.data.get("comments", []),
        {
            "id": len(row.data.get("comments", [])) + 1,
            "author_id": author,
            "author_name": author_row.data["name"],
            "comment": text,
            "created_at": _iso(ctx.now),
        },
    ]
    _touch(row, comments=comments)


def list_submissions(ctx: WorldContext, course_id: Any, assignment_id: Any) -> list[dict[str, Any]]:
    """Staff see every submitted or graded submission; a student only its own."""
    course = _course(ctx, course_id)
    a = _get(ctx, "assignment", assignment_id, course.id)
    rows = [s for s in _all(ctx, "submission", course.id) if s.data["assignment_id"] == a.id]
    if ctx.actor == "agent" and role_in(ctx, course.id) not in ("ta", "teacher"):
        rows = [s for s in rows if s.data["user_id"] == agent_id(ctx)]
    return [submission_json(s, a, s.data["user_id"]) for s in rows]


def get_submission(
    ctx: WorldContext, course_id: Any, assignment_id: Any, user_id: Any = "self"
) -> dict[str, Any]:
    course = _course(ctx, course_id)
    a = _get(ctx, "assignment", assignment_id, course.id)
    uid = _user_id(ctx, user_id)
    if (
        ctx.actor == "agent"
        and uid != agent_id(ctx)
        and role_in(ctx, course.id) not in ("ta", "teacher")
    ):
        raise CanvasError(401, "user not authorized to perform that action")
    return submission_json(_submission_row(ctx, a, uid), a, uid)


def _score(grade: str, points: float) -> float:
    text = grade.strip()
    try:
        if text.endswith("%"):
            value = float(text[:-1]) * points / 100
        elif text.upper() in LETTERS:
            value = LETTERS[text.upper()] * points / 100
        else:
            value = float(text)
    except ValueError:
        raise CanvasError(400, f"submission[posted_grade] {grade!r} is not a grade") from None
    if value < 0:
        raise CanvasError(400, "submission[posted_grade] must not be negative")
    return round(value, 2)


def grade(
    ctx: WorldContext,
    course_id: Any,
    assignment_id: Any,
    user_id: Any,
    posted_grade: str | None = None,
    text_comment: str | None = None,
) -> dict[str, Any]:
    """Grade and/or comment on a student's submission (staff only), as ``PUT .../submissions/:user``."""
    course = _course(ctx, course_id)
    _staff(ctx, course)
    a = _get(ctx, "assignment", assignment_id, course.id)
    uid = _user_id(ctx, user_id)
    if role_in(ctx, course.id, uid) != "student":
        raise CanvasError(404, f"The specified resource does not exist. (student {user_id})")
    row = _submission_row(ctx, a, uid)
    if row is None:
        row = _new(
            ctx,
            "submission",
            course.id,
            {
                "assignment_id": a.id,
                "user_id": uid,
                "workflow_state": "unsubmitted",
                "comments": [],
            },
        )
    payload: dict[str, Any] = {
        "course_id": course.id,
        "course_code": course.data["course_code"],
        "assignment_id": a.id,
        "assignment": a.data["name"],
        "user_id": uid,
        "student": _get(ctx, "user", uid).data["email"],
    }
    if posted_grade not in (None, ""):
        score = _score(str(posted_grade), float(a.data.get("points_possible") or 0))
        _touch(
            row,
            score=score,
            grade=str(posted_grade),
            graded_at=_iso(ctx.now),
            workflow_state="graded",
        )
        payload["score"] = score
    if text_comment:
        _add_comment(ctx, row, agent_id(ctx) if ctx.actor == "agent" else uid, text_comment)
        payload["text"] = text_comment
        payload["recipients"] = [_get(ctx, "user", uid).data["email"]]
    if "score" not in payload and "text" not in payload:
        raise CanvasError(400, "send submission[posted_grade] or comment[text_comment]")
    _record(ctx, "submissions.grade", payload)
    return submission_json(row, a, uid)
