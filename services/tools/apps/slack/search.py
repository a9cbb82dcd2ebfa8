"""Slack's ``search.messages`` engine: the query language (words, "phrases", ``-word``,
``in:``, ``from:``, ``to:me``, ``after:`` / ``before:`` / ``on:``, ``has:``, ``is:thread``) over
the messages the agent can see, scored and paged as Slack does.

Kept apart from ``actions`` (which stores and renders messages) so each file does one job.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Any

from sqlalchemy import or_, select

from services.tools.apps.slack.actions import (
    _can_see,
    _channel,
    _find_im,
    _get,
    _limit,
    _permalink,
    _reactions,
    _ts_datetime,
    _user,
    agent_user_id,
)
from services.tools.apps.slack.errors import SlackError
from services.tools.apps.slack.models import SlackChannel, SlackMessage, SlackPin, SlackUser
from services.tools.context import WorldContext

_TOKEN = re.compile(r'-?"[^"]*"|\S+')


def _parse_day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise SlackError("invalid_search_date", f"dates are YYYY-MM-DD, got {value!r}") from None


def search_messages(
    ctx: WorldContext,
    *,
    query: str,
    count: int | None = None,
    page: int | None = None,
    sort: str = "score",
    sort_dir: str = "desc",
) -> dict[str, Any]:
    """``search.messages`` with Slack's modifiers.

    Supported: words and ``"quoted phrases"`` (all must match, case-insensitive), ``-word``,
    ``in:#channel`` / ``in:<#C…>`` / ``in:@user`` (the IM), ``from:@user`` / ``from:<@U…>`` /
    ``from:me``, ``to:me``, ``after:`` / ``before:`` / ``on:`` ``YYYY-MM-DD``, ``has:link``,
    ``has:reaction``, ``has:pin``, ``is:thread``. Only conversations the agent can see match.
    """
    viewer = agent_user_id(ctx)
    if not query or not query.strip():
        raise SlackError("no_query")
    if sort not in ("score", "timestamp"):
        raise SlackError("invalid_arguments", "sort is 'score' or 'timestamp'")
    if sort_dir not in ("asc", "desc"):
        raise SlackError("invalid_arguments", "sort_dir is 'asc' or 'desc'")
    terms: list[str] = []
    negated: list[str] = []
    channels: set[str] | None = None
    authors: set[str] | None = None
    after = before = on = None
    has: set[str] = set()
    is_thread = False
    mention_me = False
    for tok in _TOKEN.findall(query):
        neg = tok.startswith("-") and len(tok) > 1
        body = tok[1:] if neg else tok
        key, sep, val = body.partition(":")
        key = key.lower()
        if (
            sep
            and val
            and not body.startswith('"')
            and key in {"in", "from", "after", "before", "on", "has", "is", "to"}
        ):
            if key == "in":
                if val.startswith("@") or val.startswith("<@"):
                    im = _find_im(ctx, viewer, _user(ctx, val).id)
                    ids = {im} if im else set()
                else:
                    ids = {_channel(ctx, val).id}
                channels = ids if channels is None else channels & ids
            elif key == "from":
                uid = viewer if val.lower() == "me" else _user(ctx, val).id
                authors = {uid} if authors is None else authors & {uid}
            elif key == "to":
                mention_me = True
            elif key == "after":
                after = _parse_day(val)
            elif key == "before":
                before = _parse_day(val)
            elif key == "on":
                on = _parse_day(val)
            elif key == "has":
                has.add(val.lower())
            elif key == "is":
                is_thread = is_thread or val.lower() == "thread"
            continue
        phrase = body.strip('"').lower()
        if phrase:
            (negated if neg else terms).append(phrase)
    visible = [
        ch.id
        for ch in ctx.session.scalars(
            select(SlackChannel).where(SlackChannel.world_id == ctx.world_id)
        )
        if _can_see(ctx, ch, viewer)
    ]
    if channels is not None:
        visible = [c for c in visible if c in channels]
    q = select(SlackMessage).where(
        SlackMessage.world_id == ctx.world_id,
        SlackMessage.channel_id.in_(visible),
        or_(SlackMessage.subtype.is_(None), SlackMessage.subtype == "thread_broadcast"),
    )
    if authors is not None:
        q = q.where(SlackMessage.user.in_(authors))
    matches = []
    for m in ctx.session.scalars(q.order_by(SlackMessage.ts)):
        text = m.text.lower()
        if any(t not in text for t in terms) or any(t in text for t in negated):
            continue
        day = _ts_datetime(m.ts).date()
        if (after and day <= after) or (before and day >= before) or (on and day != on):
            continue
        if is_thread and not m.thread_ts:
            continue
        if mention_me and f"<@{viewer}" not in m.text:
            continue
        if "link" in has and "http" not in text:
            continue
        if "reaction" in has and not _reactions(ctx, m.channel_id, m.ts):
            continue
        if "pin" in has and _get(ctx, SlackPin, m.channel_id, m.ts) is None:
            continue
        score = sum(text.count(t) for t in terms)
        matches.append((score, m))
    if sort == "score":
        matches.sort(key=lambda sm: (sm[0], sm[1].ts), reverse=sort_dir == "desc")
    else:
        matches.sort(key=lambda sm: sm[1].ts, reverse=sort_dir == "desc")
    per_page = _limit(count, 20, 100)
    page = max(1, page or 1)
    total = len(matches)
    pages = max(1, -(-total // per_page))
    chunk = matches[(page - 1) * per_page : page * per_page]
    out = []
    for _, m in chunk:
        ch = _get(ctx, SlackChannel, m.channel_id)
        user = _get(ctx, SlackUser, m.user)
        out.append(
            {
                "iid": f"{m.channel_id}-{m.ts}",
                "type": "message",
                "user": m.user,
                "username": user.name if user else "",
                "ts": m.ts,
                "text": m.text,
                "thread_ts": m.thread_ts,
                "channel": {
                    "id": m.channel_id,
                    "name": ch.name if ch else "",
                    "is_private": bool(ch and ch.kind != "public"),
                    "is_im": bool(ch and ch.kind == "im"),
                    "is_mpim": bool(ch and ch.kind == "mpim"),
                },
                "permalink": _permalink(ctx, m.channel_id, m.ts, m.thread_ts),
            }
        )
    paging = {"count": per_page, "total": total, "page": page, "pages": pages}
    return {
        "query": query,
        "messages": {
            "matches": out,
            "total": total,
            "paging": paging,
            "pagination": {
                "total_count": total,
                "page": page,
                "per_page": per_page,
                "page_count": pages,
                "first": (page - 1) * per_page + 1 if out else 0,
                "last": (page - 1) * per_page + len(out),
            },
        },
    }
