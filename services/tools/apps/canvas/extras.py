"""The rest of what ``canvasapi`` 3.6.0 calls on a course's work and people: editing an
assignment, grading many at once, assignment groups, a course's submissions across
assignments, another user's profile, courses and assignments, upcoming events, discussion
entries, and the course's tabs, pages, files and quizzes (a course here has none of the last
three: listed empty, as Canvas lists a course without them).

Same rules as :mod:`coursework`: staff edit and grade, a student sees only its own work, a
course the agent is not in is out of reach.
"""

from __future__ import annotations

from typing import Any

from services.tools.apps.canvas.actions import (
    CanvasError,
    _all,
    _course,
    _enrollments,
    _get,
    _iso,
    _record,
    _staff,
    _touch,
    agent_id,
    course_json,
    parse_time,
    role_in,
    user_json,
)
from services.tools.apps.canvas.comms import event_json, topic_json
from services.tools.apps.canvas.coursework import assignment_json, grade, submission_json
from services.tools.context import WorldContext

# The tabs every course shows (Canvas lists what the course's navigation has).
TABS = ("home", "announcements", "assignments", "discussions", "grades", "people", "modules")


def edit_assignment(
    ctx: WorldContext, course_id: Any, assignment_id: Any, changes: dict[str, Any]
) -> dict[str, Any]:
    """``PUT .../assignments/:id``: name, description, due date, points (staff only)."""
    course = _course(ctx, course_id)
    _staff(ctx, course)
    row = _get(ctx, "assignment", assignment_id, course.id)
    update: dict[str, Any] = {}
    if "name" in changes:
        name = str(changes["name"] or "")
        if not name.strip():
            raise CanvasError(400, "assignment[name] must not be blank")
        update["name"] = name
    if "description" in changes:
        update["description"] = str(changes["description"] or "")
    if "due_at" in changes:
        update["due_at"] = parse_time(changes["due_at"], "assignment[due_at]")
    if "points_possible" in changes:
        try:
            points = float(changes["points_possible"])
        except (TypeError, ValueError):
            raise CanvasError(400, "assignment[points_possible] must be a number") from None
        if points < 0:
            raise CanvasError(400, "assignment[points_possible] must not be negative")
        update["points_possible"] = points
    _touch(row, **update)
    _record(
        ctx,
        "assignments.update",
        {"course_id": course.id, "id": row.id, "text": row.data["name"], **update},
    )
    return assignment_json(ctx, row)


def bulk_grade(
    ctx: WorldContext, course_id: Any, assignment_id: Any, grade_data: dict[str, Any]
) -> dict[str, Any]:
    """``POST .../submissions/update_grades``: each student's ``posted_grade`` and/or
    ``text_comment``, applied at once; answers the finished Progress."""
    if not isinstance(grade_data, dict) or not grade_data:
        raise CanvasError(400, "grade_data is required: grade_data[<student id>][posted_grade]")
    for user_id, entry in grade_data.items():
        if not isinstance(entry, dict):
            raise CanvasError(400, f"grade_data[{user_id}] must hold posted_grade / text_comment")
        grade(
            ctx,
            course_id,
            assignment_id,
            user_id,
            posted_grade=entry.get("posted_grade"),
            text_comment=entry.get("text_comment"),
        )
    ident = ctx.world.id_counter or 0
    return {
        "id": ident,
        "context_id": int(assignment_id),
        "context_type": "Assignment",
        "tag": "submissions_update",
        "completion": 100,
        "workflow_state": "completed",
        "created_at": _iso(ctx.now),
        "updated_at": _iso(ctx.now),
        "message": f"{len(grade_data)} submissions updated",
        "url": f"/api/v1/progress/{ident}",
    }


def assignment_groups(
    ctx: WorldContext, course_id: Any, with_assignments: bool = False
) -> list[dict[str, Any]]:
    """One group per course ("Assignments", its id the course's), holding all its work."""
    course = _course(ctx, course_id)
    group: dict[str, Any] = {
        "id": course.id,
        "name": "Assignments",
        "position": 1,
        "group_weight": 100.0,
        "rules": {},
    }
    if with_assignments:
        group["assignments"] = [assignment_json(ctx, a) for a in _all(ctx, "assignment", course.id)]
    return [group]


def assignment_group(
    ctx: WorldContext, course_id: Any, group_id: Any, with_assignments: bool = False
) -> dict[str, Any]:
    groups = assignment_groups(ctx, course_id, with_assignments)
    if str(group_id) != str(groups[0]["id"]):
        raise CanvasError(404, f"The specified resource does not exist. (group {group_id})")
    return groups[0]


def course_submissions(
    ctx: WorldContext,
    course_id: Any,
    student_ids: list[str],
    assignment_ids: list[str],
) -> list[dict[str, Any]]:
    """``GET /courses/:id/students/submissions``: staff see every student's (``all`` or the ids
    given), a student only its own; optionally only some assignments."""
    course = _course(ctx, course_id)
    me = agent_id(ctx)
    staff = ctx.actor != "agent" or role_in(ctx, course.id) in ("ta", "teacher")
    wanted = {str(s) for s in student_ids} - {"all"}
    if not staff and (wanted - {str(me), "self"}):
        raise CanvasError(401, "user not authorized to perform that action")
    works = {a.id: a for a in _all(ctx, "assignment", course.id)}
    only = {str(a) for a in assignment_ids}
    out = []
    for s in _all(ctx, "submission", course.id):
        uid = s.data["user_id"]
        if not staff and uid != me:
            continue
        if wanted and str(uid) not in wanted and not (uid == me and "self" in wanted):
            continue
        a = works.get(s.data["assignment_id"])
        if a is None or (only and str(a.id) not in only):
            continue
        out.append(submission_json(s, a, uid))
    return out


def _visible_user(ctx: WorldContext, user_id: Any) -> Any:
    """A user the agent may look up: itself or someone in one of its courses."""
    me = agent_id(ctx)
    uid = me if str(user_id) == "self" else user_id
    row = _get(ctx, "user", uid)
    if row.id == me or ctx.actor != "agent":
        return row
    mine = {e.course_id for e in _enrollments(ctx) if e.data["user_id"] == me}
    theirs = {e.course_id for e in _enrollments(ctx) if e.data["user_id"] == row.id}
    if not mine & theirs:
        raise CanvasError(404, f"The specified resource does not exist. (user {user_id})")
    return row


def get_user(ctx: WorldContext, user_id: Any) -> dict[str, Any]:
    return user_json(_visible_user(ctx, user_id))


def user_profile(ctx: WorldContext, user_id: Any) -> dict[str, Any]:
    row = _visible_user(ctx, user_id)
    return {**user_json(row), "primary_email": row.data["email"], "bio": None, "title": None}


def user_courses(ctx: WorldContext, user_id: Any) -> list[dict[str, Any]]:
    """Another user's courses, as far as the agent shares them (its own: all of them)."""
    row = _visible_user(ctx, user_id)
    me = agent_id(ctx)
    theirs = {e.course_id for e in _enrollments(ctx) if e.data["user_id"] == row.id}
    if row.id != me:
        theirs &= {e.course_id for e in _enrollments(ctx) if e.data["user_id"] == me}
    return [course_json(ctx, c) for c in _all(ctx, "course") if c.id in theirs]


def user_assignments(ctx: WorldContext, user_id: Any, course_id: Any) -> list[dict[str, Any]]:
    """``GET /users/:id/courses/:course/assignments``: the course's work, for the agent itself
    or (staff) a student of the course."""
    course = _course(ctx, course_id)
    row = _visible_user(ctx, user_id)
    if row.id != agent_id(ctx):
        _staff(ctx, course)
    if role_in(ctx, course.id, row.id) is None:
        raise CanvasError(404, f"The specified resource does not exist. (user {user_id})")
    return [assignment_json(ctx, a) for a in _all(ctx, "assignment", course.id)]


def upcoming_events(ctx: WorldContext, limit: int = 10) -> list[dict[str, Any]]:
    """What is coming up for the agent from the world's clock on: its own and its courses'
    calendar events, and its courses' assignments not yet due."""
    me = agent_id(ctx)
    courses = {e.course_id for e in _enrollments(ctx) if e.data["user_id"] == me}
    codes = {f"user_{me}", *(f"course_{c}" for c in courses)}
    now = _iso(ctx.now) or ""
    out = [
        event_json(r)
        for r in _all(ctx, "calendar_event")
        if r.data["context_code"] in codes and r.data["start_at"] >= now
    ]
    for cid in sorted(courses):
        for a in _all(ctx, "assignment", cid):
            due = a.data.get("due_at")
            if due and due >= now:
                out.append(
                    {
                        "id": f"assignment_{a.id}",
                        "title": a.data["name"],
                        "start_at": due,
                        "end_at": due,
                        "context_code": f"course_{cid}",
                        "type": "assignment",
                        "assignment": assignment_json(ctx, a),
                    }
                )
    return sorted(out, key=lambda e: (e["start_at"], str(e["id"])))[:limit]


def get_topic(ctx: WorldContext, course_id: Any, topic_id: Any) -> dict[str, Any]:
    course = _course(ctx, course_id)
    return topic_json(ctx, _get(ctx, "topic", topic_id, course.id))


def topic_entries(ctx: WorldContext, course_id: Any, topic_id: Any) -> list[dict[str, Any]]:
    """A discussion topic's replies (none are posted here yet: a topic carries only its own
    message), after checking the topic is the course's."""
    course = _course(ctx, course_id)
    topic = _get(ctx, "topic", topic_id, course.id)
    return list(topic.data.get("entries", []))


def tabs(ctx: WorldContext, course_id: Any) -> list[dict[str, Any]]:
    course = _course(ctx, course_id)
    return [
        {
            "id": tab,
            "label": tab.capitalize(),
            "type": "internal",
            "position": i + 1,
            "visibility": "public",
            "html_url": f"/courses/{course.id}" + ("" if tab == "home" else f"/{tab}"),
        }
        for i, tab in enumerate(TABS)
    ]


def empty_listing(ctx: WorldContext, course_id: Any) -> list[dict[str, Any]]:
    """Pages, files, quizzes: a course of the agent's with none."""
    _course(ctx, course_id)
    return []
