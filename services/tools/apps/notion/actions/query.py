"""Notion's reads across many objects: the database query and the workspace search."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from services.tools.apps.notion.actions._base import (
    _list,
    _paginate,
    _title_of_page,
    data_sources,
    workspace,
)
from services.tools.apps.notion.actions.databases import _database, data_source_json, database_json
from services.tools.apps.notion.actions.pages import page_json
from services.tools.apps.notion.errors import validation
from services.tools.apps.notion.filters import _matches, _sort_key
from services.tools.apps.notion.models import (
    NotionDatabase,
    NotionPage,
)
from services.tools.apps.notion.values import _find_prop, plain
from services.tools.context import WorldContext


def query_database(
    ctx: WorldContext,
    *,
    database_id: str,
    filter: Any = None,  # noqa: A002 - the API's name
    sorts: Any = None,
    start_cursor: str | None = None,
    page_size: int | None = None,
) -> dict[str, Any]:
    """``POST /databases/{id}/query``: filter (property, timestamp, compound and/or), sorts, paging."""
    workspace(ctx)
    db = _database(ctx, database_id)
    pages = ctx.session.scalars(
        select(NotionPage)
        .where(
            NotionPage.world_id == ctx.world_id,
            NotionPage.parent_type == "database_id",
            NotionPage.parent_id == db.id,
            NotionPage.archived.is_(False),
        )
        .order_by(NotionPage.seq)
    ).all()
    rows = [(p, page_json(ctx, p)) for p in pages]
    if filter:
        rows = [(p, j) for p, j in rows if _matches(ctx, p, j["properties"], db.properties, filter)]
    if sorts:
        if not isinstance(sorts, list):
            raise validation("body.sorts should be an array.")
        for s in reversed(sorts):
            if not isinstance(s, dict):
                raise validation("body.sorts entries should be objects.")
            direction = s.get("direction", "ascending")
            if direction not in ("ascending", "descending"):
                raise validation("sort direction should be `ascending` or `descending`.")
            if "timestamp" in s:
                attr = s["timestamp"]
                if attr not in ("created_time", "last_edited_time"):
                    raise validation(
                        "sort timestamp should be `created_time` or `last_edited_time`."
                    )
                rows.sort(
                    key=lambda pj, a=attr: (getattr(pj[0], a), pj[0].seq),
                    reverse=direction == "descending",
                )
                continue
            if "property" not in s:
                raise validation("Each sort needs `property` or `timestamp`.")
            found = _find_prop(db.properties, s["property"])
            if found is None:
                raise validation(f"Could not find sort property with name or id: {s['property']}")
            name, entry = found

            def key(
                pj: tuple[NotionPage, dict[str, Any]], name: str = name, kind: str = entry["type"]
            ) -> Any:
                v = _sort_key(kind, pj[1]["properties"][name][kind])
                return (v is None or v == "", v if v is not None else 0)

            present = [pj for pj in rows if not key(pj)[0]]
            missing = [pj for pj in rows if key(pj)[0]]
            present.sort(key=key, reverse=direction == "descending")
            rows = present + missing  # empty values last either way, as Notion does
    chunk, nxt = _paginate(rows, start_cursor, page_size, lambda pj: pj[0].id)
    kind = "page_or_data_source" if data_sources(ctx) else "page_or_database"
    return _list([j for _, j in chunk], nxt, kind)


# --------------------------------------------------------------------------- search


def search(
    ctx: WorldContext,
    *,
    query: str | None = None,
    filter: Any = None,  # noqa: A002
    sort: Any = None,
    start_cursor: str | None = None,
    page_size: int | None = None,
) -> dict[str, Any]:
    """``POST /search``: pages and databases whose title contains ``query`` (case-insensitive)."""
    workspace(ctx)
    db_kind = "data_source" if data_sources(ctx) else "database"
    kinds = {"page", db_kind}
    if filter is not None:
        if (
            not isinstance(filter, dict)
            or filter.get("property") != "object"
            or filter.get("value") not in kinds
        ):
            raise validation(
                f'body.filter should be {{"property": "object", "value": "page" | "{db_kind}"}}.'
            )
        kinds = {filter["value"]}
    direction = "descending"
    if sort is not None:
        if not isinstance(sort, dict) or sort.get("timestamp") != "last_edited_time":
            raise validation('body.sort.timestamp should be `"last_edited_time"`.')
        direction = sort.get("direction", "descending")
        if direction not in ("ascending", "descending"):
            raise validation("body.sort.direction should be `ascending` or `descending`.")
    if query is not None and not isinstance(query, str):
        raise validation(f"body.query should be a string, instead was `{query!r}`.")
    needle = (query or "").strip().lower()
    found: list[tuple[datetime, int, str, dict[str, Any]]] = []
    if "page" in kinds:
        for p in ctx.session.scalars(
            select(NotionPage).where(
                NotionPage.world_id == ctx.world_id, NotionPage.archived.is_(False)
            )
        ):
            if needle in _title_of_page(p).lower():
                found.append((p.last_edited_time, p.seq, p.id, page_json(ctx, p)))
    if db_kind in kinds:
        render = data_source_json if data_sources(ctx) else database_json
        for d in ctx.session.scalars(
            select(NotionDatabase).where(
                NotionDatabase.world_id == ctx.world_id, NotionDatabase.archived.is_(False)
            )
        ):
            if needle in plain(d.title).lower():
                found.append((d.last_edited_time, d.seq, d.id, render(ctx, d)))
    found.sort(key=lambda f: (f[0], f[1]), reverse=direction == "descending")
    chunk, nxt = _paginate(found, start_cursor, page_size, lambda f: f[2])
    return _list([f[3] for f in chunk], nxt, f"page_or_{db_kind}")
