"""The ``drafting`` block: a requester states what a Notion page must hold (its sections, a
word limit, figures it must mention, a deadline); the assistant drafts it and says so; the
requester then adds a section and tightens the limit. Checks read the page's blocks."""

from __future__ import annotations

from typing import Any

from services.tools.scenarios.blocks.common import cast, first, fmt
from services.tools.scenarios.dsl import Scene, legacy
from services.tools.scenarios.generator import day_name
from shared.contracts.tools import Trigger

SECTIONS = ["Background", "Proposal", "Risks", "Costs", "Timeline", "Open questions"]


def _block(kind: str, text: str) -> dict[str, Any]:
    return {
        "object": "block",
        "type": kind,
        kind: {"rich_text": [{"type": "text", "text": {"content": text}}]},
    }


def _page_step(parent: str, title: str, body: list[dict[str, Any]]) -> dict[str, Any]:
    props = {"title": {"title": [{"text": {"content": title}}]}}
    return {
        "tool": "API-post-page",
        "args": {
            "parent": {"page_id": {"$notion_page": parent}},
            "properties": props,
            "children": body,
        },
        **legacy("notion.create_page", parent=parent, title=title, children=body),
    }


def _append_step(title: str, body: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "tool": "API-patch-block-children",
        "args": {"block_id": {"$notion_page": title}, "children": body},
        **legacy("notion.append", page=title, children=body),
    }


def drafting(scene: Scene, i: int) -> None:
    c = cast(scene)
    g = scene.gen
    who = scene.person(scene.word("drafter_role", "Programme manager"))
    source = scene.person(scene.word("figure_role", "Analyst"))
    doc = scene.word("document", "briefing note")
    metric = scene.word("metric", "quarterly spend")
    title = f"{doc.capitalize()} {g.ref('DOC')}"
    names = list(scene.vocab.get("sections") or SECTIONS)
    sec = g.sample(names, 4)
    wanted, extra = sec[:3], sec[3]
    limit = g.pick([160, 180, 200])
    tighter = limit - 60
    lo, hi = float(scene.vocab.get("lo", 100)), float(scene.vocab.get("hi", 5000))
    right = round(g.amount(lo * 10, hi * 10), 0)
    stale = right + round(g.amount(lo, hi), 0)
    cap, metric_v, stale_v = fmt(scene, c["cap"]), fmt(scene, right), fmt(scene, stale)
    processed = c["processed"].strftime("%A")
    policy = scene.word("policy", "limit")
    scene.old_mail.append(
        scene.mail(
            source,
            f"The {metric}",
            f"Hi {first(scene.user)}, the {metric} came out at {metric_v}. Ignore the "
            f"{stale_v} in my earlier draft: that counted a cancelled order twice.\n\n{source.name}",
            scene.msgid(f"drafting-{i}-figure"),
            date=scene.at(0, 7, 40 + i).isoformat(),
            labels=["INBOX"],
        )
    )
    d = i % max(1, scene.spec.days - 4)
    due = scene.at(d + 1, 16)
    b = f"drafting-{i}"
    m1 = scene.msgid(f"{b}-ask")
    subject = f"Draft: {title}"
    space = f"{g.company} team space"
    e1 = scene.add(
        f"{b}-request",
        f"{who.name} asks for a {doc} in Notion",
        at=scene.at(d, 10, 30),
        expected=scene.at(d, 10, 30),
        effects=[
            scene.mail(
                who,
                subject,
                f"Hi {first(scene.user)},\n\nCould you draft a {doc} as a Notion page titled "
                f'"{title}" under the {space} page, by {day_name(due)} 16:00? It needs three '
                f"sections, as headings in this order: {', '.join(wanted)}. Keep it under "
                f"{limit} words in all. It must mention the {policy} and the "
                f"{metric} ({first(source)} mailed it). Mail me when it's up.\n\n{who.name}",
                m1,
            )
        ],
        checks=[
            scene.check(
                "notion.page",
                due,
                f"the page has the three sections in order, under {limit} words, both figures",
                title=title,
                sections=wanted,
                max_words=limit,
                min_words=20,
                contains=[cap, metric_v],
                excludes=[stale_v],
                max_count=1,
            ),
            scene.check(
                "say.reply",
                due,
                f"told {who.name} (only) the page is up",
                thread_of=m1,
                to=[who.email],
                contains=[title],
                max=1,
            ),
        ],
        steps=[
            _page_step(
                space,
                title,
                [
                    _block("heading_2", wanted[0]),
                    _block(
                        "paragraph",
                        f"The {policy} is {cap}; requests at or under it can be signed off.",
                    ),
                    _block("heading_2", wanted[1]),
                    _block("paragraph", f"The {metric} came out at {metric_v}."),
                    _block("heading_2", wanted[2]),
                    _block("paragraph", "We keep within both figures and review them weekly."),
                ],
            ),
            scene.reply_step(m1, [who], subject, f'The page "{title}" is up in Notion.'),
        ],
        tags=["notion", "drafting"],
    )
    scene.add(
        f"{b}-revision",
        f"{who.name} adds a section and tightens the limit",
        trigger=Trigger(
            app="gmail",
            action="messages.send",
            where={"thread_msgids": m1, "to": who.email},
            since_event=e1,
            next_morning="09:30",
        ),
        expected=scene.at(d + 1, 9, 30),
        effects=[
            scene.npc_mail(
                who,
                f"Thanks! Two changes: add a fourth section, {extra}, at the end, saying which "
                f"day decided items are processed; and keep the whole page under {tighter} "
                "words now.",
                scene.msgid(f"{b}-revision"),
                m1,
            )
        ],
        checks=[
            scene.check(
                "notion.page",
                scene.at(d + 2, 12),
                f"the page has the fourth section with the processing day, under {tighter} words",
                title=title,
                sections=[*wanted, extra],
                section_contains={extra: [processed]},
                max_words=tighter,
                min_words=20,
                contains=[cap, metric_v],
                excludes=[stale_v],
                max_count=1,
            )
        ],
        steps=[
            _append_step(
                title,
                [
                    _block("heading_2", extra),
                    _block("paragraph", f"Decided items are processed on {processed}."),
                ],
            )
        ],
        depends_on=[e1],
        tags=["notion", "drafting", "late-info"],
    )
