"""The ``timezones`` block: a guest proposes slots in their own time zone; one clashes with an
instance of a recurring meeting, one (sometimes) with a one-off; a second attendee in another
zone moves it; the guest wants the new time in their zone."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from services.tools.scenarios.blocks.common import create_event_step, first, update_event_step
from services.tools.scenarios.blocks.meeting import booked, moved_to
from services.tools.scenarios.dsl import Scene
from services.tools.scenarios.generator import day_name
from shared.contracts.tools import Trigger

# Zones without daylight saving, so a seed's times never depend on the season.
EAST = [
    ("Asia/Dubai", "Dubai"),
    ("Asia/Kolkata", "Mumbai"),
    ("Africa/Nairobi", "Nairobi"),
    ("Asia/Karachi", "Karachi"),
]
WEST = [("America/Phoenix", "Phoenix"), ("America/Bogota", "Bogotá"), ("America/Lima", "Lima")]
SLOT_HOURS = (8, 12, 13)  # UTC; 08:00 is the recurring stand-up, 12:00 sometimes taken
MOVED_HOUR = 17  # UTC


def _standup(scene: Scene) -> str:
    """The daily stand-up (08:00-08:30 UTC, every day of the scenario), created once."""
    name = scene.facts.get("standup")
    if name is None:
        name = f"{scene.word('standup', 'Daily stand-up')}"
        start = scene.at(0, 8)
        scene.calendar.append(
            {
                "summary": name,
                "start": {"dateTime": start.isoformat(), "timeZone": "UTC"},
                "end": {"dateTime": (start + timedelta(minutes=30)).isoformat(), "timeZone": "UTC"},
                "recurrence": [f"RRULE:FREQ=DAILY;COUNT={scene.spec.days + 2}"],
            }
        )
        scene.facts["standup"] = name
    return name


def _local(at: datetime, zone: str) -> str:
    return at.astimezone(ZoneInfo(zone)).strftime("%H:%M")


def timezones(scene: Scene, i: int) -> None:
    g = scene.gen
    _standup(scene)
    (z1, city1), (z2, city2) = g.pick(EAST), g.pick(WEST)
    guest = scene.person(scene.word("guest_role", "Partner"), external=True)
    remote = scene.person(scene.word("remote_role", "Regional lead"), external=True)
    topic = f"{scene.word('tz_topic', 'cross-office review')} {g.ref('TZ')}"
    day = 1 + i % max(1, scene.spec.days - 3)
    slots = [scene.at(day + 1, h) for h in SLOT_HOURS]
    busy = g.integer(1, 2)  # slot 0 clashes with the stand-up; slot 1 too when busy == 2
    if busy == 2:
        scene.calendar.append(
            {
                "summary": f"{scene.word('busy', 'Team sync')} (tz {i + 1})",
                "start": {"dateTime": slots[1].isoformat()},
                "end": {"dateTime": (slots[1] + timedelta(hours=1)).isoformat()},
            }
        )
    chosen = slots[busy]
    moved = scene.at(day + 2, MOVED_HOUR)
    b = f"timezones-{i}"
    m1 = scene.msgid(f"{b}-ask")
    offered = ", ".join(_local(s, z1) for s in slots)
    e1 = scene.add(
        f"{b}-request",
        f"{guest.name} ({city1}) proposes times in their own zone",
        at=scene.at(day, 9),
        expected=scene.at(day, 9),
        effects=[
            scene.mail(
                guest,
                f"Call: {topic}",
                f"Hi {first(scene.user)}, could we have 30 minutes about {topic} on "
                f"{day_name(slots[0])}? I can do {offered} my time ({city1}, {z1}). Please "
                "send an invite for the earliest of those you have free.",
                m1,
            )
        ],
        checks=booked(
            scene,
            topic,
            scene.at(day, 18),
            chosen,
            [guest],
            f"invited {guest.name} at the earliest slot free of every instance",
            "no clash with the recurring stand-up or any other event",
        ),
        steps=[create_event_step(topic, chosen, [guest])],
        tags=["calendar", "timezones"],
    )
    e2 = scene.add(
        f"{b}-moved",
        f"{guest.name} asks to move it for {remote.name} ({city2})",
        trigger=Trigger(
            app="calendar",
            action="events.insert",
            where={"attendees": guest.email},
            since_event=e1,
            next_morning="08:30",
        ),
        expected=scene.at(day + 1, 8, 30),
        effects=[
            scene.mail(
                guest,
                f"Re: Call: {topic}",
                f"{remote.name} ({remote.email}) from our {city2} office has to join, and "
                f"{first(remote)} can only do {_local(moved, z2)} their time ({z2}) on "
                f"{day_name(moved)}. Please move the call there and add them.",
                scene.msgid(f"{b}-move"),
                in_reply_to=m1,
            )
        ],
        checks=moved_to(
            scene,
            topic,
            scene.at(day + 1, 18),
            moved,
            chosen,
            [guest, remote],
            f"moved to {remote.name}'s time, both invited (one event)",
        ),
        steps=[update_event_step(topic, start=moved, attendees=[guest, remote])],
        depends_on=[e1],
        tags=["moving-deadline", "timezones"],
    )
    scene.add(
        f"{b}-confirm",
        f"{guest.name} asks for the new time in {city1} time",
        trigger=Trigger(
            app="calendar",
            action="events.patch",
            where={"summary": topic},
            since_event=e2,
            delay_minutes=60,
        ),
        expected=scene.at(day + 1, 9, 30),
        effects=[
            scene.mail(
                guest,
                f"Re: Call: {topic}",
                f"Thanks. What time is that for me in {city1}? I keep getting it wrong.",
                scene.msgid(f"{b}-confirm"),
                in_reply_to=m1,
            )
        ],
        checks=[
            scene.check(
                "say.reply",
                scene.at(day + 1, 17),
                f"told {guest.name} the new time in {city1} time",
                thread_of=m1,
                after_event=f"{b}-confirm",
                to=[guest.email],
                contains=[_local(moved, z1)],
                max=1,
            )
        ],
        steps=[
            scene.reply_step(
                m1,
                [guest],
                f"Call: {topic}",
                f"It's {_local(moved, z1)} your time ({city1}) on {day_name(moved)}.",
            )
        ],
        depends_on=[e2],
        tags=["timezones"],
    )
