"""State-based checks over what the assistant writes for others to read: a Notion page drafted
against stated requirements (``notion.page``), and a report whose figures are computed from
the world's state when the check runs (``report.figures``), not copied from the scenario.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import select

from services.tools.context import WorldContext
from services.tools.events.ops.say import conversation, has
from services.tools.events.registry import Outcome, lower_all, predicate

_HEADINGS = ("heading_1", "heading_2", "heading_3")
_MONEY = re.compile(r"\$\s?([0-9][0-9,]*(?:\.[0-9]{1,2})?)")


def _plain(texts: Any) -> str:
    from services.tools.apps.notion.values import plain

    return plain(texts or [])


def _title(page: Any) -> str:
    for prop in (page.properties or {}).values():
        if isinstance(prop, dict) and prop.get("type", "title") == "title" and "title" in prop:
            return _plain(prop["title"]).strip()
    return ""


def pages_titled(ctx: WorldContext, title: str) -> list[Any]:
    """Live pages (not database rows) whose title is ``title`` (case and spaces ignored)."""
    from services.tools.apps.notion.models import NotionPage

    want = " ".join(title.lower().split())
    return [
        p
        for p in ctx.session.scalars(
            select(NotionPage)
            .where(
                NotionPage.world_id == ctx.world_id,
                NotionPage.archived.is_(False),
                NotionPage.parent_type != "database_id",
            )
            .order_by(NotionPage.seq)
        )
        if " ".join(_title(p).lower().split()) == want
    ]


def page_blocks(ctx: WorldContext, page_id: str) -> list[tuple[str, str]]:
    """The page's blocks in reading order, nested ones after their parent: (type, text)."""
    from services.tools.apps.notion.actions import child_blocks

    out: list[tuple[str, str]] = []

    def walk(parent: str, depth: int) -> None:
        for b in child_blocks(ctx, parent):
            content = b.content or {}
            out.append(
                (b.type, _plain(content.get("rich_text")) if isinstance(content, dict) else "")
            )
            if depth < 4 and b.type not in ("child_page", "child_database"):
                walk(b.id, depth + 1)

    walk(page_id, 0)
    return out


def word_count(text: str) -> int:
    """Words as the word limit counts them (figures like "$1,200.00" are one word)."""
    return len(re.findall(r"[0-9A-Za-z$€£][^\s]*", text))


def _section_key(text: str) -> str:
    return " ".join(text.lower().strip().rstrip(":").split())


@predicate("notion.page")
def page(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """A Notion page (not a database row) titled ``title`` meets stated requirements:

    - ``max_count`` (1): at most this many pages have that title (one draft, not several);
    - ``sections``: each is a heading of the page (case ignored, a trailing colon too), in
      this order, with some text under it before the next heading;
    - ``max_words`` / ``min_words``: the words of every block of the page, headings included;
    - ``contains``: every term appears in the page's text (as a whole token);
      ``section_contains``: {section: terms} the text under that heading has each term;
    - ``excludes``: no term appears (stale figures, confidential values).
    """
    found = pages_titled(ctx, args["title"])
    if not found:
        return Outcome(False, {"reason": f"no page titled {args['title']!r}"})
    why: list[str] = []
    if len(found) > int(args.get("max_count", 1)):
        why.append(f"{len(found)} pages titled {args['title']!r}")
    blocks = page_blocks(ctx, found[-1].id)
    text = "\n".join(t for _, t in blocks)
    sections: dict[str, list[str]] = {}
    order: list[str] = []
    current: str | None = None
    for kind, t in blocks:
        if kind in _HEADINGS:
            current = _section_key(t)
            order.append(current)
            sections.setdefault(current, [])
        elif current is not None and t.strip():
            sections[current].append(t)
    want = [_section_key(s) for s in args.get("sections", [])]
    missing = [s for s in want if s not in sections]
    if missing:
        why.append(f"no section {missing}")
    empty = [s for s in want if s in sections and not sections[s]]
    if empty:
        why.append(f"nothing under {empty}")
    present = [s for s in order if s in want]
    if not missing and present != want:
        why.append(f"sections in the order {present}, want {want}")
    words = word_count(text)
    if args.get("max_words") is not None and words > int(args["max_words"]):
        why.append(f"{words} words, over the limit of {args['max_words']}")
    if words < int(args.get("min_words", 1)):
        why.append(f"{words} words, under {args.get('min_words', 1)}")
    lacking = [v for v in lower_all(args.get("contains")) if not has(text, v)]
    if lacking:
        why.append(f"the page lacks {lacking}")
    for sec, terms in (args.get("section_contains") or {}).items():
        body = "\n".join(sections.get(_section_key(sec), []))
        short = [v for v in lower_all(terms) if not has(body, v)]
        if short:
            why.append(f"the {sec!r} section lacks {short}")
    leaked = [v for v in lower_all(args.get("excludes")) if has(text, v)]
    if leaked:
        why.append(f"the page has what it must not: {leaked}")
    return Outcome(
        not why, {"reasons": why, "words": words, "sections": order, "pages": len(found)}
    )


# --- report figures, computed from the world ------------------------------------------------


def _day(value: str) -> tuple[datetime, datetime]:
    d = date.fromisoformat(value[:10])
    start = datetime(d.year, d.month, d.day, tzinfo=datetime.fromisoformat(value).tzinfo)
    return start, start + timedelta(days=1)


def _notion_sum(ctx: WorldContext, spec: dict[str, Any]) -> float:
    """The sum of ``property`` over the live rows of ``database`` whose ``where`` values match."""
    from services.tools.apps.notion import actions
    from services.tools.apps.notion.models import NotionDatabase, NotionPage

    want_db = spec["database"].lower()
    total = 0.0
    for db in ctx.session.scalars(
        select(NotionDatabase).where(
            NotionDatabase.world_id == ctx.world_id, NotionDatabase.archived.is_(False)
        )
    ):
        if _plain(db.title).strip().lower() != want_db:
            continue
        for row in ctx.session.scalars(
            select(NotionPage).where(
                NotionPage.world_id == ctx.world_id,
                NotionPage.parent_id == db.id,
                NotionPage.archived.is_(False),
            )
        ):
            props = actions.page_json(ctx, row)["properties"]
            values = {k: _prop_value(v) for k, v in props.items()}
            if all(
                str(values.get(k) or "").strip().lower() == str(v).lower()
                for k, v in spec.get("where", {}).items()
            ):
                n = values.get(spec["property"])
                total += float(n) if isinstance(n, int | float) else 0.0
    return total


def _prop_value(prop: dict[str, Any]) -> Any:
    kind = prop.get("type")
    val = prop.get(kind)
    if kind in ("title", "rich_text"):
        return _plain(val)
    if kind in ("select", "status"):
        return (val or {}).get("name")
    return val


def _calendar_count(ctx: WorldContext, spec: dict[str, Any]) -> float:
    """Live events on ``date`` (the day of that ISO time) whose summary has ``summary_contains``."""
    from services.tools.apps.calendar.models import CalendarEvent
    from services.tools.context import _aware

    start, end = _day(spec["date"])
    tag = spec.get("summary_contains", "").lower()
    return float(
        sum(
            1
            for e in ctx.session.scalars(
                select(CalendarEvent).where(CalendarEvent.world_id == ctx.world_id)
            )
            if e.status != "cancelled"
            and start <= _aware(e.start_at) < end
            and tag in (e.summary or "").lower()
        )
    )


def _gmail_sum(ctx: WorldContext, spec: dict[str, Any]) -> float:
    """The first money figure of each mail received on ``date`` whose subject has
    ``subject_contains`` (mail in the bin counts too: binning a mail does not undo it)."""
    from services.tools.apps.gmail.models import GmailMessage
    from services.tools.context import _aware

    start, end = _day(spec["date"])
    tag = spec["subject_contains"].lower()
    total = 0.0
    for m in ctx.session.scalars(select(GmailMessage).where(GmailMessage.world_id == ctx.world_id)):
        if "SENT" in (m.label_ids or []) or not start <= _aware(m.internal_date) < end:
            continue
        if tag not in (m.subject or "").lower():
            continue
        hit = _MONEY.search(m.text or "")
        if hit:
            total += float(hit.group(1).replace(",", ""))
    return total


SOURCES = {"notion.sum": _notion_sum, "calendar.count": _calendar_count, "gmail.sum": _gmail_sum}


def figure_text(value: float, unit: str) -> str:
    if unit == "money":
        return f"${value:,.2f}"
    if unit == "count":
        return str(int(value))
    return f"{int(value)} {unit}"


def figures(ctx: WorldContext, specs: list[dict[str, Any]]) -> list[str]:
    """Each figure of ``specs`` ({source, unit, ...}) computed from the world now, as text."""
    return [figure_text(SOURCES[s["source"]](ctx, s), s.get("unit", "count")) for s in specs]


@predicate("report.figures")
def report(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """A report in one conversation (as ``say.reply``: ``channel``, ``dm_with``, ``after_event``,
    ...) whose last statement states every figure of ``figures``, each computed from the
    world's state as the check runs (a Notion sum, a calendar count, a sum over mails), in at
    most ``max`` (1) statements."""
    said = conversation(ctx, args)
    if said is None:
        return Outcome(False, {"reason": "the event this answers has not happened"})
    want = figures(ctx, args.get("figures", []))
    why: list[str] = []
    if not 1 <= len(said) <= int(args.get("max", 1)):
        why.append(f"{len(said)} statements in the conversation, want 1..{args.get('max', 1)}")
    if said:
        missing = [v for v in want if not has(said[-1].text, v)]
        if missing:
            why.append(f"the report lacks {missing}")
    return Outcome(
        not why, {"reasons": why, "figures": want, "statements": [s.view() for s in said][:3]}
    )
