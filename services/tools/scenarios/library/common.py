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
