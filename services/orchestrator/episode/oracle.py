"""The scenario's oracle as a policy: its scripted steps expressed as the episode's own tool
calls, so an oracle trajectory is a valid, native-looking trajectory of that harness.

The tools service's oracle (``scenarios.story.run_oracle``) calls the apps' REST routes; here
each step becomes the MCP tool calls a careful agent would make (find the mail by its
Message-ID, then reply in its thread; look the colleague up, open the DM, post). Each step is
a pure function of the results seen so far, so the policy resumes from its persisted cursor.
It acts after every event that has fired, in firing order, and says it is done when nothing
is left (the loop then moves the world clock on).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from email.utils import getaddresses
from typing import Any

Call = tuple[str, dict[str, Any]]  # ("gmail/send_email", args)
Plan = Callable[[dict[str, Any], list[Any], dict[str, Any]], Call | None]


def _json(result: Any) -> Any:
    if isinstance(result, str):
        try:
            return json.loads(result)
        except ValueError:
            return {"error": result}
    return result


def _first_message(result: Any) -> dict[str, Any]:
    found = _json(result).get("messages") or []
    if not found:
        raise LookupError("the oracle's message is not in the mailbox")
    return found[0]


def _addresses(value: str | list[str] | None) -> list[str]:
    if not value:
        return []
    if isinstance(value, list):
        value = ", ".join(value)
    return [a for _, a in getaddresses([value]) if a]


def _search(step: dict[str, Any]) -> Call:
    return ("gmail/search_emails", {"query": f"rfc822msgid:{step['msgid']}", "maxResults": 1})


def _reply(step: dict[str, Any], seen: list[Any], facts: dict[str, Any]) -> Call | None:
    if not seen:
        return _search(step)
    if len(seen) == 1:
        return ("gmail/read_email", {"messageId": _first_message(seen[0])["id"]})
    if len(seen) > 2:
        return None
    msg = _json(seen[1])
    to = step.get("to") or _addresses(msg.get("from"))
    cc = list(step.get("cc") or [])
    if step.get("reply_all"):
        me = facts["user_email"].lower()
        others = _addresses(msg.get("to")) + _addresses(msg.get("cc"))
        cc += [a for a in others if a.lower() != me and a not in to]
    subject = msg.get("subject", "")
    if not subject.lower().startswith("re:"):
        subject = "Re: " + subject
    args: dict[str, Any] = {
        "to": to,
        "subject": subject,
        "body": step["body"],
        "inReplyTo": msg["id"],
    }
    if cc:
        args["cc"] = cc
    return ("gmail/send_email", args)


def _send(step: dict[str, Any], seen: list[Any], facts: dict[str, Any]) -> Call | None:
    if seen:
        return None
    to = step["to"] if isinstance(step["to"], list) else [step["to"]]
    args = {"to": to, "subject": step["subject"], "body": step["body"]}
    if step.get("cc"):
        args["cc"] = step["cc"]
    return ("gmail/send_email", args)


def _forward(step: dict[str, Any], seen: list[Any], facts: dict[str, Any]) -> Call | None:
    if not seen:
        return _search(step)
    if len(seen) == 1:
        return ("gmail/read_email", {"messageId": _first_message(seen[0])["id"]})
    if len(seen) > 2:
        return None
    msg = _json(seen[1])
    body = (
        f"{step.get('body', '')}\n\n---------- Forwarded message ----------\n{msg.get('body', '')}"
    )
    to = step["to"] if isinstance(step["to"], list) else [step["to"]]
    args: dict[str, Any] = {"to": to, "subject": "Fwd: " + msg.get("subject", ""), "body": body}
    if step.get("cc"):
        args["cc"] = step["cc"]
    return ("gmail/send_email", args)


SYSTEM_LABELS = {"INBOX", "UNREAD", "STARRED", "IMPORTANT", "SPAM", "TRASH"}


def _label(step: dict[str, Any], seen: list[Any], facts: dict[str, Any]) -> Call | None:
    """Find the mail, make sure each user label exists, then modify the mail's labels."""
    if not seen:
        return _search(step)
    user = [n for n in [*step.get("add", []), *step.get("remove", [])] if n not in SYSTEM_LABELS]
    if len(seen) <= len(user):
        return ("gmail/get_or_create_label", {"name": user[len(seen) - 1]})
    if len(seen) > len(user) + 1:
        return None
    ids = {n: _json(r).get("id", n) for n, r in zip(user, seen[1:], strict=True)}
    return (
        "gmail/modify_email",
        {
            "messageId": _first_message(seen[0])["id"],
            "addLabelIds": [ids.get(n, n) for n in step.get("add", [])],
            "removeLabelIds": [ids.get(n, n) for n in step.get("remove", [])],
        },
    )


def _slack_post(step: dict[str, Any], seen: list[Any], facts: dict[str, Any]) -> Call | None:
    if seen:
        return None
    channel = step["channel"]
    if not channel.startswith(("#", "C", "D", "G")):
        channel = "#" + channel
    return ("slack/slack_post_message", {"channel_id": channel, "text": step["text"]})


def _slack_dm(step: dict[str, Any], seen: list[Any], facts: dict[str, Any]) -> Call | None:
    if not seen:
        return ("slack/slack_get_users", {"limit": 200})
    if len(seen) == 1:
        members = _json(seen[0]).get("members", [])
        want = step["email"].lower()
        uid = next(
            (m["id"] for m in members if (m.get("profile") or {}).get("email", "").lower() == want),
            None,
        )
        if uid is None:
            raise LookupError(f"no Slack user with email {step['email']}")
        return ("slack/slack_open_dm", {"user_ids": [uid]})
    if len(seen) > 2:
        return None
    channel = _json(seen[1]).get("channel", {}).get("id")
    return ("slack/slack_post_message", {"channel_id": channel, "text": step["text"]})


def _when(value: dict[str, Any]) -> str:
    return value.get("dateTime") or value.get("date")


def _calendar(step: dict[str, Any], seen: list[Any], facts: dict[str, Any]) -> Call | None:
    if seen:
        return None
    ev = step["event"]
    args: dict[str, Any] = {
        "summary": ev.get("summary", ""),
        "start": _when(ev["start"]),
        "end": _when(ev["end"]),
    }
    if ev["start"].get("timeZone"):
        args["timeZone"] = ev["start"]["timeZone"]
    for key in ("description", "location"):
        if ev.get(key):
            args[key] = ev[key]
    if ev.get("attendees"):
        args["attendees"] = [a["email"] for a in ev["attendees"]]
    return ("calendar/create-event", args)


def _db_search(step: dict[str, Any]) -> Call:
    return (
        "notion/API-post-search",
        {"query": step["database"], "filter": {"property": "object", "value": "database"}},
    )


def _first_id(result: Any) -> str:
    found = _json(result).get("results") or []
    if not found:
        raise LookupError("nothing found")
    return found[0]["id"]


def _notion_add(step: dict[str, Any], seen: list[Any], facts: dict[str, Any]) -> Call | None:
    if not seen:
        return _db_search(step)
    if len(seen) > 1:
        return None
    return (
        "notion/API-post-page",
        {"parent": {"database_id": _first_id(seen[0])}, "properties": step["properties"]},
    )


def _notion_update(step: dict[str, Any], seen: list[Any], facts: dict[str, Any]) -> Call | None:
    if not seen:
        return _db_search(step)
    if len(seen) == 1:
        flt = {"property": step["title_property"], "title": {"equals": step["title"]}}
        return (
            "notion/API-post-database-query",
            {"database_id": _first_id(seen[0]), "filter": flt},
        )
    if len(seen) > 2:
        return None
    return (
        "notion/API-patch-page",
        {"page_id": _first_id(seen[1]), "properties": step["properties"]},
    )


PLANS: dict[str, Plan] = {
    "gmail.reply": _reply,
    "gmail.send": _send,
    "gmail.forward": _forward,
    "gmail.label": _label,
    "slack.post": _slack_post,
    "slack.dm": _slack_dm,
    "calendar.insert": _calendar,
    "notion.add_row": _notion_add,
    "notion.update_row": _notion_update,
}


class OraclePlanner:
    """Next oracle call from the persisted cursor and the world's fired events.

    ``cursor``: ``handled`` (event ids), ``queue`` (steps to do), ``seen`` (results of the
    current step's calls so far).
    """

    def __init__(self, scenario: dict[str, Any], events: Callable[[], list[dict[str, Any]]]):
        self.oracle: dict[str, list[dict[str, Any]]] = scenario.get("oracle", {})
        self.facts = {"user_email": scenario.get("user", {}).get("email", "")}
        self.events = events

    def next_call(self, cursor: dict[str, Any], last_result: Any) -> Call | None:
        cursor.setdefault("handled", [])
        cursor.setdefault("queue", [])
        if cursor.get("awaiting"):
            cursor.setdefault("seen", []).append(last_result)
            cursor["awaiting"] = False
        while True:
            if cursor["queue"]:
                step = cursor["queue"][0]
                plan = PLANS.get(step["do"])
                call = None
                if plan is not None:
                    try:
                        call = plan(step, cursor.get("seen", []), self.facts)
                    except (LookupError, KeyError, TypeError, AttributeError):
                        call = None  # the step cannot go on from what it saw: skip it
                if call is not None:
                    cursor["awaiting"] = True
                    return call
                cursor["queue"].pop(0)
                cursor["seen"] = []
                continue
            if not self._refill(cursor):
                return None

    def _refill(self, cursor: dict[str, Any]) -> bool:
        events = self.events()
        fresh = [
            (e.get("fired_at") or "", i, e)
            for i, e in enumerate(events)
            if e["status"] in ("fired", "failed") and e["event_id"] not in cursor["handled"]
        ]
        fresh.sort(key=lambda t: (t[0], t[1]))
        for _, _, ev in fresh:
            cursor["handled"].append(ev["event_id"])
            cursor["queue"].extend(self.oracle.get(ev["event_id"], []))
        return bool(cursor["queue"])
