"""Notion's databases and data sources endpoints (create, retrieve, update) and their JSON."""

from __future__ import annotations

from typing import Any

from services.tools.apps.notion.actions._base import (
    APP,
    _actor,
    _get,
    _new_id,
    _next_seq,
    _parent_json,
    _user_ref,
    data_sources,
    workspace,
)
from services.tools.apps.notion.actions.blocks import _insert_block
from services.tools.apps.notion.actions.pages import _parent, _url
from services.tools.apps.notion.actions.properties import _schema, _schema_entry, rich_text
from services.tools.apps.notion.errors import not_found, validation
from services.tools.apps.notion.models import (
    NotionDatabase,
)
from services.tools.apps.notion.values import _find_prop, _iso, normalize_id, plain
from services.tools.context import WorldContext

# --------------------------------------------------------------------------- databases


def database_json(ctx: WorldContext, db: NotionDatabase) -> dict[str, Any]:
    """A database; at 2025-09-03 its schema moves to its (single) data source."""
    body = _database_body(ctx, db)
    if data_sources(ctx):
        body.pop("properties")
        body["data_sources"] = [{"id": db.id, "name": plain(db.title)}]
    return body


def data_source_json(ctx: WorldContext, db: NotionDatabase) -> dict[str, Any]:
    """The database's one data source (2025-09-03): its schema, parented by the database."""
    body = _database_body(ctx, db)
    body["object"] = "data_source"
    body["database_parent"] = body["parent"]
    body["parent"] = {"type": "database_id", "database_id": db.id}
    body.pop("is_inline")
    return body


def retrieve_data_source(ctx: WorldContext, *, data_source_id: str) -> dict[str, Any]:
    workspace(ctx)
    return data_source_json(ctx, _database(ctx, data_source_id))


def _database_body(ctx: WorldContext, db: NotionDatabase) -> dict[str, Any]:
    return {
        "object": "database",
        "id": db.id,
        "cover": db.cover,
        "icon": db.icon,
        "created_time": _iso(db.created_time),
        "created_by": _user_ref(db.created_by),
        "last_edited_by": _user_ref(db.last_edited_by),
        "last_edited_time": _iso(db.last_edited_time),
        "title": db.title,
        "description": db.description,
        "is_inline": db.is_inline,
        "properties": db.properties,
        "parent": _parent_json(db.parent_type, db.parent_id),
        "url": _url("", db.id),
        "public_url": None,
        "archived": db.archived,
        "in_trash": db.archived,
    }


def _database(ctx: WorldContext, database_id: str) -> NotionDatabase:
    db = _get(ctx, NotionDatabase, normalize_id(database_id))
    if db is None:
        raise not_found(database_id, "database")
    return db


def create_database(
    ctx: WorldContext,
    *,
    parent: Any,
    title: Any = None,
    properties: Any,
    description: Any = None,
    icon: Any = None,
    cover: Any = None,
    is_inline: bool = False,
    as_user: str | None = None,
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    parent_type, parent_id = _parent(ctx, parent)
    if parent_type == "database_id":
        raise validation("body.parent.page_id should be defined: databases live in pages.")
    now = ctx.now
    db = NotionDatabase(
        world_id=ctx.world_id,
        id=_new_id(ctx),
        parent_type=parent_type,
        parent_id=parent_id,
        title=rich_text(title, "title"),
        description=rich_text(description, "description"),
        properties=_schema(ctx, properties),
        icon=icon,
        cover=cover,
        is_inline=bool(is_inline),
        created_time=now,
        last_edited_time=now,
        created_by=actor,
        last_edited_by=actor,
        archived=False,
        seq=_next_seq(ctx),
    )
    ctx.session.add(db)
    ctx.session.flush()
    if parent_type == "page_id":
        _insert_block(
            ctx,
            "page_id",
            parent_id,
            "child_database",
            {"title": plain(db.title)},
            actor,
            block_id=db.id,
        )
    ctx.record(
        APP, "databases.create", {"database_id": db.id, "title": plain(db.title), "user": actor}
    )
    return database_json(ctx, db)


def retrieve_database(ctx: WorldContext, *, database_id: str) -> dict[str, Any]:
    workspace(ctx)
    return database_json(ctx, _database(ctx, database_id))


def update_database(
    ctx: WorldContext,
    *,
    database_id: str,
    title: Any = None,
    description: Any = None,
    properties: Any = None,
    archived: bool | None = None,
    as_user: str | None = None,
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    db = _database(ctx, database_id)
    if title is not None:
        db.title = rich_text(title, "title")
    if description is not None:
        db.description = rich_text(description, "description")
    if properties is not None:
        if not isinstance(properties, dict):
            raise validation("body.properties should be an object.")
        schema = {k: dict(v) for k, v in db.properties.items()}
        for key, spec in properties.items():
            found = _find_prop(schema, key)
            if spec is None:
                if found is None:
                    raise validation(f"{key} is not a property that exists.")
                if found[1]["type"] == "title":
                    raise validation("The title property cannot be removed.")
                del schema[found[0]]
                continue
            entry = _schema_entry(ctx, key, spec, found[1] if found else None)
            if found:
                del schema[found[0]]
            if entry["type"] == "title" and any(e["type"] == "title" for e in schema.values()):
                raise validation("Databases need exactly one `title` property.")
            schema[entry["name"]] = entry
        db.properties = schema
    if archived is not None:
        db.archived = bool(archived)
    db.last_edited_time = ctx.now
    db.last_edited_by = actor
    ctx.record(APP, "databases.update", {"database_id": db.id, "user": actor})
    return database_json(ctx, db)
