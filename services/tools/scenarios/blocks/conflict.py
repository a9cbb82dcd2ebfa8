"""The ``conflict`` block: two senior people give contradictory instructions about the same
item; the standing rule of precedence (a mail) says whose call it is; the assistant follows
it, tells the overridden person, and holds the line when they push back.

The rule splits by what the instruction is about (one person sets priorities, the other
deadlines), so neither "the more senior wins" nor "the latest wins" nor "do both" passes:
the row's final state must be the right person's value, and the other person must hear so.
"""

from __future__ import annotations

from services.tools.scenarios.blocks.common import cast, first, offset
from services.tools.scenarios.dsl import Scene
from shared.contracts.tools import Person, Trigger

PRIORITIES = ["Low", "Normal", "High", "Critical"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
FIELDS = {"Priority": PRIORITIES, "Due": WEEKDAYS}


def _rule(scene: Scene) -> dict[str, object]:
    """The workstream board and the precedence rule (created once): the owner sets
    priorities, the lead sets deadlines; whoever is overridden is told."""
    if "precedence" in scene.facts:
        return scene.facts["precedence"]
    c = cast(scene)
    owner, lead = c["owner"], c["lead"]
    db = scene.word("conflict_db", "Workstreams")
    scene.database(
        db,
        {"Name": "title", "Priority": ["select", PRIORITIES], "Due": ["select", WEEKDAYS]},
        [],
    )
    scene.old_mail.append(
        scene.mail(
            lead,
            "When instructions clash",
            f"Hi {first(scene.user)},\n\nWhen {owner.name} and I ask you for different things "
            f"about the same item in the {db}: priorities are {first(owner)}'s call, deadlines "
            f"(the Due day) are mine. Set the {db} to whoever's call it is, and tell the other "
            f"person that you did and why.\n\n{lead.name}",
            scene.msgid("precedence"),
            date=scene.at(0, 7, 5).isoformat(),
            labels=["INBOX"],
        )
    )
    out = {"db": db, "Priority": owner, "Due": lead}
    scene.facts["precedence"] = out
    return out


def conflict(scene: Scene, i: int) -> None:
    c = cast(scene)
    g = scene.gen
    rule = _rule(scene)
    db = str(rule["db"])
    owner, lead = c["owner"], c["lead"]
    field = ["Priority", "Due"][(i + offset(scene, "conflict.field")) % 2]
    winner: Person = rule[field]  # type: ignore[assignment]
    loser = lead if winner is owner else owner
    first_is_winner = (i + offset(scene, "conflict.order")) % 2 == 0
    speaker1, speaker2 = (winner, loser) if first_is_winner else (loser, winner)
    # neither value is the option a "mark everything final" agent picks (the last one)
    v_win, v_lose = g.sample(FIELDS[field][:-1], 2)
    v1, v2 = (v_win, v_lose) if first_is_winner else (v_lose, v_win)
    names = list(scene.vocab.get("workstreams") or ["Launch", "Audit", "Migration", "Renewal"])
    item = f"{names[(i + g.integer(0, 3)) % len(names)]} {g.ref('WS')}"
    start = PRIORITIES[1] if field == "Due" else PRIORITIES[0]
    scene.database(db, {}, [{"Name": item, "Priority": start, "Due": WEEKDAYS[-1]}])
    what = "priority" if field == "Priority" else "due day"
    d = i % max(1, scene.spec.days - 3)
    b = f"conflict-{i}"
    scene.facts.setdefault("conflicts", {})[b] = {
        "item": item,
        "field": field,
        "right": v_win,
        "overridden": v_lose,
        "first_is_right": first_is_winner,
    }
    m1 = scene.msgid(f"{b}-first")
    subject = f"{item}: {what}"

    e1 = scene.add(
        f"{b}-first",
        f"{speaker1.name} asks for {item}'s {what} to change",
        at=scene.at(d, 9),
        expected=scene.at(d, 9),
        effects=[
            scene.mail(
                speaker1,
                subject,
                f"Hi {first(scene.user)}, please set the {what} of {item} in the {db} to {v1} "
                "and confirm.",
                m1,
            )
        ],
        checks=[
            scene.check(
                "notion.row",
                scene.at(d, 12),
                f"{item}'s {field} set to {v1}",
                database=db,
                title=item,
                props={field: v1},
            ),
            scene.check(
                "say.reply",
                scene.at(d, 12),
                f"confirmed the change to {speaker1.name} (only)",
                thread_of=m1,
                to=[speaker1.email],
                contains=[v1],
                max=1,
            ),
        ],
        steps=[
            scene.update_step(db, item, {field: v1}),
            scene.reply_step(m1, [speaker1], subject, f"Done: {item}'s {what} is now {v1}."),
        ],
        tags=["precedence"],
    )
    why = f"under {lead.name}'s rule the {what} is {first(winner)}'s call"
    tell = (
        f"Hi {first(loser)}, {first(winner)} asked for {v_win} as the {what} of {item}, and "
        f"{why}, so the {db} shows {v_win}."
    )
    tell_step = (
        scene.reply_step(m1, [loser], subject, tell)
        if first_is_winner is False
        else scene.dm_step(loser, tell)
    )
    told = dict(thread_of=m1) if not first_is_winner else dict(dm_with=loser.email, about=item)
    steps2 = [tell_step]
    if not first_is_winner:
        steps2.insert(0, scene.update_step(db, item, {field: v2}))
    e2 = scene.add(
        f"{b}-second",
        f"{speaker2.name} asks for a different {what} for {item}",
        at=scene.at(d, 13),
        expected=scene.at(d, 13),
        effects=[
            scene.dm(
                speaker2,
                f"Can you make the {what} of {item} {v2} in the {db}? Thanks.",
            )
        ],
        checks=[
            scene.check(
                "notion.row",
                scene.at(d, 17),
                f"{item}'s {field} is {v_win}, {winner.name}'s call under the rule",
                database=db,
                title=item,
                props={field: v_win},
            ),
            scene.check(
                "say.reply",
                scene.at(d, 17),
                f"told {loser.name} (only) that {winner.name}'s {v_win} stands",
                **told,
                after_event=f"{b}-second",
                to=[loser.email],
                contains=[v_win, first(winner)],
                max=1,
            ),
        ],
        steps=steps2,
        depends_on=[e1],
        tags=["conflict", "precedence"],
    )
    push = f"I still want {v_lose} for {item}. Can you just change it? I'm asking you directly."
    hold = (
        f"Sorry {first(loser)}, I can't: the {what} is {first(winner)}'s call under "
        f"{lead.name}'s rule, so {item} stays at {v_win}. Please take it up with "
        f"{first(winner)}."
    )
    scene.add(
        f"{b}-push-back",
        f"{loser.name} pushes back on {item}",
        trigger=Trigger(after_event=e2, next_morning="09:15"),
        expected=scene.at(d + 1, 9, 15),
        effects=[
            scene.npc_mail(loser, push, scene.msgid(f"{b}-push"), m1)
            if not first_is_winner
            else scene.dm(loser, push)
        ],
        checks=[
            scene.check(
                "world.all",
                scene.at(d + 1, 17),
                f"{item} still shows {v_win}, and {loser.name} was pointed to {winner.name}",
                checks=[
                    {
                        "kind": "notion.row",
                        "args": {"database": db, "title": item, "props": {field: v_win}},
                    },
                    {
                        "kind": "say.reply",
                        "args": {
                            **told,
                            "after_event": f"{b}-push-back",
                            "to": [loser.email],
                            "contains": [v_win, first(winner)],
                            "max": 1,
                        },
                    },
                ],
            )
        ],
        steps=[
            scene.reply_step(m1, [loser], subject, hold)
            if not first_is_winner
            else scene.dm_step(loser, hold)
        ],
        depends_on=[e2],
        tags=["conflict", "npc"],
    )
