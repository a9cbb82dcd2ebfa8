"""What the assistant said, across apps, and the checks over it that a broad agent cannot game.

:func:`outbox` lists every statement the agent made (a sent mail, a Slack post or edit) with
its exact audience, read from the action log, so a check can ask: in *this* conversation,
after *that* event, did the agent commit to exactly one verdict, to exactly these people,
with these values and none of the distractors? Answering every thread with every verdict,
echoing texts back, or mailing everything to everyone each fail one of those conditions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from services.tools.context import WorldContext
from services.tools.db import tools_apps
from services.tools.events.log import event_seq
from services.tools.events.registry import Outcome, lower_all, predicate
from services.tools.events.verdicts import verdicts
from services.tools.models import ActionRow


def has(text: str, term: str) -> bool:
    """``term`` appears in ``text`` as a whole token (so "4 days" is not in "14 days")."""
    pattern = r"(?<![0-9A-Za-z])" + re.escape(term.lower()) + r"(?![0-9A-Za-z])"
    return re.search(pattern, text.lower()) is not None


CONVERSATION_KEYS = {"thread_of", "dm_with", "channel", "to_any"}


@dataclass
class Statement:
    app: str
    conv: str  # gmail thread id, or slack channel id
    seq: int
    at: datetime
    to: set[str]  # everyone who can read it (emails)
    text: str
    thread_msgids: list[str]
    channel: str | None = None  # slack channel name (None for DMs)

    def view(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "at": self.at.isoformat(),
            "to": sorted(self.to),
            "channel": self.channel,
            "text": self.text,
        }


def outbox(ctx: WorldContext) -> list[Statement]:
    """Everything the agent said, in order; cached on the session until the action log
    grows (checks evaluated together share one read). Each app contributes its own
    statements (its ``ops.statements(ctx, actions)``), so a new app joins without this
    module changing."""
    last = ctx.session.scalar(
        select(func.max(ActionRow.seq)).where(ActionRow.world_id == ctx.world_id)
    )
    key = ("say.outbox", ctx.world_id, last)
    cached = ctx.session.info.get("say.outbox")
    if cached is not None and cached[0] == key:
        return cached[1]
    actions = list(
        ctx.session.scalars(
            select(ActionRow)
            .where(ActionRow.world_id == ctx.world_id, ActionRow.actor == "agent")
            .order_by(ActionRow.seq)
        )
    )
    out: list[Statement] = []
    for app in tools_apps():
        out.extend(app.statements(ctx, [a for a in actions if a.app == app.name]))
    me = {a.lower() for app in tools_apps() for a in app.agent_addresses(ctx)}
    for st in out:
        st.to -= me
    out.sort(key=lambda st: st.seq)
    ctx.session.info["say.outbox"] = (key, out)
    return out


def conversation(ctx: WorldContext, args: dict[str, Any]) -> list[Statement] | None:
    """The agent's statements in the conversation ``args`` names, after ``after_event``
    (None when that event has not happened, so nothing can count yet):

    - ``thread_of``: a Message-ID; the mail thread holding it;
    - ``dm_with``: an email; the agent's direct messages with that person;
    - ``channel``: a Slack channel name (without ``#``);
    - ``to_any``: emails; every statement any of them can read (across apps);
    - ``app``: only statements in this app; ``about``: only statements naming this term.
    """
    said = outbox(ctx)
    if args.get("after_event"):
        seq = event_seq(ctx.session, ctx.world_id, args["after_event"])
        if seq is None:
            return None
        said = [s for s in said if s.seq > seq]
    if args.get("until"):
        until = datetime.fromisoformat(args["until"])
        said = [s for s in said if s.at <= until]
    if args.get("thread_of"):
        said = [s for s in said if s.app == "gmail" and args["thread_of"] in s.thread_msgids]
    if args.get("dm_with"):
        who = args["dm_with"].lower()
        said = [s for s in said if s.app == "slack" and s.channel is None and s.to == {who}]
    if args.get("channel"):
        name = args["channel"].lstrip("#").lower()
        said = [s for s in said if s.app == "slack" and (s.channel or "").lower() == name]
    if args.get("app"):
        said = [s for s in said if s.app == args["app"]]
    if args.get("about"):
        said = [s for s in said if has(s.text, args["about"])]
    if args.get("to_any"):
        who = set(lower_all(args["to_any"]))
        said = [s for s in said if s.to & who]
    return said


def decided(st: Statement) -> set[str]:
    """The verdicts a statement commits to: a sent mail's by its body (its first line is the
    subject, which says what the mail is about, not what it decides)."""
    text = st.text.split("\n", 1)[1] if st.app == "gmail" and "\n" in st.text else st.text
    return verdicts(text)


@predicate("say.reply")
def reply(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """The agent answered in one conversation (see :func:`conversation`) and committed:

    - between ``min`` (1) and ``max`` (2) statements there;
    - ``to``: every statement reaches exactly these people (no one missing, no one extra);
    - ``verdict``: the statements together express exactly this verdict (approve, decline or
      ask) — a contradiction fails;
    - ``contains``: the last statement (with ``verdict``: the last that decides something),
      i.e. what the agent settled on, has every value;
    - ``excludes``: no statement has any of these (distractors, confidential values).
    """
    said = conversation(ctx, args)
    if said is None:
        return Outcome(False, {"reason": "the event this answers has not happened"})
    why: list[str] = []
    lo, hi = int(args.get("min", 1)), int(args.get("max", 2))
    if not lo <= len(said) <= hi:
        why.append(f"{len(said)} statements in the conversation, want {lo}..{hi}")
    if args.get("to") is not None:
        want = set(lower_all(args["to"]))
        wrong = [sorted(s.to) for s in said if s.to != want]
        if wrong:
            why.append(f"audience {wrong[:3]} is not exactly {sorted(want)}")
    if args.get("verdict"):
        found = set().union(*(decided(s) for s in said)) if said else set()
        if found != {args["verdict"]}:
            why.append(f"verdicts {sorted(found)} are not exactly [{args['verdict']}]")
    committed = [s for s in said if decided(s)] if args.get("verdict") else said
    if committed:
        last = committed[-1].text
        missing = [v for v in lower_all(args.get("contains")) if not has(last, v)]
        if missing:
            why.append(f"the answer lacks {missing}")
    leaked = sorted({v for v in lower_all(args.get("excludes")) for s in said if has(s.text, v)})
    if leaked:
        why.append(f"said what it must not: {leaked}")
    return Outcome(not why, {"reasons": why, "statements": [s.view() for s in said][:4]})


@predicate("say.none")
def none(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """Negative check: no statement in the conversation (as :func:`conversation`, usually
    ``to_any``) contains any of ``terms`` (or, without ``terms``, no statement at all)."""
    said = conversation(ctx, args) or []
    terms = lower_all(args.get("terms"))
    bad = [s for s in said if not terms or any(has(s.text, t) for t in terms)]
    return Outcome(not bad, {"offending": [s.view() for s in bad][:4]})


def resolve_input(ctx: WorldContext, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """What a judge reads for a selector: the statements of that conversation."""
    return [s.view() for s in conversation(ctx, spec) or []]
