"""Notion's pages endpoints (create, retrieve, update, retrieve a property) and the page JSON."""

from __future__ import annotations

import re
from typing import Any

from services.tools.apps.notion.actions._base import (
    APP,
    _actor,
    _get,
    _list,
    _new_id,
    _next_seq,
    _page_size,
    _parent_json,
    _title_of_page,
    _user_ref,
    data_sources,
    workspace,
)
from services.tools.apps.notion.actions.blocks import _append, _insert_block
from services.tools.apps.notion.actions.properties import _unwrap, _value, rich_text
from services.tools.apps.notion.errors import not_found, validation
from services.tools.apps.notion.models import (
    NotionBlock,
    NotionDatabase,
    NotionPage,
)
from services.tools.apps.notion.values import _find_prop, _iso, normalize_id
from services.tools.context import WorldContext


def _url(title: str, object_id: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", title).strip("-")
    tail = object_id.replace("-", "")
    return f"https://www.notion.so/{slug + '-' if slug else ''}{tail}"


def page_json(ctx: WorldContext, page: NotionPage) -> dict[str, Any]:
    props: dict[str, Any] = {}
    schema = None
    if page.parent_type == "database_id":
        db = _get(ctx, NotionDatabase, page.parent_id)
        schema = db.properties if db else None
    if schema:
        for name, entry in schema.items():
            kind = entry["type"]
            if kind == "created_time":
                value: Any = _iso(page.created_time)
            elif kind == "last_edited_time":
                value = _iso(page.last_edited_time)
            elif kind == "created_by":
                value = _user_ref(page.created_by)
            elif kind == "last_edited_by":
                value = _user_ref(page.last_edited_by)
            else:
                stored = page.properties.get(entry["id"])
                value = stored.get(kind) if stored else _empty(kind)
            prop = {"id": entry["id"], "type": kind, kind: value}
            if kind == "relation":
                prop["has_more"] = False
            props[name] = prop
    else:
        props = {k: dict(v) for k, v in page.properties.items()}
    return {
        "object": "page",
        "id": page.id,
        "created_time": _iso(page.created_time),
        "last_edited_time": _iso(page.last_edited_time),
        "created_by": _user_ref(page.created_by),
        "last_edited_by": _user_ref(page.last_edited_by),
        "cover": page.cover,
        "icon": page.icon,
        "parent": (
            {
                "type": "data_source_id",
                "data_source_id": page.parent_id,
                "database_id": page.parent_id,
            }
            if page.parent_type == "database_id" and data_sources(ctx)
            else _parent_json(page.parent_type, page.parent_id)
        ),
        "archived": page.archived,
        "in_trash": page.archived,
        "properties": props,
        "url": _url(_title_of_page(page), page.id),
        "public_url": None,
    }


def _empty(kind: str) -> Any:
    if kind in ("title", "rich_text", "multi_select", "people", "relation"):
        return []
    if kind == "checkbox":
        return False
    return None


def _page(ctx: WorldContext, page_id: str) -> NotionPage:
    page = _get(ctx, NotionPage, normalize_id(page_id))
    if page is None:
        raise not_found(page_id, "page")
    return page


def _parent(ctx: WorldContext, parent: Any) -> tuple[str, str]:
    if not isinstance(parent, dict):
        raise validation("body.parent should be an object, instead was `undefined`.")
    if parent.get("database_id") or parent.get("data_source_id"):
        key = parent.get("data_source_id") or parent["database_id"]
        db = _get(ctx, NotionDatabase, normalize_id(key))
        if db is None:
            raise not_found(key, "database")
        if db.archived:
            raise validation("Can't add pages to an archived database.")
        return "database_id", db.id
    if parent.get("page_id"):
        pg = _get(ctx, NotionPage, normalize_id(parent["page_id"]))
        if pg is None:
            raise not_found(parent["page_id"], "page")
        if pg.archived:
            raise validation(
                "Can't edit block that is archived. You must unarchive the block before editing."
            )
        return "page_id", pg.id
    if parent.get("workspace") is True or parent.get("type") == "workspace":
        return "workspace", ""
    raise validation("body.parent.page_id or body.parent.database_id should be defined.")


def _set_properties(ctx: WorldContext, page: NotionPage, props: Any, *, creating: bool) -> None:
    if props is None:
        props = {}
    if not isinstance(props, dict):
        raise validation("body.properties should be an object.")
    if page.parent_type == "database_id":
        db = _get(ctx, NotionDatabase, page.parent_id)
        schema = {k: dict(v) for k, v in db.properties.items()}
        for kind in ("select", "multi_select", "status"):
            for entry in schema.values():
                if entry["type"] == kind:
                    entry[kind] = {
                        **entry[kind],
                        "options": [dict(o) for o in entry[kind]["options"]],
                    }
        stored = dict(page.properties)
        changed = False
        for key, raw in props.items():
            found = _find_prop(schema, key)
            if found is None:
                raise validation(f"{key} is not a property that exists.")
            name, entry = found
            value, grew = _value(ctx, entry, _unwrap(entry, raw, name), name)
            changed = changed or grew
            stored[entry["id"]] = {"id": entry["id"], "type": entry["type"], entry["type"]: value}
        if changed:
            db.properties = schema
        page.properties = stored
        return
    # A page under a page or the workspace has exactly one property: its title.
    stored = dict(page.properties) if not creating else {}
    for key, raw in props.items():
        if key not in ("title", "Title", "Name") and not (
            isinstance(raw, dict) and ("title" in raw or raw.get("type") == "title")
        ):
            raise validation(
                f"{key} is not a property that exists. Pages outside a database have only `title`."
            )
        value = raw.get("title") if isinstance(raw, dict) else raw
        stored = {"title": {"id": "title", "type": "title", "title": rich_text(value, "title")}}
    if creating and not stored:
        stored = {"title": {"id": "title", "type": "title", "title": []}}
    page.properties = stored


def create_page(
    ctx: WorldContext,
    *,
    parent: Any,
    properties: Any = None,
    children: Any = None,
    icon: Any = None,
    cover: Any = None,
    as_user: str | None = None,
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    parent_type, parent_id = _parent(ctx, parent)
    now = ctx.now
    page = NotionPage(
        world_id=ctx.world_id,
        id=_new_id(ctx),
        parent_type=parent_type,
        parent_id=parent_id,
        properties={},
        icon=icon,
        cover=cover,
        created_time=now,
        last_edited_time=now,
        created_by=actor,
        last_edited_by=actor,
        archived=False,
        seq=_next_seq(ctx),
    )
    _set_properties(ctx, page, properties, creating=True)
    ctx.session.add(page)
    ctx.session.flush()
    if parent_type == "page_id":
        _insert_block(
            ctx,
            "page_id",
            parent_id,
            "child_page",
            {"title": _title_of_page(page)},
            actor,
            block_id=page.id,
        )
    if children:
        _append(ctx, "page_id", page.id, children, actor, None)
    ctx.record(
        APP,
        "pages.create",
        {
            "page_id": page.id,
            "parent": _parent_json(parent_type, parent_id),
            "title": _title_of_page(page),
            "user": actor,
        },
    )
    return page_json(ctx, page)


def retrieve_page(ctx: WorldContext, *, page_id: str) -> dict[str, Any]:
    workspace(ctx)
    return page_json(ctx, _page(ctx, page_id))


def update_page(
    ctx: WorldContext,
    *,
    page_id: str,
    properties: Any = None,
    archived: bool | None = None,
    in_trash: bool | None = None,
    icon: Any = ...,
    cover: Any = ...,
    as_user: str | None = None,
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    page = _page(ctx, page_id)
    trash = in_trash if in_trash is not None else archived
    if trash is not None and not isinstance(trash, bool):
        raise validation("body.archived should be a boolean.")
    if page.archived and trash is not False and (properties or icon is not ... or cover is not ...):
        raise validation(
            "Can't edit block that is archived. You must unarchive the block before editing."
        )
    before = page_json(ctx, page)["properties"]
    if properties:
        _set_properties(ctx, page, properties, creating=False)
    if icon is not ...:
        page.icon = icon
    if cover is not ...:
        page.cover = cover
    if trash is not None:
        page.archived = trash
        block = _get(ctx, NotionBlock, page.id)
        if block is not None:
            block.archived = trash
    block = _get(ctx, NotionBlock, page.id)
    if block is not None and block.type == "child_page":
        block.content = {"title": _title_of_page(page)}
    page.last_edited_time = ctx.now
    page.last_edited_by = actor
    ctx.session.flush()
    after = page_json(ctx, page)
    changed = sorted(k for k, v in after["properties"].items() if before.get(k) != v)
    ctx.record(
        APP,
        "pages.update",
        {"page_id": page.id, "changed": changed, "archived": page.archived, "user": actor},
    )
    return after


def retrieve_page_property(
    ctx: WorldContext,
    *,
    page_id: str,
    property_id: str,
    start_cursor: str | None = None,
    page_size: int | None = None,
) -> dict[str, Any]:
    """``GET /pages/{id}/properties/{property_id}``: a property item, or a paginated list of
    them for title, rich_text, people and relation (as the API returns them)."""
    workspace(ctx)
    rendered = page_json(ctx, _page(ctx, page_id))["properties"]
    prop = next(
        (p for name, p in rendered.items() if p["id"] == property_id or name == property_id), None
    )
    if prop is None:
        raise not_found(property_id, "property")
    kind = prop["type"]
    if kind not in ("title", "rich_text", "people", "relation"):
        return {"object": "property_item", "id": prop["id"], "type": kind, kind: prop[kind]}
    items = [
        {"object": "property_item", "id": prop["id"], "type": kind, kind: v} for v in prop[kind]
    ]
    size = _page_size(page_size)
    start = 0
    if start_cursor:
        if not str(start_cursor).isdigit():
            raise validation("start_cursor should be a valid cursor.")
        start = int(start_cursor)
    chunk = items[start : start + size]
    nxt = str(start + size) if start + size < len(items) else None
    out = _list(chunk, nxt, "property_item")
    out["property_item"] = {"id": prop["id"], "next_url": None, "type": kind, kind: {}}
    return out
