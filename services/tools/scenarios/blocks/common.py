"""What every block shares: the scenario's standing cast (the policy owner and their lead,
the team channel, the tracker, the policy mail), how figures are written, and the calendar
steps (book, move) the meeting blocks' oracles take."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from services.tools.scenarios.dsl import Scene, legacy
from services.tools.scenarios.generator import day_name
from shared.contracts.tools import Person

STATUS = {"approve": "Approved", "decline": "Rejected"}
FLIP = {"approve": "decline", "decline": "approve"}


def fmt(scene: Scene, value: float, unit: str | None = None) -> str:
    unit = unit or scene.word("unit", "money")
    if unit == "money":
        return f"${value:,.2f}"
    return f"{int(value)} {unit}"


def first(p: Person) -> str:
    return p.name.split()[0]


def cast(scene: Scene) -> dict[str, Any]:
    """The people every block shares (created once): the policy owner and their lead, the
    team channel, the tracker and the policy mail that states the rules."""
    if "cast" in scene.facts:
        return scene.facts["cast"]
    g = scene.gen
    owner = scene.person(scene.word("owner_role", "Team lead"))
    lead = scene.person(scene.word("lead_role", "Director"))
    lo, hi = float(scene.vocab.get("lo", 100)), float(scene.vocab.get("hi", 5000))
    cap = round(g.amount(lo + (hi - lo) * 0.4, lo + (hi - lo) * 0.6), 0)
    processed = scene.at(scene.spec.days + 2, 9)
    channel = scene.channel(scene.word("channel", "team"), [owner, lead])
    tracker = scene.word("tracker", "Decisions log")
    scene.database(
        tracker,
        {
            "Name": "title",
            "Status": ["select", ["Pending", "Approved", "Rejected"]],
            "Amount": "number",
            "Requester": "rich_text",
        },
        [],
    )
    item = scene.word("item", "request")
    policy = scene.word("policy", "limit")
    scene.old_mail.append(
        scene.mail(
            owner,
            f"How we handle {item}s",
            f"Hi {first(scene.user)},\n\nThe {policy} is {fmt(scene, cap)}: anything at or "
            f"under it can be signed off, anything over it cannot. Record every decision in "
            f"the {tracker} in Notion (Status and Amount). Decided {item}s are processed on "
            f"{day_name(processed)}. Appeals go to {lead.name}.\n\n{owner.name}",
            scene.msgid("policy"),
            date=scene.at(0, 7).isoformat(),
            labels=["INBOX"],
        )
    )
    out = {
        "owner": owner,
        "lead": lead,
        "cap": cap,
        "processed": processed,
        "channel": channel,
        "tracker": tracker,
        "outcomes": g.shuffle(["approve", "decline"] * 6),
    }
    scene.facts["cast"] = out
    return out


def offset(scene: Scene, key: str, n: int = 2) -> int:
    """A per-scene draw in ``range(n)``, made once: a block's instances alternate from it
    (``(i + offset) % n``), so two instances of a block never repeat the same variant."""
    got = scene.facts.setdefault("offsets", {})
    if key not in got:
        got[key] = scene.gen.integer(0, n - 1)
    return got[key]


def value_for(scene: Scene, verdict: str, cap: float) -> float:
    lo, hi = float(scene.vocab.get("lo", 100)), float(scene.vocab.get("hi", 5000))
    if verdict == "approve":
        return round(scene.gen.amount(lo, cap - 1), 0)
    return round(scene.gen.amount(cap + 1, hi), 0)


def create_event_step(topic: str, start: datetime, who: list[Person]) -> dict[str, Any]:
    """The oracle step that books a 30-minute event ``topic`` at ``start`` with ``who``."""
    end = start + timedelta(minutes=30)
    return {
        "tool": "create-event",
        "args": {
            "summary": topic,
            "start": start.isoformat(),
            "end": end.isoformat(),
            "attendees": [p.email for p in who],
        },
        **legacy(
            "calendar.insert",
            event={
                "summary": topic,
                "start": {"dateTime": start.isoformat()},
                "end": {"dateTime": end.isoformat()},
                "attendees": [{"email": p.email} for p in who],
            },
        ),
    }


def update_event_step(
    topic: str, start: datetime | None = None, attendees: list[Person] | None = None
) -> dict[str, Any]:
    """The oracle step that moves the event ``topic`` to ``start`` (30 minutes) and/or sets
    its ``attendees``."""
    args: dict[str, Any] = {"eventId": {"$event": topic}}
    if start is not None:
        args |= {"start": start.isoformat(), "end": (start + timedelta(minutes=30)).isoformat()}
    if attendees is not None:
        args["attendees"] = [p.email for p in attendees]
    # the app-level form finds the event by its title, then changes what is given
    plain = {k: v for k, v in args.items() if k != "eventId"}
    return {
        "tool": "update-event",
        "args": args,
        **legacy("calendar.update", summary=topic, **plain),
    }
