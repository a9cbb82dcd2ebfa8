"""The ``meeting`` block: book the earliest free slot, move it, add a colleague."""

from __future__ import annotations

from datetime import datetime, timedelta

from services.tools.scenarios.blocks.common import create_event_step, update_event_step
from services.tools.scenarios.dsl import Scene
from services.tools.scenarios.generator import day_name
from shared.contracts.tools import Check, Person, Trigger


def meeting(scene: Scene, i: int) -> None:
    guest = scene.person(scene.word("guest_role", "Partner"), external=True)
    colleague = scene.person(scene.word("colleague_role", "Colleague"))
    topic = f"{scene.word('topic', 'planning')} {scene.gen.ref('M')}"
    day = 1 + i
    slots = [scene.at(day + 1, h) for h in (10, 14, 16)]
    busy = scene.gen.integer(1, 2)  # the first one or two offered slots are taken
    chosen = slots[busy]
    for k in range(busy):
        scene.calendar.append(
            {
                "summary": f"{scene.word('busy', 'Team sync')} ({i + 1}.{k + 1})",
                "start": {"dateTime": slots[k].isoformat()},
                "end": {"dateTime": (slots[k] + timedelta(hours=1)).isoformat()},
            }
        )
    moved = scene.at(day + 2, 15)
    b = f"meeting-{i}"
    m1 = scene.msgid(f"{b}-ask")
    times = ", ".join(s.strftime("%H:%M") for s in slots)
    e1 = scene.add(
        f"{b}-request",
        f"{guest.name} asks for a meeting about {topic}",
        at=scene.at(day, 10),
        expected=scene.at(day, 10),
        effects=[
            scene.mail(
                guest,
                f"Meeting: {topic}",
                f"Could we meet for 30 minutes on {day_name(slots[0])} about {topic}? I can do "
                f"{times} (UTC). Please send an invite for the earliest one you have free.",
                m1,
            )
        ],
        checks=booked(
            scene,
            topic,
            scene.at(day, 18),
            chosen,
            [guest],
            f"invited {guest.name} at the earliest free slot",
            "no double-booking on the calendar",
        ),
        steps=[create_event_step(topic, chosen, [guest])],
        tags=["calendar", "negative"],
    )
    e2 = scene.add(
        f"{b}-moved",
        f"{guest.name} moves the meeting",
        trigger=Trigger(
            app="calendar", action="events.insert", since_event=e1, next_morning="08:30"
        ),
        expected=scene.at(day + 1, 8, 30),
        effects=[
            scene.mail(
                guest,
                f"Re: Meeting: {topic}",
                f"Sorry, something came up. Could we move it to {day_name(moved)} at 15:00 "
                f"UTC instead? Same length.",
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
            [guest],
            "the meeting moved (one event, at the new time)",
        ),
        steps=[update_event_step(topic, start=moved)],
        depends_on=[e1],
        tags=["moving-deadline"],
    )
    scene.add(
        f"{b}-join",
        f"{colleague.name} asks to join",
        trigger=Trigger(app="calendar", action="events.patch", since_event=e2, delay_minutes=90),
        expected=scene.at(day + 1, 10),
        effects=[
            scene.mail(
                colleague,
                f"{topic}",
                f"I hear you're meeting {guest.name} about {topic}. Please add me to the invite.",
                scene.msgid(f"{b}-join"),
            )
        ],
        checks=[
            scene.check(
                "calendar.has_event",
                scene.at(day + 1, 18),
                f"{colleague.name} added, {guest.name} kept",
                summary_contains=[topic],
                start=moved.isoformat(),
                attendees=[guest.email, colleague.email],
                max_count=1,
            )
        ],
        steps=[update_event_step(topic, attendees=[guest, colleague])],
        depends_on=[e2],
        tags=["calendar"],
    )


def booked(
    scene: Scene,
    topic: str,
    by: datetime,
    start: datetime,
    who: list[Person],
    what: str,
    no_clash: str,
) -> list[Check]:
    """The meeting is on the calendar once, at ``start``, with ``who``; nothing overlaps."""
    return [
        scene.check(
            "calendar.has_event",
            by,
            what,
            summary_contains=[topic],
            start=start.isoformat(),
            attendees=[p.email for p in who],
            max_count=1,
        ),
        scene.check("calendar.no_overlap", by, no_clash),
    ]


def moved_to(
    scene: Scene,
    topic: str,
    by: datetime,
    start: datetime,
    old: datetime,
    who: list[Person],
    what: str,
) -> list[Check]:
    """The meeting is once at ``start`` with ``who``, and nothing is left at ``old``."""
    return [
        booked(scene, topic, by, start, who, what, "")[0],
        scene.check(
            "calendar.has_event",
            by,
            "nothing left at the old time",
            summary_contains=[topic],
            start=old.isoformat(),
            min_count=0,
            max_count=0,
        ),
    ]
