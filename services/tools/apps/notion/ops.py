"""Notion effects (workspace, tracker databases, colleagues' rows) and predicates (rows the
agent keeps up to date), over ``services.tools.apps.notion.actions``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from services.tools.context import WorldContext
from services.tools.events.registry import EffectEnv, Outcome, effect, predicate


def _a():  # type: ignore[no-untyped-def]
    from services.tools.apps.notion import actions

    return actions


def _schema(props: dict[str, Any]) -> dict[str, Any]:
    """``{"Name": "title", "Team": ["select", [options]], "Notes": "rich_text"}`` → Notion's."""
    out: dict[str, Any] = {}
    for name, kind in props.items():
        if isinstance(kind, list):
            out[name] = {kind[0]: {"options": [{"name": o} for o in kind[1]]}}
        else:
            out[name] = {kind: {}}
    return out


def row_properties(values: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Plain values → Notion property values, by the database's simple schema."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        kind = schema[name][0] if isinstance(schema[name], list) else schema[name]
        if kind == "title":
            out[name] = {"title": [{"text": {"content": str(value)}}]}
        elif kind == "rich_text":
            out[name] = {"rich_text": [{"text": {"content": str(value)}}]}
        elif kind in ("select", "status"):
            out[name] = {kind: {"name": str(value)}}
        elif kind == "date":
            out[name] = {"date": {"start": str(value)}}
        elif kind == "checkbox":
            out[name] = {"checkbox": bool(value)}
        elif kind == "number":
            out[name] = {"number": value}
    return out


@effect("notion.setup")
def setup(ctx: WorldContext, args: dict[str, Any], env: EffectEnv) -> None:
    """Workspace, people, and ``databases`` ({title, properties: simple schema, rows}) under a
    top-level page."""
    a = _a()
    a.setup_workspace(ctx, workspace_name=args.get("workspace", "k3stack"))
    for p in args.get("people", []):
        a.create_user(ctx, name=p["name"], email=p["email"])
    page = a.create_page(
        ctx,
        parent={"workspace": True},
        properties={"title": {"title": [{"text": {"content": args.get("page", "Team space")}}]}},
    )
    for db in args.get("databases", []):
        made = a.create_database(
            ctx,
            parent={"page_id": page["id"]},
            title=[{"text": {"content": db["title"]}}],
            properties=_schema(db["properties"]),
        )
        for row in db.get("rows", []):
            a.create_page(
                ctx,
                parent={"database_id": made["id"]},
                properties=row_properties(row, db["properties"]),
            )


def _database_id(ctx: WorldContext, title: str) -> str | None:
    from services.tools.apps.notion.models import NotionDatabase

    for db in ctx.session.scalars(
        select(NotionDatabase).where(
            NotionDatabase.world_id == ctx.world_id, NotionDatabase.archived.is_(False)
        )
    ):
        if _a().plain(db.title).strip().lower() == title.lower():
            return db.id
    return None


def _value(prop: dict[str, Any]) -> Any:
    kind = prop.get("type")
    val = prop.get(kind)
    if kind in ("title", "rich_text"):
        return _a().plain(val)
    if kind in ("select", "status"):
        return (val or {}).get("name")
    if kind == "date":
        return (val or {}).get("start")
    return val


def _same(have: Any, want: Any) -> bool:
    """Numbers compare as numbers (1200 == 1200.0), anything else as text, ignoring case."""
    if isinstance(want, int | float) and not isinstance(want, bool):
        try:
            return have is not None and float(have) == float(want)
        except (TypeError, ValueError):
            return False
    return str(have if have is not None else "").lower() == str(want).lower()


@predicate("notion.row")
def row(ctx: WorldContext, args: dict[str, Any]) -> Outcome:
    """A live row of ``database`` (by title) whose title contains ``title`` and whose
    properties equal ``props`` (plain values; text compared case-insensitively)."""
    from services.tools.apps.notion.models import NotionPage

    db_id = _database_id(ctx, args["database"])
    if db_id is None:
        return Outcome(False, {"error": "no such database"})
    seen = []
    for page in ctx.session.scalars(
        select(NotionPage).where(
            NotionPage.world_id == ctx.world_id,
            NotionPage.parent_id == db_id,
            NotionPage.archived.is_(False),
        )
    ):
        props = {k: _value(v) for k, v in _a().page_json(ctx, page)["properties"].items()}
        title = next(
            (
                str(v)
                for k, v in props.items()
                if _a().page_json(ctx, page)["properties"][k].get("type") == "title"
            ),
            "",
        )
        if args.get("title", "").lower() not in title.lower():
            continue
        seen.append(props)
        if all(_same(props.get(k), v) for k, v in args.get("props", {}).items()):
            return Outcome(True, {"row": props})
    return Outcome(False, {"candidates": seen[:5]})
