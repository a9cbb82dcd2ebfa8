"""Gmail effects (mail arriving, mailboxes set up) and predicates (what the agent sent,
how it labelled mail) for scenarios."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.tools.apps.gmail import actions as gm
from services.tools.apps.gmail import mime
from services.tools.apps.gmail.models import GmailMessage
from services.tools.context import WorldContext
from services.tools.events.registry import EffectEnv, Outcome, effect, lower_all, predicate


def _fmt(person: dict[str, Any] | str) -> str:
    if isinstance(person, str):
        return person
    return f"{person['name']} <{person['email']}>" if person.get("name") else person["email"]


def find_by_msgid(ctx: WorldContext, msgid: str) -> GmailMessage | None:
    from sqlalchemy import select

    return ctx.session.scalar(
        select(GmailMessage)
        .where(GmailMessage.world_id == ctx.world_id, GmailMessage.rfc822_id == msgid)
        .limit(1)
    )


@effect("gmail.setup_mailbox")
def setup_mailbox(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    gm.setup_mailbox(ctx, args["email"], args.get("name", ""))


@effect("gmail.create_label")
def create_label(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    gm.create_label(ctx, {"name": args["name"]})


@effect("gmail.deliver")
def deliver(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    """Incoming mail. ``in_reply_to`` (a Message-ID) threads it under an earlier message;
    ``sent`` stores it as a message the user sent earlier instead (for setup)."""
    box = gm.mailbox(ctx)
    refs: list[str] = []
    parent = find_by_msgid(ctx, args["in_reply_to"]) if args.get("in_reply_to") else None
    if parent is not None:
        refs = list(parent.references) + [parent.rfc822_id]
    when = datetime.fromisoformat(args["date"]) if args.get("date") else ctx.now
    raw = mime.build_message(
        sender=_fmt(args["from"]),
        to=[_fmt(t) for t in args.get("to", [box.email])],
        cc=[_fmt(c) for c in args.get("cc", [])] or None,
        subject=args["subject"],
        body=args["body"],
        date=when,
        message_id=args.get("message_id") or f"<{ctx.new_id(width=20)}@mail.k3stack.test>",
        in_reply_to=parent.rfc822_id if parent is not None else None,
        references=refs or None,
        attachments=args.get("attachments"),
    )
    if args.get("sent"):
        msg = gm.store_message(ctx, raw, ["SENT"], internal_date=when)
    else:
        labels = args.get("labels") or ["INBOX", "UNREAD", "CATEGORY_PERSONAL"]
        msg = gm.store_message(ctx, raw, labels, internal_date=when)
    ctx.record(
        "gmail",
        "messages.receive",
        {
            "id": msg.id,
            "threadId": msg.thread_id,
            "rfc822msgid": msg.rfc822_id,
            "from": mime.addresses(msg.sender),
        },
    )


# --- predicates --------------------------------------------------------------------------


def sent_messages(ctx: WorldContext, args: dict[str, Any]) -> list[GmailMessage]:
    """The user's sent messages that satisfy every condition in ``args``."""
    thread_id = None
    if args.get("in_thread_of"):
        parent = find_by_msgid(ctx, args["in_thread_of"])
        if parent is None:
            return []
        thread_id = parent.thread_id
    after = datetime.fromisoformat(args["after"]) if args.get("after") else None
    after_seq = None
    if args.get("after_msgid"):
        ref = find_by_msgid(ctx, args["after_msgid"])
        if ref is None:
            return []
        after_seq = ref.created_seq
    out = []
    for msg in gm.search(ctx, None, ["SENT"], include_spam_trash=True):
        if thread_id and msg.thread_id != thread_id:
            continue
        if after and gm._aware(msg.internal_date) < after:
            continue
        if after_seq is not None and msg.created_seq <= after_seq:
            continue
        rcpt = mime.addresses(msg.to, msg.cc, msg.bcc)
        if any(a not in rcpt for a in lower_all(args.get("to"))):
            continue
        if any(a not in mime.addresses(msg.cc) for a in lower_all(args.get("cc"))):
            continue
        if any(a in rcpt for a in lower_all(args.get("not_to"))):
            continue
        text = (msg.subject + "\n" + msg.text).lower()
        if any(s not in msg.subject.lower() for s in lower_all(args.get("subject_contains"))):
            continue
        if any(s not in text for s in lower_all(args.get("body_contains"))):
            continue
        anyof = lower_all(args.get("body_contains_any"))
        if anyof and not any(s in text for s in anyof):
            continue
        if any(s in text for s in lower_all(args.get("body_excludes"))):
            continue
        names = [a.get("filename", "").lower() for a in msg.attachments]
        if any(not any(f in n for n in names) for f in lower_all(args.get("attachment"))):
            continue
        out.append(msg)
    return out


@predicate("gmail.sent")
def sent(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """A message the user sent matches: to, cc, not_to, in_thread_of (a Message-ID),
    after_msgid (sent after that message arrived),
    subject_contains, body_contains (all), body_contains_any, body_excludes, attachment, after;
    at least ``min_count`` (1) of them, at most ``max_count`` when given."""
    found = sent_messages(ctx, args)
    lo, hi = int(args.get("min_count", 1)), args.get("max_count")
    ok = len(found) >= lo and (hi is None or len(found) <= int(hi))
    return Outcome(ok, {"matching": [m.id for m in found][:10], "count": len(found)})


@predicate("gmail.not_sent")
def not_sent(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """No sent message matches (e.g. nothing confidential went to an outsider)."""
    found = sent_messages(ctx, args)
    return Outcome(not found, {"matching": [m.id for m in found][:10]})


@predicate("gmail.labeled")
def labeled(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """The message with Message-ID ``msgid`` carries every label in ``has`` and none in
    ``lacks`` (label names: system ids like INBOX / UNREAD / STARRED, or user label names)."""
    msg = find_by_msgid(ctx, args["msgid"])
    if msg is None:
        return Outcome(False, {"error": "message not found"})
    missing, present = [], []
    for name in args.get("has", []):
        lid = gm.label_id_by_name(ctx, name)
        if lid is None or lid not in msg.label_ids:
            missing.append(name)
    for name in args.get("lacks", []):
        lid = gm.label_id_by_name(ctx, name)
        if lid is not None and lid in msg.label_ids:
            present.append(name)
    return Outcome(
        not missing and not present,
        {"labels": list(msg.label_ids), "missing": missing, "unwanted": present},
    )


def resolve_input(ctx: WorldContext, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Content a model judge reads: the sent messages a ``gmail.sent``-style selector picks."""
    return [
        {"id": m.id, "to": m.to, "subject": m.subject, "text": m.text}
        for m in sent_messages(ctx, spec)
    ]


# --- what the agent said (for ``say`` checks) ----------------------------------------------


def statements(ctx: WorldContext, actions: list[Any]) -> list[Any]:
    """The agent's sent mail as statements: the thread, everyone it reached (Bcc too)."""
    from services.tools.context import _aware
    from services.tools.events.ops.say import Statement

    out = []
    for act in actions:
        if act.action != "messages.send":
            continue
        p = act.payload or {}
        row = ctx.session.get(GmailMessage, (ctx.world_id, p.get("id")))
        bcc = mime.addresses(row.bcc) if row is not None else []
        out.append(
            Statement(
                "gmail",
                p.get("threadId", ""),
                act.seq,
                _aware(act.at),
                {a.lower() for a in [*p.get("to", []), *p.get("cc", []), *bcc]},
                f"{p.get('subject', '')}\n{p.get('text', '')}",
                list(p.get("thread_msgids", [])),
            )
        )
    return out


def agent_addresses(ctx: WorldContext) -> set[str]:
    from services.tools.apps.gmail.models import GmailMailbox

    box = ctx.session.get(GmailMailbox, ctx.world_id)
    return {box.email} if box is not None else set()
