"""Canvas effects (courses, people, coursework, announcements and messages a scenario puts in
the world) and predicates (what the agent submitted, graded, announced, sent, scheduled).

Scenarios name courses by ``course_code`` and people by email, never by id, so a script reads
the same whatever order the world's ids came in.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from services.tools.context import WorldContext, _aware
from services.tools.events.registry import EffectEnv, Outcome, effect, lower_all, predicate


def _m():  # type: ignore[no-untyped-def]
    from services.tools.apps.canvas import actions, comms, coursework

    return actions, coursework, comms


def course_by_code(ctx: WorldContext, code: str) -> Any:
    actions, _, _ = _m()
    for row in actions._all(ctx, "course"):
        if row.data["course_code"].lower() == str(code).lower():
            return row
    raise actions.CanvasError(404, f"no course with code {code!r}")


def assignment_by_name(ctx: WorldContext, course: Any, name: str) -> Any:
    actions, _, _ = _m()
    for row in actions._all(ctx, "assignment", course.id):
        if row.data["name"].lower() == str(name).lower():
            return row
    raise actions.CanvasError(404, f"no assignment {name!r} in {course.data['course_code']}")


def _user(ctx: WorldContext, person: dict[str, Any] | str) -> int:
    actions, _, _ = _m()
    if isinstance(person, str):
        return actions.find_user(ctx, person)
    return actions.create_user(
        ctx, name=person.get("name", person["email"]), email=person["email"]
    )["id"]


@effect("canvas.setup")
def setup(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    _m()[0].setup(ctx, name=args.get("name", "Assistant"), email=args["email"])


@effect("canvas.course")
def course(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    """A course with its people: ``members`` are ``{email, name, role}`` (Canvas enrollment
    types), ``agent_role`` the agent's own enrollment."""
    actions, _, _ = _m()
    cid = actions.create_course(ctx, name=args["name"], course_code=args["code"])["id"]
    actions.enroll(ctx, cid, actions.agent_id(ctx), args.get("agent_role", "StudentEnrollment"))
    for person in args.get("members", []):
        actions.enroll(ctx, cid, _user(ctx, person), person.get("role", "StudentEnrollment"))


@effect("canvas.assignment")
def assignment(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    _, coursework, _ = _m()
    coursework.create_assignment(
        ctx,
        course_by_code(ctx, args["course"]).id,
        name=args["name"],
        description=args.get("description", ""),
        due_at=args.get("due_at"),
        points_possible=args.get("points", 100),
        submission_types=args.get("submission_types"),
    )


@effect("canvas.submission")
def submission(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    """A student hands in work (for a TA to grade), at ``submitted_at`` (ISO 8601, before the
    world's clock: work handed in before the scenario starts; default now). Late or not
    follows from the assignment's ``due_at``, as in Canvas; ``late: true`` is refused unless
    the times make it so (a late submission with no deadline is what the seeds had)."""
    c = course_by_code(ctx, args["course"])
    a = assignment_by_name(ctx, c, args["assignment"])
    actions, coursework, _ = _m()
    sub = coursework.submit(
        ctx, c.id, a.id, "online_text_entry", body=args["body"], user_id=_user(ctx, args["student"])
    )
    row = actions._get(ctx, "submission", sub["id"])
    if args.get("submitted_at"):
        at = actions.parse_time(args["submitted_at"], "submitted_at")
        due = a.data.get("due_at")
        late = due is not None and _when(at) > _when(due)
        actions._touch(row, submitted_at=at, late=late)
    if args.get("late") and not row.data.get("late"):
        raise ValueError(
            f"canvas.submission: {args['assignment']!r} is marked late but its times are not "
            "(give the assignment a due_at and the submission a later submitted_at)"
        )


@effect("canvas.announcement")
def announcement(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    _, _, comms = _m()
    comms.create_topic(
        ctx,
        course_by_code(ctx, args["course"]).id,
        title=args["title"],
        message=args["message"],
        is_announcement=True,
        author_id=_user(ctx, args["author"]),
    )


@effect("canvas.message")
def message(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    """Someone writes to the agent in the Canvas inbox."""
    actions, _, comms = _m()
    comms.create_conversation(
        ctx,
        recipients=[str(actions.agent_id(ctx))],
        body=args["body"],
        subject=args.get("subject", ""),
        author_id=_user(ctx, args["from"]),
    )


@effect("canvas.event")
def event(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    _, _, comms = _m()
    comms.create_calendar_event(
        ctx,
        context_code=f"course_{course_by_code(ctx, args['course']).id}",
        title=args["title"],
        start_at=args["start_at"],
        end_at=args.get("end_at"),
    )


def _count(found: list[Any], args: dict[str, Any]) -> bool:
    hi = args.get("max_count")
    lo = args.get("min_count", 0 if hi is not None and int(hi) == 0 else 1)
    return len(found) >= int(lo) and (hi is None or len(found) <= int(hi))


def _contains(text: str, wanted: Any) -> bool:
    low = (text or "").lower()
    return all(w in low for w in lower_all(wanted))


def _when(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _says(text: str, phrase: str) -> bool:
    """``phrase`` as words of ``text``, not a piece of one: "late" is not in "calculated",
    "10%" is not in "110%", "16.2" is not in "16.25"; its spaces match any run of spaces."""
    words = r"\s+".join(re.escape(w) for w in phrase.lower().split())
    return re.search(rf"(?<![\w.%]){words}(?![\w%]|\.\d)", (text or "").lower()) is not None


def _explains(text: str, args: dict[str, Any]) -> bool:
    """Every ``says`` phrase as words of ``text`` and, with ``says_any``, at least one of
    those (a penalty's figure or its rule: "10%", "16.2", "penalty")."""
    if not all(_says(text, w) for w in args.get("says") or []):
        return False
    either = args.get("says_any") or []
    return not either or any(_says(text, w) for w in either)


@predicate("canvas.submitted")
def submitted(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """The agent's submission to ``course``/``assignment`` holds every ``contains`` string and
    none of ``excludes`` (``max_count: 0``: it did not submit); ``on_time``: not late either."""
    actions, _, _ = _m()
    c = course_by_code(ctx, args["course"])
    a = assignment_by_name(ctx, c, args["assignment"])
    sub = actions._submission_row(ctx, a, actions.agent_id(ctx))
    found = []
    if sub is not None and sub.data.get("submitted_at"):
        text = (sub.data.get("body") or "") + " " + (sub.data.get("url") or "")
        clean = not any(x in text.lower() for x in lower_all(args.get("excludes")))
        on_time = not (args.get("on_time") and sub.data["late"])
        if _contains(text, args.get("contains")) and clean and on_time:
            found.append(sub.id)
    detail = {"submission": None if sub is None else {"late": sub.data.get("late")}}
    return Outcome(_count(found, args), detail)


@predicate("canvas.graded")
def graded(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """``student``'s submission has a score in ``[score_min, score_max]`` (both optional) and
    a comment holding every ``comment_contains``; ``ungraded: true`` makes it a negative check."""
    actions, _, _ = _m()
    c = course_by_code(ctx, args["course"])
    a = assignment_by_name(ctx, c, args["assignment"])
    sub = actions._submission_row(ctx, a, actions.find_user(ctx, args["student"]))
    score = None if sub is None else sub.data.get("score")
    if args.get("ungraded"):
        return Outcome(score is None, {"score": score})
    ok = score is not None
    if ok and args.get("score_min") is not None:
        ok = score >= float(args["score_min"])
    if ok and args.get("score_max") is not None:
        ok = score <= float(args["score_max"])
    if ok and args.get("comment_contains"):
        ok = any(
            _contains(cm["comment"], args["comment_contains"])
            for cm in (sub.data.get("comments") or [])
        )
    return Outcome(ok, {"score": score})


@predicate("canvas.announced")
def announced(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """Announcements the agent posted in ``course`` whose title+message hold every
    ``text_contains``, between ``min_count`` (1) and ``max_count``."""
    actions, _, _ = _m()
    c = course_by_code(ctx, args["course"])
    me = actions.agent_id(ctx)
    found = [
        r.id
        for r in actions._all(ctx, "topic", c.id)
        if r.data["is_announcement"]
        and r.data["author_id"] == me
        and _contains(r.data["title"] + " " + r.data["message"], args.get("text_contains"))
    ]
    return Outcome(_count(found, args), {"matching": found[:10]})


@predicate("canvas.messaged")
def messaged(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """Inbox messages the agent wrote that reached every ``to`` email (and, with ``only_to``,
    nobody else) holding every ``text_contains`` (substrings) and what ``says`` / ``says_any``
    ask for (whole words, see :func:`_explains`), between ``min_count`` and ``max_count``."""
    actions, _, _ = _m()
    me = actions.agent_id(ctx)
    wanted = set(lower_all(args.get("to")))
    found = []
    for row in actions._all(ctx, "conversation"):
        emails = {actions._get(ctx, "user", u).data["email"] for u in row.data["participant_ids"]}
        emails.discard(actions._get(ctx, "user", me).data["email"])
        if not wanted <= emails or (args.get("only_to") and emails != wanted):
            continue
        for msg in row.data["messages"]:
            body = msg["body"]
            if msg["author_id"] == me and _contains(body, args.get("text_contains")):
                if not _explains(body, args):
                    continue
                found.append(f"{row.id}:{msg['id']}")
    return Outcome(_count(found, args), {"matching": found[:10]})


@predicate("canvas.has_event")
def has_event(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """Calendar events on ``course``'s calendar (or the agent's own without one) whose title
    holds every ``title_contains`` and, with ``start``, starting at that instant."""
    actions, _, _ = _m()
    code = (
        f"course_{course_by_code(ctx, args['course']).id}"
        if args.get("course")
        else f"user_{actions.agent_id(ctx)}"
    )
    start = args.get("start")
    found = [
        r.id
        for r in actions._all(ctx, "calendar_event")
        if r.data["context_code"] == code
        and _contains(r.data["title"], args.get("title_contains"))
        and (start is None or r.data["start_at"] == actions.parse_time(start, "start"))
    ]
    return Outcome(_count(found, args), {"matching": found[:10]})


def statements(ctx: WorldContext, actions: list[Any]) -> list[Any]:
    """The agent's inbox messages, announcements and grading comments, each to its readers."""
    from services.tools.events.ops.say import Statement

    out = []
    for act in actions:
        p = act.payload or {}
        if act.action not in ("conversations.message", "announcements.create", "submissions.grade"):
            continue
        if not p.get("text"):
            continue
        conv = f"canvas:{act.action.split('.')[0]}:{p.get('conversation_id', p.get('id', ''))}"
        to = {str(e).lower() for e in p.get("recipients", [])}
        out.append(Statement("canvas", conv, act.seq, _aware(act.at), to, p["text"], [], None))
    return out


def agent_addresses(ctx: WorldContext) -> set[str]:
    from services.tools.apps.canvas.models import CanvasMeta

    actions, _, _ = _m()
    if ctx.session.get(CanvasMeta, ctx.world_id) is None:
        return set()
    return {actions._get(ctx, "user", actions.agent_id(ctx)).data["email"]}
