"""Canvas's operations as plain functions over a :class:`WorldContext`.

Routes, MCP tools, scenario effects and checks all call these, so every path obeys the same
rules: ids are integers from one per-world sequence, the agent is the token's ``self`` user and
may do what its enrollment allows (a student submits and sees only its own submissions; a
teacher or TA creates assignments, grades and announces), times are the world clock, and every
write lands in the world's action log.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from services.tools.apps.canvas.models import CanvasMeta, CanvasObject
from services.tools.context import WorldContext, _aware

APP = "canvas"
ROLES = {"StudentEnrollment": "student", "TaEnrollment": "ta", "TeacherEnrollment": "teacher"}
STAFF = ("ta", "teacher")
SUBMISSION_TYPES = ("online_text_entry", "online_url", "online_upload", "none", "on_paper")


class CanvasError(Exception):
    """A failure in Canvas's style: ``{"errors": [{"message": ...}]}`` with its status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"errors": [{"message": self.message}], "status": self.status}


def not_found(what: str, ident: Any) -> CanvasError:
    return CanvasError(404, f"The specified resource does not exist. ({what} {ident})")


def _iso(at: datetime | None) -> str | None:
    return None if at is None else _aware(at).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any, field: str) -> str | None:
    """An ISO 8601 time from a client, normalised to Canvas's ``...Z``; 400 if unreadable."""
    if value in (None, ""):
        return None
    try:
        return _iso(datetime.fromisoformat(str(value).replace("Z", "+00:00")))
    except ValueError:
        raise CanvasError(400, f"{field}: invalid ISO 8601 time {value!r}") from None


# -- storage -----------------------------------------------------------------------------------


def meta(ctx: WorldContext) -> CanvasMeta:
    row = ctx.session.get(CanvasMeta, ctx.world_id)
    if row is None:
        row = CanvasMeta(world_id=ctx.world_id, agent_id=1, seq=1)
        ctx.session.add(row)
        ctx.session.add(
            CanvasObject(
                world_id=ctx.world_id,
                id=1,
                kind="user",
                data=_user_data("Assistant", "agent@k3stack.test"),
            )
        )
        ctx.session.flush()
    return row


def _user_data(name: str, email: str) -> dict[str, Any]:
    short = name.split(" ")[0] if name else email
    return {"name": name, "short_name": short, "sortable_name": name, "email": email.lower()}


def _new(ctx: WorldContext, kind: str, course_id: int | None, data: dict[str, Any]) -> CanvasObject:
    m = meta(ctx)
    m.seq += 1
    row = CanvasObject(world_id=ctx.world_id, id=m.seq, kind=kind, course_id=course_id, data=data)
    ctx.session.add(row)
    ctx.session.flush()
    return row


def _touch(row: CanvasObject, **changes: Any) -> None:
    row.data = {**row.data, **changes}  # a new dict, so the JSON column sees the change


def _get(ctx: WorldContext, kind: str, ident: Any, course_id: int | None = None) -> CanvasObject:
    try:
        key = int(ident)
    except (TypeError, ValueError):
        raise not_found(kind, ident) from None
    row = ctx.session.get(CanvasObject, (ctx.world_id, key))
    if row is None or row.kind != kind or (course_id is not None and row.course_id != course_id):
        raise not_found(kind, ident)
    return row


def _all(ctx: WorldContext, kind: str, course_id: int | None = None) -> list[CanvasObject]:
    q = select(CanvasObject).where(CanvasObject.world_id == ctx.world_id, CanvasObject.kind == kind)
    if course_id is not None:
        q = q.where(CanvasObject.course_id == course_id)
    return list(ctx.session.scalars(q.order_by(CanvasObject.id)))


def agent_id(ctx: WorldContext) -> int:
    return meta(ctx).agent_id


def _user_id(ctx: WorldContext, ident: Any) -> int:
    """``self`` or a user id, which must exist."""
    if ident in ("self", None):
        return agent_id(ctx)
    return _get(ctx, "user", ident).id


def _record(ctx: WorldContext, action: str, payload: dict[str, Any]) -> None:
    ctx.record(APP, action, payload)


# -- users, courses, enrollments ---------------------------------------------------------------


def user_json(row: CanvasObject) -> dict[str, Any]:
    d = row.data
    return {
        "id": row.id,
        "name": d["name"],
        "short_name": d["short_name"],
        "sortable_name": d["sortable_name"],
        "login_id": d["email"],
        "email": d["email"],
    }


def setup(ctx: WorldContext, name: str, email: str) -> dict[str, Any]:
    """Name the agent's own user (the token's ``self``)."""
    row = _get(ctx, "user", agent_id(ctx))
    row.data = _user_data(name, email)
    return user_json(row)


def create_user(ctx: WorldContext, name: str, email: str) -> dict[str, Any]:
    for row in _all(ctx, "user"):
        if row.data["email"] == email.lower():
            return user_json(row)
    return user_json(_new(ctx, "user", None, _user_data(name, email)))


def find_user(ctx: WorldContext, email: str) -> int:
    for row in _all(ctx, "user"):
        if row.data["email"] == email.lower():
            return row.id
    raise not_found("user", email)


def current_user(ctx: WorldContext) -> dict[str, Any]:
    return user_json(_get(ctx, "user", agent_id(ctx)))


def create_course(
    ctx: WorldContext, name: str, course_code: str, start_at: str | None = None
) -> dict[str, Any]:
    row = _new(
        ctx,
        "course",
        None,
        {
            "name": name,
            "course_code": course_code,
            "start_at": parse_time(start_at, "start_at"),
            "workflow_state": "available",
        },
    )
    row.course_id = row.id
    return course_json(ctx, row)


def _enrollments(ctx: WorldContext, course_id: int | None = None) -> list[CanvasObject]:
    return _all(ctx, "enrollment", course_id)


def role_in(ctx: WorldContext, course_id: int, user_id: int | None = None) -> str | None:
    """The user's role in the course (``student``, ``ta``, ``teacher``), None if not enrolled."""
    uid = agent_id(ctx) if user_id is None else user_id
    for e in _enrollments(ctx, course_id):
        if e.data["user_id"] == uid:
            return ROLES[e.data["type"]]
    return None


def enroll(ctx: WorldContext, course_id: int, user_id: int, type: str) -> dict[str, Any]:
    if type not in ROLES:
        raise CanvasError(400, f"enrollment[type] must be one of {', '.join(ROLES)}")
    _get(ctx, "course", course_id)
    _get(ctx, "user", user_id)
    row = _new(ctx, "enrollment", course_id, {"user_id": user_id, "type": type, "state": "active"})
    return enrollment_json(ctx, row)


def course_json(ctx: WorldContext, row: CanvasObject) -> dict[str, Any]:
    me = agent_id(ctx)
    mine = [
        {
            "type": ROLES[e.data["type"]],
            "role": e.data["type"],
            "user_id": me,
            "enrollment_state": e.data["state"],
        }
        for e in _enrollments(ctx, row.id)
        if e.data["user_id"] == me
    ]
    return {
        "id": row.id,
        "name": row.data["name"],
        "course_code": row.data["course_code"],
        "workflow_state": row.data["workflow_state"],
        "start_at": row.data.get("start_at"),
        "enrollment_term_id": 1,
        "enrollments": mine,
    }


def list_courses(ctx: WorldContext) -> list[dict[str, Any]]:
    """The courses the agent is enrolled in (what ``GET /courses`` lists for a user)."""
    me = agent_id(ctx)
    ids = {e.course_id for e in _enrollments(ctx) if e.data["user_id"] == me}
    return [course_json(ctx, c) for c in _all(ctx, "course") if c.id in ids]


def _course(ctx: WorldContext, course_id: Any) -> CanvasObject:
    """A course the agent can see (enrolled in); 404 otherwise, as Canvas hides others."""
    row = _get(ctx, "course", course_id)
    if ctx.actor == "agent" and role_in(ctx, row.id) is None:
        raise CanvasError(401, "user not authorized to perform that action")
    return row


def get_course(ctx: WorldContext, course_id: Any) -> dict[str, Any]:
    return course_json(ctx, _course(ctx, course_id))


def _staff(ctx: WorldContext, course: CanvasObject) -> None:
    """Only a teacher or TA may do this (the scenario's own setup may do anything)."""
    if ctx.actor == "agent" and role_in(ctx, course.id) not in STAFF:
        raise CanvasError(401, "user not authorized to perform that action")


def enrollment_json(ctx: WorldContext, row: CanvasObject) -> dict[str, Any]:
    uid = row.data["user_id"]
    out = {
        "id": row.id,
        "course_id": row.course_id,
        "user_id": uid,
        "type": row.data["type"],
        "role": row.data["type"],
        "enrollment_state": row.data["state"],
        "user": user_json(_get(ctx, "user", uid)),
    }
    if row.data["type"] == "StudentEnrollment":
        score = current_score(ctx, row.course_id or 0, uid)
        out["grades"] = {
            "current_score": score,
            "current_grade": None if score is None else letter(score),
        }
    return out


def list_users(
    ctx: WorldContext, course_id: Any, enrollment_type: list[str] | None = None
) -> list[dict[str, Any]]:
    course = _course(ctx, course_id)
    wanted = set(enrollment_type or [])
    seen, out = set(), []
    for e in _enrollments(ctx, course.id):
        role = ROLES[e.data["type"]]
        if wanted and role not in wanted:
            continue
        if e.data["user_id"] not in seen:
            seen.add(e.data["user_id"])
            out.append(user_json(_get(ctx, "user", e.data["user_id"])))
    return out


def list_enrollments(ctx: WorldContext, course_id: Any) -> list[dict[str, Any]]:
    course = _course(ctx, course_id)
    rows = _enrollments(ctx, course.id)
    if role_in(ctx, course.id) == "student" and ctx.actor == "agent":
        rows = [e for e in rows if e.data["user_id"] == agent_id(ctx)]
    return [enrollment_json(ctx, e) for e in rows]


def letter(score: float) -> str:
    for cut, mark in ((90, "A"), (80, "B"), (70, "C"), (60, "D")):
        if score >= cut:
            return mark
    return "F"


def _submission_row(
    ctx: WorldContext, assignment: CanvasObject, user_id: int
) -> CanvasObject | None:
    for s in _all(ctx, "submission", assignment.course_id):
        if s.data["assignment_id"] == assignment.id and s.data["user_id"] == user_id:
            return s
    return None


def current_score(ctx: WorldContext, course_id: int, user_id: int) -> float | None:
    """Percent over graded assignments (Canvas's current score), None before any grade."""
    got = possible = 0.0
    for a in _all(ctx, "assignment", course_id):
        sub = _submission_row(ctx, a, user_id)
        if sub is not None and sub.data.get("score") is not None:
            got += float(sub.data["score"])
            possible += float(a.data.get("points_possible") or 0)
    return None if possible <= 0 else round(100 * got / possible, 2)
