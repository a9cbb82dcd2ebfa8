"""Canvas communication: announcements (discussion topics), conversations (the inbox) and
calendar events.

Apart from coursework because these are read across courses (``GET /announcements`` and
``GET /calendar_events`` take ``context_codes``; the inbox belongs to the user, not a course)
and are what scenario NPCs write into.
"""

from __future__ import annotations

from typing import Any

from services.tools.apps.canvas.actions import (
    CanvasError,
    CanvasObject,
    _all,
    _course,
    _get,
    _iso,
    _new,
    _record,
    _staff,
    _touch,
    _user_id,
    agent_id,
    parse_time,
    role_in,
    user_json,
)
from services.tools.context import WorldContext


def _author(ctx: WorldContext, author_id: int | None) -> int:
    """The agent writes as itself; the scenario may write as anyone."""
    return agent_id(ctx) if author_id is None or ctx.actor == "agent" else int(author_id)


def _context_courses(ctx: WorldContext, context_codes: list[str] | None) -> list[int]:
    """Course ids from ``course_<id>`` codes (each one the agent can see); all its courses if none."""
    if not context_codes:
        me = agent_id(ctx)
        return sorted({e.course_id for e in _all(ctx, "enrollment") if e.data["user_id"] == me})
    out = []
    for code in context_codes:
        if not str(code).startswith("course_"):
            raise CanvasError(400, f"context_codes: {code!r} is not a course_<id> code")
        out.append(_course(ctx, str(code)[7:]).id)
    return out


# -- announcements and discussion topics -------------------------------------------------------


def topic_json(ctx: WorldContext, row: CanvasObject) -> dict[str, Any]:
    d = row.data
    author = _get(ctx, "user", d["author_id"])
    return {
        "id": row.id,
        "title": d["title"],
        "message": d["message"],
        "posted_at": d["posted_at"],
        "is_announcement": d["is_announcement"],
        "context_code": f"course_{row.course_id}",
        "user_name": author.data["name"],
        "author": {"id": author.id, "display_name": author.data["name"]},
        "read_state": "read" if agent_id(ctx) in d.get("read_by", []) else "unread",
    }


def create_topic(
    ctx: WorldContext,
    course_id: Any,
    title: str,
    message: str,
    is_announcement: bool = False,
    author_id: int | None = None,
) -> dict[str, Any]:
    course = _course(ctx, course_id)
    if is_announcement:
        _staff(ctx, course)
    if not title.strip():
        raise CanvasError(400, "title is required")
    author = _author(ctx, author_id)
    row = _new(
        ctx,
        "topic",
        course.id,
        {
            "title": title,
            "message": message,
            "posted_at": _iso(ctx.now),
            "is_announcement": bool(is_announcement),
            "author_id": author,
            "read_by": [author],
        },
    )
    _record(
        ctx,
        "announcements.create" if is_announcement else "discussion_topics.create",
        {
            "course_id": course.id,
            "id": row.id,
            "subject": title,
            "text": message,
            "recipients": _member_emails(ctx, course.id, author),
        },
    )
    return topic_json(ctx, row)


def list_topics(
    ctx: WorldContext, course_id: Any, only_announcements: bool = False
) -> list[dict[str, Any]]:
    course = _course(ctx, course_id)
    rows = [
        r
        for r in _all(ctx, "topic", course.id)
        if r.data["is_announcement"] or not only_announcements
    ]
    return [topic_json(ctx, r) for r in reversed(rows)]  # newest first, as Canvas lists them


def list_announcements(
    ctx: WorldContext, context_codes: list[str] | None = None
) -> list[dict[str, Any]]:
    courses = set(_context_courses(ctx, context_codes))
    rows = [r for r in _all(ctx, "topic") if r.data["is_announcement"] and r.course_id in courses]
    return [topic_json(ctx, r) for r in reversed(rows)]


def _member_emails(ctx: WorldContext, course_id: int, author: int) -> list[str]:
    return [
        _get(ctx, "user", e.data["user_id"]).data["email"]
        for e in _all(ctx, "enrollment", course_id)
        if e.data["user_id"] != author
    ]


# -- conversations -----------------------------------------------------------------------------


def _participants(ctx: WorldContext, row: CanvasObject) -> list[dict[str, Any]]:
    return [
        {"id": uid, "name": _get(ctx, "user", uid).data["name"]}
        for uid in row.data["participant_ids"]
    ]


def conversation_json(
    ctx: WorldContext, row: CanvasObject, with_messages: bool = False
) -> dict[str, Any]:
    d = row.data
    me = agent_id(ctx)
    last = d["messages"][-1]
    out: dict[str, Any] = {
        "id": row.id,
        "subject": d["subject"],
        "workflow_state": "read" if me in d.get("read_by", []) else "unread",
        "last_message": last["body"][:100],
        "last_message_at": last["created_at"],
        "message_count": len(d["messages"]),
        "participants": _participants(ctx, row),
        "audience": [u for u in d["participant_ids"] if u != me],
        "context_code": f"course_{row.course_id}" if row.course_id else None,
    }
    if with_messages:
        out["messages"] = list(reversed(d["messages"]))  # newest first, as Canvas shows them
    return out


def _resolve_recipients(ctx: WorldContext, recipients: list[str]) -> list[int]:
    """User ids, or ``course_<id>`` for the course's members."""
    out: list[int] = []
    for r in recipients:
        text = str(r)
        if text.startswith("course_"):
            course = _course(ctx, text[7:])
            _staff(ctx, course)  # messaging a whole course is staff's
            out += [e.data["user_id"] for e in _all(ctx, "enrollment", course.id)]
        else:
            out.append(_user_id(ctx, text))
    return out


def create_conversation(
    ctx: WorldContext,
    recipients: list[str],
    body: str,
    subject: str = "",
    author_id: int | None = None,
    course_id: int | None = None,
) -> dict[str, Any]:
    """A new conversation (Canvas's ``POST /conversations``; the list of one it answers)."""
    if not recipients:
        raise CanvasError(400, "recipients: at least one is required")
    if not (body or "").strip():
        raise CanvasError(400, "body is required")
    author = _author(ctx, author_id)
    to = [u for u in dict.fromkeys(_resolve_recipients(ctx, recipients)) if u != author]
    if not to:
        raise CanvasError(400, "recipients: nobody but the sender")
    row = _new(
        ctx,
        "conversation",
        course_id,
        {
            "subject": subject or "(No subject)",
            "participant_ids": [author, *to],
            "messages": [],
            "read_by": [],
        },
    )
    _append(ctx, row, author, body)
    return conversation_json(ctx, row, with_messages=True)


def _append(ctx: WorldContext, row: CanvasObject, author: int, body: str) -> None:
    msg = {
        "id": len(row.data["messages"]) + 1,
        "author_id": author,
        "body": body,
        "created_at": _iso(ctx.now),
        "participating_user_ids": row.data["participant_ids"],
    }
    _touch(row, messages=[*row.data["messages"], msg], read_by=[author])
    emails = [
        _get(ctx, "user", u).data["email"] for u in row.data["participant_ids"] if u != author
    ]
    _record(
        ctx,
        "conversations.message",
        {
            "conversation_id": row.id,
            "author_id": author,
            "recipients": emails,
            "recipient_ids": [u for u in row.data["participant_ids"] if u != author],
            "subject": row.data["subject"],
            "text": body,
        },
    )


def _conversation(ctx: WorldContext, conversation_id: Any) -> CanvasObject:
    row = _get(ctx, "conversation", conversation_id)
    if ctx.actor == "agent" and agent_id(ctx) not in row.data["participant_ids"]:
        raise CanvasError(
            404, f"The specified resource does not exist. (conversation {conversation_id})"
        )
    return row


def list_conversations(ctx: WorldContext, scope: str | None = None) -> list[dict[str, Any]]:
    if scope not in (None, "", "unread", "sent", "inbox"):
        raise CanvasError(400, f"scope {scope!r}: use inbox, unread or sent")
    me = agent_id(ctx)
    rows = [r for r in _all(ctx, "conversation") if me in r.data["participant_ids"]]
    if scope == "unread":
        rows = [r for r in rows if me not in r.data.get("read_by", [])]
    if scope == "sent":
        rows = [r for r in rows if any(m["author_id"] == me for m in r.data["messages"])]
    rows.sort(key=lambda r: (r.data["messages"][-1]["created_at"], r.id), reverse=True)
    return [conversation_json(ctx, r) for r in rows]


def get_conversation(ctx: WorldContext, conversation_id: Any) -> dict[str, Any]:
    """One conversation with its messages; reading it marks it read (as Canvas does)."""
    row = _conversation(ctx, conversation_id)
    me = agent_id(ctx)
    if me not in row.data.get("read_by", []):
        _touch(row, read_by=[*row.data.get("read_by", []), me])
    return conversation_json(ctx, row, with_messages=True)


def add_message(
    ctx: WorldContext, conversation_id: Any, body: str, author_id: int | None = None
) -> dict[str, Any]:
    if not (body or "").strip():
        raise CanvasError(400, "body is required")
    row = _conversation(ctx, conversation_id)
    author = _author(ctx, author_id)
    if author not in row.data["participant_ids"]:
        raise CanvasError(400, "the author is not in this conversation")
    _append(ctx, row, author, body)
    return conversation_json(ctx, row, with_messages=True)


# -- calendar events ---------------------------------------------------------------------------


def event_json(row: CanvasObject) -> dict[str, Any]:
    d = row.data
    return {
        "id": row.id,
        "title": d["title"],
        "description": d.get("description", ""),
        "start_at": d["start_at"],
        "end_at": d["end_at"],
        "location_name": d.get("location_name", ""),
        "context_code": d["context_code"],
        "workflow_state": "active",
        "type": "event",
    }


def create_calendar_event(
    ctx: WorldContext,
    context_code: str,
    title: str,
    start_at: str,
    end_at: str | None = None,
    description: str = "",
    location_name: str = "",
) -> dict[str, Any]:
    """An event on a course's calendar (staff) or the agent's own (``user_<self id>``)."""
    me = agent_id(ctx)
    if context_code.startswith("course_"):
        course = _course(ctx, context_code[7:])
        _staff(ctx, course)
        course_id: int | None = course.id
    elif context_code in (f"user_{me}", "user_self"):
        context_code, course_id = f"user_{me}", None
    else:
        raise CanvasError(400, "calendar_event[context_code] must be course_<id> or user_<your id>")
    if not title.strip():
        raise CanvasError(400, "calendar_event[title] is required")
    start = parse_time(start_at, "calendar_event[start_at]")
    if start is None:
        raise CanvasError(400, "calendar_event[start_at] is required")
    end = parse_time(end_at, "calendar_event[end_at]") or start
    if end < start:
        raise CanvasError(400, "calendar_event[end_at] is before start_at")
    row = _new(
        ctx,
        "calendar_event",
        course_id,
        {
            "title": title,
            "description": description,
            "start_at": start,
            "end_at": end,
            "location_name": location_name,
            "context_code": context_code,
        },
    )
    _record(
        ctx,
        "calendar_events.create",
        {"id": row.id, "context_code": context_code, "start_at": start, "text": title},
    )
    return event_json(row)


def list_calendar_events(
    ctx: WorldContext,
    context_codes: list[str] | None = None,
    start_date: str | None = None,
    end_date: str | None = None,
) -> list[dict[str, Any]]:
    """Events of the given contexts (the agent's own calendar by default) in ``[start, end]``."""
    me = agent_id(ctx)
    codes = set(context_codes or [f"user_{me}"])
    for code in codes:
        if code.startswith("course_"):
            _course(ctx, code[7:])
        elif code != f"user_{me}":
            raise CanvasError(401, "user not authorized to perform that action")
    lo = parse_time(start_date, "start_date")
    hi = parse_time(end_date, "end_date")
    out = []
    for r in _all(ctx, "calendar_event"):
        if r.data["context_code"] not in codes:
            continue
        if (lo and r.data["end_at"] < lo) or (hi and r.data["start_at"] > hi):
            continue
        out.append(event_json(r))
    return sorted(out, key=lambda e: (e["start_at"], e["id"]))


def people(ctx: WorldContext, course_id: int) -> list[dict[str, Any]]:
    """Everyone in a course with their role (for the state export)."""
    return [
        {
            **user_json(_get(ctx, "user", e.data["user_id"])),
            "role": role_in(ctx, course_id, e.data["user_id"]),
        }
        for e in _all(ctx, "enrollment", course_id)
    ]
