"""The ``delegation`` block: the owner asks the assistant to get a figure from a colleague by
mail; the colleague answers only to mail that reached them (some deliver on time, some only
once chased); at the deadline the owner asks where it stands; the result is recorded.

- a colleague who delivers: record the figure, give it to the owner at the deadline;
- one who does not: at the deadline chase them (to them alone) and tell the owner; once they
  answer, record the figure and give it to the owner.
"""

from __future__ import annotations

from services.tools.scenarios.blocks.common import cast, first, fmt, offset
from services.tools.scenarios.dsl import Scene
from shared.contracts.tools import Trigger


def _board(scene: Scene) -> str:
    db = scene.word("delegation_db", "Handovers")
    scene.database(db, {"Name": "title", "Owner": "rich_text", "Figure": "number"}, [])
    return db


def delegation(scene: Scene, i: int) -> None:
    c = cast(scene)
    g = scene.gen
    owner = c["owner"]
    db = _board(scene)
    mate = scene.person(scene.word("delegate_role", "Analyst"))
    what = scene.word("deliverable", "cost estimate")
    ref = g.ref(scene.word("delegation_ref", "HO"))
    lo, hi = float(scene.vocab.get("lo", 100)), float(scene.vocab.get("hi", 5000))
    value = round(g.amount(lo, hi), 0)
    v = fmt(scene, value)
    delivers = (i + offset(scene, "delegation")) % 2 == 0
    scene.database(db, {}, [{"Name": ref, "Owner": mate.name}])
    d = i % max(1, scene.spec.days - 4)
    deadline = scene.at(d + 2, 12)
    weekday = deadline.strftime("%A")
    b = f"delegation-{i}"
    subject = f"{what.capitalize()} for {ref}"
    record = scene.check(
        "notion.row",
        None,
        f"{ref}'s figure recorded in the {db}",
        database=db,
        title=ref,
        props={"Figure": value},
    )

    e1 = scene.add(
        f"{b}-ask",
        f"{owner.name} asks for {mate.name}'s {what} to be requested",
        at=scene.at(d, 9, 30),
        expected=scene.at(d, 9, 30),
        effects=[
            scene.dm(
                owner,
                f"Could you mail {mate.name} ({mate.email}) for the {what} for {ref}? They "
                f"need to send it by {weekday} 12:00. When it comes in, put it in the {db}.",
            )
        ],
        checks=[
            scene.check(
                "say.reply",
                scene.at(d, 17),
                f"mailed {mate.name} (only) for the {what}, with the {weekday} deadline",
                to_any=[mate.email],
                app="gmail",
                about=ref,
                after_event=f"{b}-ask",
                to=[mate.email],
                contains=[ref, weekday],
                max=1,
            )
        ],
        steps=[
            scene.send_step(
                [mate],
                subject,
                f"Hi {first(mate)}, could you send me the {what} for {ref} by {weekday} "
                f"12:00? {first(owner)} needs it. Thanks!",
            )
        ],
        tags=["delegation"],
    )
    reached = Trigger(
        app="gmail",
        action="messages.send",
        where={"to": mate.email},  # only mail that reached them
        text_contains=[ref],
        since_event=e1,
        next_morning="10:00",
    )
    parents = [e1]
    if delivers:
        e2 = scene.add(
            f"{b}-delivered",
            f"{mate.name} sends the {what}",
            trigger=reached,
            expected=scene.at(d + 1, 10),
            effects=[
                scene.npc_mail(
                    mate,
                    f"Here you go: the {what} for {ref} is {v}.",
                    scene.msgid(f"{b}-delivered"),
                    None,
                )
            ],
            checks=[_at(record, scene.at(d + 1, 17))],
            steps=[scene.update_step(db, ref, {"Figure": value})],
            depends_on=[e1],
            tags=["delegation", "npc"],
        )
        parents = [e2]
    asked = scene.add(
        f"{b}-follow-up",
        f"{owner.name} asks at the deadline whether {mate.name} delivered",
        at=deadline,
        expected=deadline,
        effects=[
            scene.dm(owner, f"It's the deadline: did {first(mate)} send the {what} for {ref}?")
        ],
        checks=(
            [
                scene.check(
                    "say.reply",
                    scene.at(d + 2, 17),
                    f"gave {owner.name} the figure {mate.name} sent",
                    dm_with=owner.email,
                    about=ref,
                    after_event=f"{b}-follow-up",
                    to=[owner.email],
                    contains=[v],
                    max=1,
                ),
                _at(record.model_copy(deep=True), scene.at(d + 2, 17)),
            ]
            if delivers
            else [
                scene.check(
                    "say.reply",
                    scene.at(d + 2, 17),
                    f"chased {mate.name} (only) for the overdue {what}",
                    to_any=[mate.email],
                    app="gmail",
                    about=ref,
                    after_event=f"{b}-follow-up",
                    to=[mate.email],
                    contains=[ref],
                    max=2,
                ),
                scene.check(
                    "say.reply",
                    scene.at(d + 2, 17),
                    f"told {owner.name} it is not in yet and was chased",
                    dm_with=owner.email,
                    about=ref,
                    after_event=f"{b}-follow-up",
                    to=[owner.email],
                    contains=[ref, first(mate)],
                    max=2,
                ),
            ]
        ),
        steps=(
            [
                scene.dm_step(
                    owner, f"Yes: {first(mate)}'s {what} for {ref} is {v}; it's in the {db}."
                )
            ]
            if delivers
            else [
                scene.send_step(
                    [mate],
                    f"Re: {subject}",
                    f"Hi {first(mate)}, a reminder: the {what} for {ref} was due today at "
                    "12:00. Could you send it as soon as you can?",
                ),
                scene.dm_step(
                    owner, f"Not yet: {first(mate)} hasn't sent the {what} for {ref}; I've chased."
                ),
            ]
        ),
        depends_on=parents,
        tags=["delegation", "absence"] if not delivers else ["delegation"],
    )
    if not delivers:
        scene.add(
            f"{b}-late",
            f"{mate.name} sends the {what} once chased",
            trigger=Trigger(
                app="gmail",
                action="messages.send",
                where={"to": mate.email},
                text_contains=[ref],
                since_event=asked,
                delay_minutes=120,
            ),
            expected=scene.at(d + 2, 14),
            effects=[
                scene.npc_mail(
                    mate,
                    f"Sorry, it slipped. The {what} for {ref} is {v}.",
                    scene.msgid(f"{b}-late"),
                    None,
                )
            ],
            checks=[
                _at(record, scene.at(d + 3, 12)),
                scene.check(
                    "say.reply",
                    scene.at(d + 3, 12),
                    f"gave {owner.name} the figure once it came in",
                    dm_with=owner.email,
                    about=ref,
                    after_event=f"{b}-late",
                    to=[owner.email],
                    contains=[v],
                    max=1,
                ),
            ],
            steps=[
                scene.update_step(db, ref, {"Figure": value}),
                scene.dm_step(owner, f"{first(mate)}'s {what} for {ref} came in: {v}."),
            ],
            depends_on=[asked],
            tags=["delegation", "npc"],
        )


def _at(chk, by):  # type: ignore[no-untyped-def]
    chk.at = by
    return chk
