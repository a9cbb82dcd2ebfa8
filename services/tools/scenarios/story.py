"""A small authoring kit for scenarios: write the story, get events, checks and oracle steps.

A scenario module reads like the week it simulates::

    s = Story(gen, start)
    offer = s.mail("offer-ana", at=s.at(0, 9), sender=recruiter, subject="Offer accepted: Ana",
                   body=..., checks=[s.reply(offer_id, contains=["welcome"], by=s.at(1, 17))],
                   solution=[{"do": "gmail.reply", "msgid": ..., "body": "..."}])

Every event carries its checks (each frozen at its deadline) and the oracle's steps for it.
:func:`run_oracle` is the one scripted expert every scenario uses: it advances the clock from
event to event through the HTTP API, and, as each event fires, performs that event's steps
through the apps' public routes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from services.tools.events.spec import Check, Effect, EventSpec, Person, Trigger
from services.tools.scenarios.api import WorldAPI
from services.tools.scenarios.generator import Gen


def pd(p: Person) -> dict[str, Any]:
    return {"name": p.name, "email": p.email}


class Story:
    def __init__(self, gen: Gen, start: datetime, user: Person) -> None:
        self.gen = gen
        self.start = start
        self.user = user
        self.setup: list[Effect] = []
        self.events: list[EventSpec] = []
        self.oracle: dict[str, list[dict[str, Any]]] = {}

    def at(self, day: int, hour: int, minute: int | None = None) -> datetime:
        return self.gen.at(self.start, day, hour, minute)

    # --- checks -------------------------------------------------------------------------

    @staticmethod
    def check(kind: str, by: datetime | None = None, description: str = "", **args: Any) -> Check:
        return Check(id="", kind=kind, args=args, at=by, description=description)

    def reply(self, msgid: str, by: datetime | None, description: str = "", **args: Any) -> Check:
        """The user answered in the thread of ``msgid`` (gmail.sent args narrow it)."""
        return self.check(
            "gmail.sent", by, description or "replied in the thread", in_thread_of=msgid, **args
        )

    def sent(self, by: datetime | None, description: str = "", **args: Any) -> Check:
        return self.check("gmail.sent", by, description, **args)

    def posted(self, by: datetime | None, description: str = "", **args: Any) -> Check:
        return self.check("slack.posted", by, description, **args)

    def collateral(self, allow: dict[str, list[str]], by: datetime | None = None) -> Check:
        return self.check(
            "world.collateral", by, "no changes outside what the task needs", allow=allow
        )

    # --- events -------------------------------------------------------------------------

    def _add(
        self,
        ev_id: str,
        title: str,
        effects: list[Effect],
        checks: list[Check],
        solution: list[dict[str, Any]],
        at: datetime | None = None,
        trigger: Trigger | None = None,
    ) -> EventSpec:
        for i, c in enumerate(checks):
            c.id = f"{ev_id}.c{i}"
        ev = EventSpec(
            id=ev_id, title=title, at=at, trigger=trigger, effects=effects, checks=checks
        )
        self.events.append(ev)
        self.oracle[ev_id] = solution
        return ev

    def extend(self, ev_id: str, checks: list[Check], steps: list[dict[str, Any]]) -> None:
        """Add checks and oracle steps to an event already told."""
        ev = next(e for e in self.events if e.id == ev_id)
        for c in checks:
            c.id = f"{ev_id}.c{len(ev.checks)}"
            ev.checks.append(c)
        self.oracle[ev_id].extend(steps)

    def mail(
        self,
        ev_id: str,
        *,
        at: datetime,
        sender: Person,
        subject: str,
        body: str,
        checks: list[Check],
        solution: list[dict[str, Any]],
        title: str = "",
        cc: list[Person] | None = None,
        attachments: list[dict[str, Any]] | None = None,
        msgid: str | None = None,
    ) -> str:
        """A mail arrives at ``at``; returns its Message-ID."""
        mid = msgid or self.gen.msgid(ev_id)
        args: dict[str, Any] = {
            "from": pd(sender),
            "subject": subject,
            "body": body,
            "message_id": mid,
        }
        if cc:
            args["cc"] = [pd(c) for c in cc]
        if attachments:
            args["attachments"] = attachments
        self._add(
            ev_id,
            title or f"mail from {sender.name}: {subject}",
            [Effect(op="gmail.deliver", args=args)],
            checks,
            solution,
            at=at,
        )
        return mid

    def slack(
        self,
        ev_id: str,
        *,
        at: datetime,
        channel: str,
        sender: Person,
        text: str,
        checks: list[Check],
        solution: list[dict[str, Any]],
        title: str = "",
    ) -> None:
        self._add(
            ev_id,
            title or f"{sender.name} in #{channel}",
            [
                Effect(
                    op="slack.post",
                    args={"channel": channel, "as_email": sender.email, "text": text},
                )
            ],
            checks,
            solution,
            at=at,
        )

    def dm(
        self,
        ev_id: str,
        *,
        at: datetime,
        sender: Person,
        text: str,
        checks: list[Check],
        solution: list[dict[str, Any]],
        title: str = "",
    ) -> None:
        self._add(
            ev_id,
            title or f"DM from {sender.name}",
            [Effect(op="slack.dm", args={"from_email": sender.email, "text": text})],
            checks,
            solution,
            at=at,
        )

    def npc_reply(
        self,
        ev_id: str,
        *,
        npc: Person,
        trigger: Trigger,
        body: str,
        checks: list[Check],
        solution: list[dict[str, Any]],
        title: str = "",
        script: list[dict[str, Any]] | None = None,
        thread_msgid: str | None = None,
        attachments: list[dict[str, Any]] | None = None,
    ) -> str:
        """``npc`` answers by mail when ``trigger`` matches an agent action; returns the
        Message-ID of the answer. Without ``thread_msgid`` it answers the triggering mail."""
        mid = self.gen.msgid(ev_id)
        args: dict[str, Any] = {
            "persona": pd(npc) | {"role": npc.role},
            "body": body,
            "message_id": mid,
            "model": True,
        }
        if script:
            args["script"] = script
        if thread_msgid:
            args["thread_msgid"] = thread_msgid
        if attachments:
            args["attachments"] = attachments
        self._add(
            ev_id,
            title or f"{npc.name} answers",
            [Effect(op="npc.reply", args=args)],
            checks,
            solution,
            trigger=trigger,
        )
        return mid

    @staticmethod
    def when_replied(
        msgid: str, next_morning: str | None = "09:00", delay_minutes: int = 0
    ) -> Trigger:
        """Fires after the agent replies in the thread of ``msgid``."""
        return Trigger(
            app="gmail",
            action="messages.send",
            where={"thread_msgids": msgid},
            next_morning=next_morning,
            delay_minutes=delay_minutes,
        )

    @staticmethod
    def when_mailed(
        email: str, next_morning: str | None = "09:00", delay_minutes: int = 0
    ) -> Trigger:
        """Fires after the agent sends any mail to ``email``."""
        return Trigger(
            app="gmail",
            action="messages.send",
            where={"to": email},
            next_morning=next_morning,
            delay_minutes=delay_minutes,
        )


# --- the oracle --------------------------------------------------------------------------


def _do(api: WorldAPI, step: dict[str, Any]) -> None:
    kind = step["do"]
    if kind == "gmail.reply":
        parent = api.gmail_by_msgid(step["msgid"])
        api.gmail_reply(
            parent,
            step["body"],
            cc=step.get("cc"),
            to=step.get("to"),
            reply_all=step.get("reply_all", False),
            attachments=step.get("attachments"),
        )
    elif kind == "gmail.send":
        api.gmail_send(
            step["to"],
            step["subject"],
            step["body"],
            cc=step.get("cc"),
            attachments=step.get("attachments"),
        )
    elif kind == "gmail.forward":
        parent = api.gmail_by_msgid(step["msgid"])
        subject = "Fwd: " + api.header(parent, "Subject")
        quoted = api.body_text(parent)
        body = f"{step.get('body', '')}\n\n---------- Forwarded message ----------\n{quoted}"
        api.gmail_send(step["to"], subject, body, cc=step.get("cc"))
    elif kind == "gmail.label":
        msg = api.gmail_by_msgid(step["msgid"])
        add = [_label(api, n) for n in step.get("add", [])]
        remove = [_label(api, n) for n in step.get("remove", [])]
        api.gmail_modify(msg["id"], add, remove)
    elif kind == "slack.post":
        api.app(
            "POST",
            "slack/api/chat.postMessage",
            json={"channel": step["channel"], "text": step["text"]},
        )
    elif kind == "slack.dm":
        uid = api.app("POST", "slack/api/users.lookupByEmail", json={"email": step["email"]})[
            "user"
        ]["id"]
        ch = api.app("POST", "slack/api/conversations.open", json={"users": uid})["channel"]["id"]
        api.app("POST", "slack/api/chat.postMessage", json={"channel": ch, "text": step["text"]})
    elif kind == "calendar.insert":
        _calendar_insert(api, step)
    elif kind == "notion.add_row":
        db = _notion_db(api, step["database"])
        api.app(
            "POST",
            "notion/v1/pages",
            headers=dict(NOTION),
            json={"parent": {"database_id": db}, "properties": step["properties"]},
        )
    elif kind == "notion.update_row":
        db = _notion_db(api, step["database"])
        found = api.app(
            "POST",
            f"notion/v1/databases/{db}/query",
            headers=dict(NOTION),
            json={
                "filter": {"property": step["title_property"], "title": {"equals": step["title"]}}
            },
        )["results"]
        api.app(
            "PATCH",
            f"notion/v1/pages/{found[0]['id']}",
            headers=dict(NOTION),
            json={"properties": step["properties"]},
        )
    elif kind == "http":
        api.app(step["method"], step["path"], json=step.get("json"))
    else:
        raise ValueError(f"unknown oracle step {kind!r}")


NOTION = {"Notion-Version": "2022-06-28"}


def _notion_db(api: WorldAPI, title: str) -> str:
    found = api.app(
        "POST",
        "notion/v1/search",
        headers=dict(NOTION),
        json={"query": title, "filter": {"property": "object", "value": "database"}},
    )
    return found["results"][0]["id"]


def _label(api: WorldAPI, name: str) -> str:
    system = {"INBOX", "UNREAD", "STARRED", "IMPORTANT", "SPAM", "TRASH"}
    return name if name in system else api.gmail_label_id(name)


def run_oracle(oracle: dict[str, list[dict[str, Any]]], end: datetime, api: WorldAPI) -> None:
    """Advance from one due event to the next; after each, do the steps of every event that
    has fired since (in firing order), until the scenario's end."""
    handled: set[str] = set()
    for _ in range(10_000):
        events = api._call("GET", f"/worlds/{api.world_id}/events", world=False)["events"]
        fresh = [
            e for e in events if e["status"] in ("fired", "failed") and e["event_id"] not in handled
        ]
        fresh.sort(key=lambda e: (e["fired_at"], events.index(e)))
        for ev in fresh:
            handled.add(ev["event_id"])
            for step in oracle.get(ev["event_id"], []):
                _do(api, step)
        if fresh:
            continue
        due = sorted(datetime.fromisoformat(e["due_at"]) for e in events if e["status"] == "due")
        now = api.clock()
        if not due or due[0] > end:
            if now < end:
                api.advance_to(end)
                continue
            return
        api._call(
            "POST",
            f"/worlds/{api.world_id}/clock/advance",
            world=False,
            json={"to": max(due[0], now).isoformat()},
        )
    raise RuntimeError("oracle did not finish")


def days_after(dt: datetime, days: int, hour: int = 17) -> datetime:
    d = dt + timedelta(days=days)
    return d.replace(hour=hour, minute=0, second=0, microsecond=0)


def _calendar_insert(api: WorldAPI, step: dict[str, Any]) -> None:
    api.app("POST", "calendar/v3/calendars/primary/events", json=step["event"])
