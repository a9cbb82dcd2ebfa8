"""The ``lookup`` block: a figure two sources disagree on, delegated, then recorded."""

from __future__ import annotations

from services.tools.scenarios.blocks.common import cast, first, fmt
from services.tools.scenarios.dsl import Scene
from shared.contracts.tools import Trigger


def lookup(scene: Scene, i: int) -> None:
    c = cast(scene)
    g = scene.gen
    unit = scene.word("lookup_unit", "money")
    lo, hi = float(scene.vocab.get("lookup_lo", 1000)), float(scene.vocab.get("lookup_hi", 9000))
    who = scene.person(scene.word("entity_role", "Colleague"))
    asker = scene.person(scene.word("asker_role", "Analyst"))
    manager = scene.person(scene.word("manager_role", "Manager"))
    right = round(g.amount(lo, hi), 0)
    wrong = right + round(g.amount(lo / 4, lo / 2), 0)
    attr = scene.word("attribute", "budget")
    source = scene.word("lookup_db", "Reference figures")
    notes = scene.word("notes_db", "Planning notes")
    scene.database(
        source,
        {"Name": "title", "Value": "rich_text"},
        [{"Name": who.name, "Value": fmt(scene, right, unit)}],
    )
    scene.database(notes, {"Name": "title", "Value": "rich_text"}, [])
    scene.channel(c["channel"], [asker, manager])
    scene.old_mail.append(
        scene.post(
            c["channel"],
            c["lead"],
            f"fyi {who.name}'s {attr} is {fmt(scene, wrong, unit)} (from last quarter's sheet)",
        )
    )
    b = f"lookup-{i}"
    day = 1 + i % max(1, scene.spec.days - 3)
    r, w = fmt(scene, right, unit), fmt(scene, wrong, unit)
    scene.facts.setdefault("lookups", {})[who.name] = r
    e1 = scene.add(
        f"{b}-question",
        f"{asker.name} asks for {who.name}'s {attr}",
        at=scene.at(day, 11),
        expected=scene.at(day, 11),
        effects=[scene.dm(asker, f"What's {who.name}'s {attr}? I need the current figure.")],
        checks=[
            scene.check(
                "say.reply",
                scene.at(day, 17),
                f"gave {asker.name} the figure from {source}, not the stale one",
                dm_with=asker.email,
                after_event=f"{b}-question",
                contains=[r],
                excludes=[w],
            )
        ],
        steps=[scene.dm_step(asker, f"{who.name}'s {attr} is {r} (per the {source}).")],
        tags=["conflict"],
    )
    e2 = scene.add(
        f"{b}-delegate",
        f"{asker.name} asks for the figure to go to {manager.name}",
        trigger=Trigger(
            app="slack",
            action="chat.postMessage",
            text_contains=[r],
            since_event=e1,
            delay_minutes=60,
        ),
        expected=scene.at(day, 12),
        effects=[
            scene.dm(
                asker, f"Thanks. Please email {manager.name} that figure too, they're planning."
            )
        ],
        checks=[
            scene.check(
                "say.reply",
                scene.at(day + 1, 12),
                f"mailed {manager.name} (only) the right figure",
                to_any=[manager.email],
                app="gmail",
                about=who.name,
                after_event=f"{b}-delegate",
                to=[manager.email],
                contains=[r, who.name],
                excludes=[w],
                max=1,
            )
        ],
        steps=[
            scene.send_step(
                [manager],
                f"{who.name}: {attr}",
                f"Hi {first(manager)}, {who.name}'s {attr} is {r}.",
            )
        ],
        depends_on=[e1],
        tags=["branching"],
    )
    m3 = scene.msgid(f"{b}-record")
    scene.add(
        f"{b}-record",
        f"{manager.name} wants it on record",
        trigger=Trigger(
            app="gmail",
            action="messages.send",
            where={"to": manager.email},
            since_event=e2,
            next_morning="09:00",
        ),
        expected=scene.at(day + 1, 9),
        effects=[
            scene.npc_mail(manager, f"Thanks. Can you add a row for it in {notes}?", m3, None)
        ],
        checks=[
            scene.check(
                "notion.row",
                scene.at(day + 1, 17),
                f"{who.name}'s figure recorded in {notes}",
                database=notes,
                title=who.name,
                props={"Value": r},
            )
        ],
        steps=[scene.row_step(notes, {"Name": who.name, "Value": r})],
        depends_on=[e2],
        tags=["npc"],
    )
