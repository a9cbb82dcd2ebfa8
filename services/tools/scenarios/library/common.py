"""Pieces the library's scenarios share: the cast's set-up and the writes an assistant needs."""

from __future__ import annotations

from typing import Any

from services.tools.events.spec import Effect, Person
from services.tools.scenarios.story import pd

# Tables an assistant legitimately writes when it mails, labels and posts; collateral checks
# allow exactly these (inserts and updates, never deletes).
ASSISTANT_WRITES: dict[str, list[str]] = {
    "gmail_messages": ["insert", "update"],
    "gmail_history": ["insert"],
    "gmail_mailboxes": ["update"],
    "gmail_labels": ["insert"],
    "slack_messages": ["insert", "update"],
    "slack_meta": ["update"],
    "slack_channels": ["insert"],
    "slack_members": ["insert"],
    "calendar_events": ["insert", "update"],
    "calendar_meta": ["update"],
    "notion_pages": ["insert", "update"],
    "notion_meta": ["update"],
}


def workspace_setup(
    user: Person, team: str, people: list[Person], channels: dict[str, list[Person]]
) -> list[Effect]:
    """Mailbox for the user; a Slack workspace with everyone and the named channels."""
    return [
        Effect(op="gmail.setup_mailbox", args={"email": user.email, "name": user.name}),
        Effect(
            op="slack.setup",
            args={
                "team_name": team,
                "agent": {
                    "name": user.handle or user.email.split("@")[0],
                    "real_name": user.name,
                    "email": user.email,
                },
                "users": [
                    {
                        "name": p.handle or p.email.split("@")[0],
                        "real_name": p.name,
                        "email": p.email,
                        "title": p.role,
                    }
                    for p in people
                ],
                "channels": [
                    {"name": name, "members": [p.email for p in members]}
                    for name, members in channels.items()
                ],
            },
        ),
    ]


def old_mail(
    sender: Person, subject: str, body: str, date: str, msgid: str, **extra: Any
) -> Effect:
    """Mail already in the inbox when the world starts (read)."""
    return Effect(
        op="gmail.deliver",
        args={
            "from": pd(sender),
            "subject": subject,
            "body": body,
            "date": date,
            "message_id": msgid,
            "labels": ["INBOX", "CATEGORY_PERSONAL"],
            **extra,
        },
    )


# --- recurring shapes of a task, so each scenario reads as its story -----------------------

from datetime import datetime  # noqa: E402

from services.tools.events.spec import Check  # noqa: E402
from services.tools.scenarios.story import Story  # noqa: E402


def ask_by_mail(
    s: Story,
    ev_id: str,
    *,
    at: datetime,
    sender: Person,
    subject: str,
    body: str,
    answer: str,
    must: list[str],
    due: datetime,
    must_not: list[str] | None = None,
    more_checks: list[Check] | None = None,
    more_steps: list[dict[str, Any]] | None = None,
    attachments: list[dict[str, Any]] | None = None,
    title: str = "",
) -> str:
    """Mail that needs a reply containing ``must`` (and none of ``must_not``) by ``due``."""
    mid = s.gen.msgid(ev_id)
    checks = [
        s.reply(
            mid,
            due,
            f"reply to {sender.name} says {must}",
            body_contains=must,
            **({"body_excludes": must_not} if must_not else {}),
        )
    ]
    s.mail(
        ev_id,
        at=at,
        sender=sender,
        subject=subject,
        body=body,
        msgid=mid,
        attachments=attachments,
        title=title,
        checks=checks + list(more_checks or []),
        solution=[{"do": "gmail.reply", "msgid": mid, "body": answer}, *(more_steps or [])],
    )
    return mid


def ask_by_dm(
    s: Story,
    ev_id: str,
    *,
    at: datetime,
    sender: Person,
    text: str,
    answer: str,
    must: list[str],
    due: datetime,
    must_not: list[str] | None = None,
) -> None:
    s.dm(
        ev_id,
        at=at,
        sender=sender,
        text=text,
        checks=[
            s.posted(
                due,
                f"answered {sender.name} on Slack",
                dm_with=sender.email,
                text_contains=must,
                **({"text_excludes": must_not} if must_not else {}),
            )
        ],
        solution=[{"do": "slack.dm", "email": sender.email, "text": answer}],
    )


def ask_in_channel(
    s: Story,
    ev_id: str,
    *,
    at: datetime,
    channel: str,
    sender: Person,
    text: str,
    answer: str,
    must: list[str],
    due: datetime,
    must_not: list[str] | None = None,
    more_checks: list[Check] | None = None,
) -> None:
    s.slack(
        ev_id,
        at=at,
        channel=channel,
        sender=sender,
        text=text,
        checks=[
            s.posted(
                due,
                f"answered in #{channel}",
                channel=channel,
                text_contains=must,
                **({"text_excludes": must_not} if must_not else {}),
            ),
            *(more_checks or []),
        ],
        solution=[{"do": "slack.post", "channel": f"#{channel}", "text": answer}],
    )


def follow_up(
    s: Story,
    ev_id: str,
    *,
    npc: Person,
    after_reply_to: str,
    body: str,
    answer: str,
    must: list[str],
    due: datetime,
    must_not: list[str] | None = None,
) -> str:
    """``npc`` writes back the next morning after the agent replied in ``after_reply_to``'s
    thread; the agent must answer again."""
    mid = s.npc_reply(
        ev_id,
        npc=npc,
        trigger=s.when_replied(after_reply_to),
        body=body,
        thread_msgid=after_reply_to,
        checks=[
            s.reply(
                "",
                due,
                f"answered {npc.name}'s follow-up",
                body_contains=must,
                **({"body_excludes": must_not} if must_not else {}),
            )
        ],
        solution=[{"do": "gmail.reply", "msgid": "", "body": answer}],
    )
    s.events[-1].checks[0].args["in_thread_of"] = mid
    s.events[-1].checks[0].args["after_msgid"] = mid
    s.oracle[ev_id][0]["msgid"] = mid
    return mid
