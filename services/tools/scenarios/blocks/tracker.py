"""The ``tracker`` block: bring a Notion tracker exactly up to date, correct it, report."""

from __future__ import annotations

from datetime import datetime

from services.tools.scenarios.blocks.common import cast
from services.tools.scenarios.dsl import Scene
from shared.contracts.tools import Check, Trigger


def tracker(scene: Scene, i: int) -> None:
    c = cast(scene)
    names = list(scene.vocab.get("tasks") or ["Draft", "Review", "Sign-off", "Archive", "Brief"])
    picked = scene.gen.sample(names, 4)
    a, b_, cc, d = (f"{n} #{i + 1}" for n in picked)
    db = scene.word("tasks_db", "Project tracker")
    scene.database(
        db,
        {"Name": "title", "Status": ["select", ["In progress", "Blocked", "Done"]]},
        [{"Name": n, "Status": "In progress"} for n in (a, b_, cc, d)],
    )
    ch = c["channel"]
    day = 2 + i % max(1, scene.spec.days - 4)
    blocker = scene.word("blocker", "a missing signature")
    b = f"tracker-{i}"

    def rows(**want: str) -> Check:
        return scene.check(
            "world.all",
            None,
            "",
            checks=[
                {"kind": "notion.row", "args": {"database": db, "title": t, "props": {"Status": s}}}
                for t, s in want.items()
            ],
        )

    e1 = scene.add(
        f"{b}-status",
        f"{c['owner'].name} posts a status update",
        at=scene.at(day, 10),
        expected=scene.at(day, 10),
        effects=[
            scene.post(
                ch,
                c["owner"],
                f"Status: {a} and {b_} are finished. {cc} is stuck on {blocker}. {d} carries "
                f"on. Please bring the {db} up to date.",
            )
        ],
        checks=[
            _at(rows(**{a: "Done", b_: "Done", cc: "Blocked", d: "In progress"}), scene.at(day, 17))
        ],
        steps=[
            scene.update_step(db, a, {"Status": "Done"}),
            scene.update_step(db, b_, {"Status": "Done"}),
            scene.update_step(db, cc, {"Status": "Blocked"}),
        ],
        tags=["notion", "negative"],
    )
    e2 = scene.add(
        f"{b}-correction",
        f"{c['lead'].name} corrects the update",
        trigger=Trigger(after_event=e1, next_morning="09:30"),
        expected=scene.at(day + 1, 9, 30),
        effects=[
            scene.post(
                ch, c["lead"], f"Correction: {b_} failed review this morning, so it's open again."
            )
        ],
        checks=[_at(rows(**{b_: "In progress", a: "Done"}), scene.at(day + 1, 13))],
        steps=[scene.update_step(db, b_, {"Status": "In progress"})],
        depends_on=[e1],
        tags=["late-info", "correction"],
    )
    scene.add(
        f"{b}-open-items",
        "open items requested",
        trigger=Trigger(app="notion", action="pages.update", since_event=e2, delay_minutes=60),
        expected=scene.at(day + 1, 10, 30),
        effects=[
            scene.post(ch, c["owner"], f"Could someone post which {db} items are still open?")
        ],
        checks=[
            scene.check(
                "say.reply",
                scene.at(day + 1, 17),
                "posted exactly the open items",
                channel=ch,
                after_event=f"{b}-open-items",
                contains=[b_, cc, d],
                excludes=[a],
                max=1,
            )
        ],
        steps=[scene.channel_step(ch, f"Still open: {b_}, {cc} (blocked), {d}.")],
        depends_on=[e2],
        tags=["notion"],
    )


def _at(chk: Check, by: datetime) -> Check:
    chk.at = by
    chk.description = chk.description or "the tracker shows exactly the reported statuses"
    return chk
