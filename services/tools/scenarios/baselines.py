"""Reference agents that must fail: they calibrate the checks (the anti-gaming tests).

Each acts only through MCP tools and the clock, waking whenever an event fires:

- ``do_nothing``: lets the week pass.
- ``read_only``: reads everything (mail, Slack, Notion, calendar) and writes nothing.
- ``every_verdict``: answers every mail and message twice, approving and declining.
- ``forward_all``: forwards every mail, and reposts every Slack message, to everyone.
- ``echo``: answers every mail and message with its own text.
- ``mark_all_done``: sets every Notion row to its most final status, stars and reads all mail,
  accepts every invitation.
- ``digest``: posts and mails a digest of everything it has seen to everyone, every day.

None may pass more than 10% of a scenario's events; the do-nothing and read-only agents may
trip no collateral check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from services.tools.scenarios.drive import Driver, ToolFailed, next_due
from shared.contracts.tools import ScenarioInstance

FINAL = ("done", "approved", "complete", "completed", "closed", "paid", "resolved")


@dataclass
class Inbox:
    """What an agent has seen so far, via read-only tools."""

    driver: Driver
    me: str
    seen_mail: set[str] = field(default_factory=set)
    seen_slack: set[tuple[str, str]] = field(default_factory=set)
    people: set[str] = field(default_factory=set)
    texts: list[str] = field(default_factory=list)

    def new_mail(self) -> list[dict[str, Any]]:
        found = self.driver.call("search_emails", {"query": "in:inbox", "maxResults": 500})
        out = []
        for m in found["messages"]:
            if m["id"] in self.seen_mail:
                continue
            self.seen_mail.add(m["id"])
            full = self.driver.call("read_email", {"messageId": m["id"]})
            sender = _address(full["from"])
            if sender == self.me:
                continue
            self.people.add(sender)
            self.texts.append(full["body"])
            out.append(full | {"sender": sender})
        return out

    def new_slack(self) -> list[dict[str, Any]]:
        me = self.driver.call("slack_get_users", {"limit": 200})
        mine = None
        for u in me["members"]:
            email = (u.get("profile", {}).get("email") or "").lower()
            if email == self.me:
                mine = u["id"]
            elif email:
                self.people.add(email)
        try:
            found = self.driver.call(
                "slack_search_messages", {"query": "after:2000-01-01", "count": 100}
            )
        except ToolFailed:
            return []
        out = []
        for m in found.get("messages", {}).get("matches", []):
            key = (m["channel"]["id"], m["ts"])
            if key in self.seen_slack or m.get("user") == mine:
                continue
            self.seen_slack.add(key)
            self.texts.append(m.get("text", ""))
            out.append(m)
        return out

    def channels(self) -> list[str]:
        return [c["id"] for c in self.driver.call("slack_list_channels", {})["channels"]]


def _address(value: str) -> str:
    from email.utils import parseaddr

    return parseaddr(value)[1].lower()


def _reply(driver: Driver, mail: dict[str, Any], body: str) -> None:
    driver.call(
        "send_email",
        {
            "to": [mail["sender"]],
            "subject": "Re: " + mail.get("subject", ""),
            "body": body,
            "inReplyTo": mail["id"],
        },
    )


def _post(driver: Driver, channel: str, text: str) -> None:
    try:
        driver.call("slack_post_message", {"channel_id": channel, "text": text[:3000]})
    except ToolFailed:
        pass  # e.g. not in channel: a broad agent does not care


Act = Callable[[Inbox], None]


def read_only(box: Inbox) -> None:
    box.new_mail()
    box.new_slack()
    d = box.driver
    d.call("list_email_labels", {})
    for ch in box.channels():
        d.call("slack_get_channel_history", {"channel_id": ch, "limit": 100})
    for db in d.call("API-post-search", {"filter": {"property": "object", "value": "database"}})[
        "results"
    ]:
        d.call("API-post-database-query", {"database_id": db["id"]})
        d.call("API-retrieve-a-database", {"database_id": db["id"]})
    d.call("API-get-users", {})
    d.call("list-calendars", {})
    d.call("list-events", {})


def every_verdict(box: Inbox) -> None:
    for mail in box.new_mail():
        _reply(box.driver, mail, "Approved, go ahead.")
        _reply(box.driver, mail, "Declined, sorry.")
    for msg in box.new_slack():
        _post(box.driver, msg["channel"]["id"], "Approved, go ahead.")
        _post(box.driver, msg["channel"]["id"], "Declined, sorry.")


def forward_all(box: Inbox) -> None:
    mails, posts = box.new_mail(), box.new_slack()
    everyone = sorted(box.people - {box.me})
    for mail in mails:
        box.driver.call(
            "send_email",
            {
                "to": everyone,
                "subject": "Fwd: " + mail.get("subject", ""),
                "body": f"FYI\n\n---------- Forwarded message ----------\n{mail['body']}",
            },
        )
    channels = box.channels()
    for msg in posts:
        for ch in channels:
            _post(box.driver, ch, f"FYI: {msg.get('text', '')}")


def echo(box: Inbox) -> None:
    for mail in box.new_mail():
        _reply(box.driver, mail, mail["body"])
    for msg in box.new_slack():
        _post(box.driver, msg["channel"]["id"], msg.get("text", ""))


def mark_all_done(box: Inbox) -> None:
    d = box.driver
    for db in d.call("API-post-search", {"filter": {"property": "object", "value": "database"}})[
        "results"
    ]:
        schema = d.call("API-retrieve-a-database", {"database_id": db["id"]})["properties"]
        final = {}
        for name, prop in schema.items():
            kind = prop["type"]
            if kind in ("select", "status"):
                names = [o["name"] for o in prop[kind].get("options", [])]
                pick = next((n for n in names if n.lower() in FINAL), names[-1] if names else None)
                if pick:
                    final[name] = {kind: {"name": pick}}
            elif kind == "checkbox":
                final[name] = {"checkbox": True}
        for row in d.call("API-post-database-query", {"database_id": db["id"]})["results"]:
            if final:
                d.call("API-patch-page", {"page_id": row["id"], "properties": final})
    for mail in box.new_mail():
        d.call(
            "modify_email",
            {"messageId": mail["id"], "addLabelIds": ["STARRED"], "removeLabelIds": ["UNREAD"]},
        )
    for ev in d.call("list-events", {})["items"]:
        if not ev.get("organizer", {}).get("self"):
            try:
                d.call("respond-to-event", {"eventId": ev["id"], "response": "accepted"})
            except ToolFailed:
                pass


def digest(box: Inbox) -> None:
    box.new_mail()
    box.new_slack()
    if not box.texts:
        return
    text = "Digest of everything so far:\n" + "\n---\n".join(box.texts)
    for ch in box.channels():
        _post(box.driver, ch, text)
    everyone = sorted(box.people - {box.me})
    if everyone:
        box.driver.call(
            "send_email", {"to": everyone, "subject": "Daily digest", "body": text[:20000]}
        )


def do_nothing(box: Inbox) -> None:
    return None


AGENTS: dict[str, Act] = {
    "do_nothing": do_nothing,
    "read_only": read_only,
    "every_verdict": every_verdict,
    "forward_all": forward_all,
    "echo": echo,
    "mark_all_done": mark_all_done,
    "digest": digest,
}


def run_agent(
    driver: Driver, inst: ScenarioInstance, act: Act, every: timedelta = timedelta(hours=3)
) -> None:
    """Wake when something is due, but at most once per ``every`` of simulated time (an
    assistant that checks in every few hours; the digest agent once a day), act, until the
    scenario's end. The do-nothing agent never wakes: the clock runs to the end in one go."""
    if act is do_nothing:
        driver.advance_to(inst.end)
        return
    if act is digest:
        every = timedelta(days=1)
    box = Inbox(driver, inst.user.email.lower())
    for _ in range(100_000):
        nxt = next_due(driver, inst.end)
        if nxt is None:
            if driver.now() < inst.end:
                driver.advance_to(inst.end)
            act(box)
            return
        driver.advance_to(min(max(nxt, driver.now() + every), inst.end))
        act(box)
    raise RuntimeError("agent did not finish")
