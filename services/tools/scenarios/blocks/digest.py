"""The ``digest`` block (the week's wrap-up, scheduled after every other block) and the
scene's finishing touches."""

from __future__ import annotations

from services.tools.scenarios.blocks.common import cast
from services.tools.scenarios.dsl import Scene


def digest(scene: Scene, i: int) -> None:
    """Scheduled last: needs every approval's final outcome (see :func:`finish`)."""
    scene.facts["digest"] = True


def _digest(scene: Scene) -> None:
    c = cast(scene)
    final = scene.facts["final"]
    yes = sorted(r for r, v in final.items() if v == "approve")
    no = sorted(r for r, v in final.items() if v == "decline")
    item = scene.word("item", "request")
    scene.add(
        "wrap-up",
        f"{c['lead'].name} asks for the week's wrap-up",
        at=scene.at(scene.spec.days - 1, 14),
        expected=scene.at(scene.spec.days - 1, 14),
        effects=[
            scene.post(
                c["channel"],
                c["lead"],
                f"Wrap-up please: which {item}s ended up approved? Refs only.",
            )
        ],
        checks=[
            scene.check(
                "say.reply",
                scene.end,
                "posted exactly the requests that ended approved",
                channel=c["channel"],
                after_event="wrap-up",
                contains=yes or ["none"],  # nothing approved: say so, not a bare verdict
                excludes=no,
                max=1,
            ),
            scene.check(
                "world.collateral",
                scene.end,
                "no changes outside what the task needs",
                allow=ASSISTANT_WRITES,
            ),
        ],
        steps=[
            scene.channel_step(
                c["channel"],
                "Approved: " + ", ".join(yes) + "."
                if yes
                else f"None of the {item}s ended approved.",
            )
        ],
        tags=["digest"],
    )


# Tables an assistant legitimately writes when it mails, posts, records and books; the
# wrap-up's collateral check allows exactly these (inserts and updates, never deletes).
ASSISTANT_WRITES: dict[str, list[str]] = {
    "gmail_messages": ["insert", "update"],
    "gmail_history": ["insert"],
    "gmail_mailboxes": ["update"],
    "slack_messages": ["insert"],
    "slack_meta": ["update"],
    "slack_channels": ["insert"],
    "slack_members": ["insert"],
    "calendar_events": ["insert", "update"],
    "calendar_meta": ["update"],
    "notion_pages": ["insert", "update"],
    "notion_blocks": ["insert", "update"],  # a drafted page's content
    "notion_meta": ["update"],
    "canvas_objects": ["insert", "update"],  # submissions, grades, messages, events
    "canvas_meta": ["update"],
}


def finish(scene: Scene) -> None:
    """After every block: the wrap-up, and each check's distractors (the other refs)."""
    if scene.facts.pop("digest", False):
        _digest(scene)
    refs = list(scene.facts["refs"])
    for ev in scene.events:
        for chk in ev.checks:
            own = chk.args.pop("_other_refs", None)
            if own is not None:
                chk.args["excludes"] = [
                    *chk.args.get("excludes", []),
                    *(r for r in refs if r != own),
                ]
    for key in ("cast", "precedence", "offsets"):
        scene.facts.pop(key, None)
