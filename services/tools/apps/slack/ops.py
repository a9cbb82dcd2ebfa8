"""Slack effects (workspace set-up, colleagues posting and DMing) and predicates (what the
agent posted where), over ``services.tools.apps.slack.actions``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from services.tools.context import WorldContext
from services.tools.events.registry import EffectEnv, Outcome, effect, lower_all, predicate


def _a():  # type: ignore[no-untyped-def]
    from services.tools.apps.slack import actions

    return actions


def _m():  # type: ignore[no-untyped-def]
    from services.tools.apps.slack import models

    return models


def user_id(ctx: WorldContext, email: str) -> str:
    return _a().users_lookup_by_email(ctx, email=email)["user"]["id"]


@effect("slack.setup")
def setup(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    """Workspace with the agent's user, colleagues (``users``: name, real_name, email, title)
    and channels (``channels``: name, private, members: emails)."""
    a = _a()
    agent = args["agent"]
    a.setup_workspace(
        ctx,
        team_name=args.get("team_name", "k3stack"),
        agent_name=agent["name"],
        agent_real_name=agent.get("real_name", ""),
        agent_email=agent["email"],
    )
    for u in args.get("users", []):
        a.create_user(
            ctx,
            name=u["name"],
            real_name=u.get("real_name", ""),
            email=u["email"],
            title=u.get("title", ""),
            _record=False,
        )
    for ch in args.get("channels", []):
        made = a.conversations_create(ctx, name=ch["name"], is_private=ch.get("private", False))
        others = [user_id(ctx, e) for e in ch.get("members", [])]
        if others:
            a.conversations_invite(ctx, channel=made["channel"]["id"], users=others)


@effect("slack.post")
def post(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    """``as_email`` posts ``text`` in ``channel`` (joining it first if it is public); with
    ``thread_contains`` the post answers the latest message whose text contains that."""
    a, m = _a(), _m()
    uid = user_id(ctx, args["as_email"])
    ch = a._channel(ctx, args["channel"], uid)
    a._add_member(ctx, ch.id, uid)
    thread_ts = None
    if args.get("thread_contains"):
        parent = ctx.session.scalar(
            select(m.SlackMessage)
            .where(
                m.SlackMessage.world_id == ctx.world_id,
                m.SlackMessage.channel_id == ch.id,
                func.lower(m.SlackMessage.text).contains(args["thread_contains"].lower()),
            )
            .order_by(m.SlackMessage.ts.desc())
            .limit(1)
        )
        thread_ts = parent.ts if parent is not None else None
    a.post_message(ctx, channel=ch.id, text=args["text"], thread_ts=thread_ts, as_user=uid)


@effect("slack.dm")
def dm(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    """A colleague (``from_email``) sends the agent a direct message."""
    a = _a()
    uid = user_id(ctx, args["from_email"])
    opened = a.conversations_open(ctx, users=a.agent_user_id(ctx), as_user=uid)
    a.post_message(ctx, channel=opened["channel"]["id"], text=args["text"], as_user=uid)


def _channel_ids(ctx: WorldContext, args: dict[str, Any]) -> list[str] | None:
    a, m = _a(), _m()
    if args.get("dm_with"):
        other = user_id(ctx, args["dm_with"])
        me = a.agent_user_id(ctx)
        ids = []
        for ch in ctx.session.scalars(
            select(m.SlackChannel).where(
                m.SlackChannel.world_id == ctx.world_id, m.SlackChannel.kind == "im"
            )
        ):
            if sorted(a._members(ctx, ch.id)) == sorted({me, other}):
                ids.append(ch.id)
        return ids
    if args.get("channel"):
        ch = ctx.session.scalar(
            select(m.SlackChannel).where(
                m.SlackChannel.world_id == ctx.world_id,
                m.SlackChannel.name == args["channel"].lstrip("#"),
            )
        )
        return [ch.id] if ch is not None else []
    return None


def agent_posts(ctx: WorldContext, args: dict[str, Any]) -> list[Any]:
    """Messages the agent posted satisfying ``channel`` / ``dm_with`` (an email),
    ``text_contains`` (all), ``text_contains_any``, ``text_excludes``, ``mentions`` (emails)."""
    a, m = _a(), _m()
    if ctx.session.get(m.SlackMeta, ctx.world_id) is None:
        return []
    me = a.agent_user_id(ctx)
    ids = _channel_ids(ctx, args)
    stmt = select(m.SlackMessage).where(
        m.SlackMessage.world_id == ctx.world_id, m.SlackMessage.user == me
    )
    if ids is not None:
        if not ids:
            return []
        stmt = stmt.where(m.SlackMessage.channel_id.in_(ids))
    mention_ids = [user_id(ctx, e) for e in args.get("mentions", [])]
    out = []
    for msg in ctx.session.scalars(stmt.order_by(m.SlackMessage.ts)):
        text = (msg.text or "").lower()
        if any(s not in text for s in lower_all(args.get("text_contains"))):
            continue
        anyof = lower_all(args.get("text_contains_any"))
        if anyof and not any(s in text for s in anyof):
            continue
        if any(s in text for s in lower_all(args.get("text_excludes"))):
            continue
        if any(f"<@{u.lower()}" not in text for u in mention_ids):
            continue
        out.append(msg)
    return out


@predicate("slack.posted")
def posted(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """The agent posted a matching message (see :func:`agent_posts`), ``min_count`` times."""
    found = agent_posts(ctx, args)
    ok = len(found) >= int(args.get("min_count", 1))
    return Outcome(
        ok, {"matching": [f"{x.channel_id}/{x.ts}" for x in found][:10], "count": len(found)}
    )


@predicate("slack.not_posted")
def not_posted(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    found = agent_posts(ctx, args)
    return Outcome(not found, {"matching": [f"{x.channel_id}/{x.ts}" for x in found][:10]})


# --- what the agent said (for ``say`` checks) ----------------------------------------------

POSTS = ("chat.postMessage", "chat.update", "chat.scheduledMessage.posted")


def _audience(ctx: WorldContext, channel_id: str) -> tuple[set[str], str | None]:
    m = _m()
    ch = ctx.session.get(m.SlackChannel, (ctx.world_id, channel_id))
    users = ctx.session.scalars(
        select(m.SlackUser.email)
        .join(
            m.SlackMember,
            (m.SlackMember.world_id == m.SlackUser.world_id)
            & (m.SlackMember.user_id == m.SlackUser.id),
        )
        .where(m.SlackMember.world_id == ctx.world_id, m.SlackMember.channel_id == channel_id)
    )
    name = None if ch is None or ch.kind == "im" else ch.name
    return {u.lower() for u in users if u}, name


def statements(ctx: WorldContext, actions: list[Any]) -> list[Any]:
    """The agent's posts and edits as statements: the channel (name; None for a DM) and
    everyone in it."""
    from services.tools.context import _aware
    from services.tools.events.ops.say import Statement

    out, audiences = [], {}
    for act in actions:
        if act.action not in POSTS:
            continue
        p = act.payload or {}
        ch = p.get("channel", "")
        if ch not in audiences:
            audiences[ch] = _audience(ctx, ch)
        audience, name = audiences[ch]
        out.append(
            Statement(
                "slack", ch, act.seq, _aware(act.at), set(audience), p.get("text", ""), [], name
            )
        )
    return out


def agent_addresses(ctx: WorldContext) -> set[str]:
    m = _m()
    meta = ctx.session.get(m.SlackMeta, ctx.world_id)
    if meta is None:
        return set()
    user = ctx.session.get(m.SlackUser, (ctx.world_id, meta.agent_user_id))
    return {user.email} if user is not None and user.email else set()
