"""Notion's operations (API version 2022-06-28) as plain functions over a world.

Each function takes the :class:`~services.tools.context.WorldContext` first, takes the request
body's fields as the public API names them, and returns the API's JSON object, or raises
:class:`NotionError` (``validation_error`` / ``object_not_found`` ...). The acting user is the
integration's bot user unless ``as_user`` names a person (NPC edits and comments). Every write
is recorded with ``ctx.record("notion", "<endpoint>", ...)``.

Ids are UUIDs (with dashes in responses; paths accept them with or without), derived from the
world's deterministic id counter.

Why one file: every operation here validates and renders through the same private helpers
(property schemas, values, rich text, parents, pagination) and follows the API reference
section by section; the query engine (``filters``) and the pure value helpers (``values``)
are already apart, and splitting the rest would scatter one API's rules over modules that
all import each other's internals.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from services.tools.apps.notion.errors import not_found, validation
from services.tools.apps.notion.filters import _matches, _sort_key
from services.tools.apps.notion.models import (
    NotionBlock,
    NotionComment,
    NotionDatabase,
    NotionMeta,
    NotionPage,
    NotionUser,
)
from services.tools.apps.notion.values import _find_prop, _iso, _parse_date, normalize_id, plain
from services.tools.context import WorldContext

APP = "notion"
NOTION_VERSION = "2022-06-28"
DATA_SOURCES_VERSION = "2025-09-03"
VERSIONS = (NOTION_VERSION, DATA_SOURCES_VERSION)
MAX_PAGE_SIZE = 100
MAX_CHILDREN = 100
MAX_TEXT = 2000

TEXT_BLOCKS = (
    "paragraph",
    "heading_1",
    "heading_2",
    "heading_3",
    "bulleted_list_item",
    "numbered_list_item",
    "quote",
    "toggle",
    "to_do",
    "callout",
    "code",
)
BLOCK_TYPES = (*TEXT_BLOCKS, "divider")
READ_ONLY_BLOCKS = ("child_page", "child_database")
PROPERTY_TYPES = (
    "title",
    "rich_text",
    "number",
    "select",
    "multi_select",
    "status",
    "date",
    "people",
    "checkbox",
    "url",
    "email",
    "phone_number",
    "relation",
    "created_time",
    "last_edited_time",
    "created_by",
    "last_edited_by",
)
COMPUTED = ("created_time", "last_edited_time", "created_by", "last_edited_by")
COLORS = (
    "default",
    "gray",
    "brown",
    "orange",
    "yellow",
    "green",
    "blue",
    "purple",
    "pink",
    "red",
)
STATUS_DEFAULT = [
    ("Not started", "default", "To-do"),
    ("In progress", "blue", "In progress"),
    ("Done", "green", "Complete"),
]


# --------------------------------------------------------------------------- basics


def data_sources(ctx: WorldContext) -> bool:
    """Whether this call speaks Notion-Version 2025-09-03 (the routes set it on the context).

    The model stays 2022-06-28's: each database has exactly one data source, which shares the
    database's id, so ``/data_sources/{id}`` and ``/databases/{id}`` name the same thing.
    """
    return getattr(ctx, "notion_version", NOTION_VERSION) == DATA_SOURCES_VERSION


def _get(ctx: WorldContext, model: Any, key: str) -> Any:
    return ctx.session.get(model, {"world_id": ctx.world_id, "id": key})


def _new_id(ctx: WorldContext) -> str:
    return normalize_id(ctx.new_id(width=32))


def _next_seq(ctx: WorldContext) -> int:
    meta = workspace(ctx)
    meta.seq = (meta.seq or 0) + 1
    return meta.seq


def setup_workspace(
    ctx: WorldContext, *, workspace_name: str = "k3stack", bot_name: str = "Assistant"
) -> NotionMeta:
    """Create the workspace and the integration's bot user once (scenario set-up)."""
    meta = ctx.session.get(NotionMeta, ctx.world_id)
    if meta is not None:
        return meta
    bot_id = _new_id(ctx)
    ctx.session.add(NotionUser(world_id=ctx.world_id, id=bot_id, type="bot", name=bot_name))
    meta = NotionMeta(world_id=ctx.world_id, workspace_name=workspace_name, bot_user_id=bot_id)
    meta.seq = 0
    ctx.session.add(meta)
    ctx.session.flush()
    return meta


def workspace(ctx: WorldContext) -> NotionMeta:
    return ctx.session.get(NotionMeta, ctx.world_id) or setup_workspace(ctx)


def _actor(ctx: WorldContext, as_user: str | None) -> str:
    meta = workspace(ctx)
    if as_user is None:
        return meta.bot_user_id
    user = _get(ctx, NotionUser, normalize_id(as_user))
    if user is None:
        raise validation(f"as_user {as_user!r} is not a user of this workspace")
    return user.id


def _user_ref(user_id: str) -> dict[str, Any]:
    return {"object": "user", "id": user_id}


def _paginate(
    items: list[Any], start_cursor: str | None, page_size: int | None, key: Any
) -> tuple[list[Any], str | None]:
    size = _page_size(page_size)
    start = 0
    if start_cursor:
        ids = [key(i) for i in items]
        cursor = normalize_id(start_cursor)
        if cursor not in ids:
            raise validation(
                f"start_cursor should be a valid cursor, instead was `{start_cursor}`."
            )
        start = ids.index(cursor)
    chunk = items[start : start + size]
    nxt = key(items[start + size]) if start + size < len(items) else None
    return chunk, nxt


def _page_size(page_size: Any) -> int:
    if page_size is None:
        return MAX_PAGE_SIZE
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        try:
            page_size = int(page_size)
        except (TypeError, ValueError):
            raise validation("page_size should be a number.") from None
    if page_size < 1 or page_size > MAX_PAGE_SIZE:
        raise validation(
            f"page_size should be ≤ {MAX_PAGE_SIZE} and ≥ 1, instead was `{page_size}`."
        )
    return page_size


def _list(results: list[Any], nxt: str | None, kind: str) -> dict[str, Any]:
    return {
        "object": "list",
        "results": results,
        "next_cursor": nxt,
        "has_more": nxt is not None,
        "type": kind,
        kind: {},
    }


# --------------------------------------------------------------------------- users


def create_user(
    ctx: WorldContext, *, name: str, email: str = "", user_id: str | None = None
) -> dict[str, Any]:
    """Add a person to the workspace (scenario set-up)."""
    workspace(ctx)
    uid = normalize_id(user_id) if user_id else _new_id(ctx)
    ctx.session.add(
        NotionUser(world_id=ctx.world_id, id=uid, type="person", name=name, email=email)
    )
    ctx.session.flush()
    return user_json(ctx, _get(ctx, NotionUser, uid))


def user_json(ctx: WorldContext, u: NotionUser) -> dict[str, Any]:
    body: dict[str, Any] = {
        "object": "user",
        "id": u.id,
        "type": u.type,
        "name": u.name,
        "avatar_url": u.avatar_url,
    }
    if u.type == "person":
        body["person"] = {"email": u.email}
    else:
        body["bot"] = {
            "owner": {"type": "workspace", "workspace": True},
            "workspace_name": workspace(ctx).workspace_name,
        }
    return body


def users_list(
    ctx: WorldContext, *, start_cursor: str | None = None, page_size: int | None = None
) -> dict[str, Any]:
    workspace(ctx)
    rows = ctx.session.scalars(
        select(NotionUser)
        .where(NotionUser.world_id == ctx.world_id)
        .order_by(NotionUser.type.desc(), NotionUser.name, NotionUser.id)
    ).all()
    chunk, nxt = _paginate(list(rows), start_cursor, page_size, lambda u: u.id)
    return _list([user_json(ctx, u) for u in chunk], nxt, "user")


def users_retrieve(ctx: WorldContext, *, user_id: str) -> dict[str, Any]:
    workspace(ctx)
    u = _get(ctx, NotionUser, normalize_id(user_id))
    if u is None:
        raise not_found(user_id, "user")
    return user_json(ctx, u)


def users_me(ctx: WorldContext) -> dict[str, Any]:
    return users_retrieve(ctx, user_id=workspace(ctx).bot_user_id)


# --------------------------------------------------------------------------- rich text


def rich_text(value: Any, field: str = "rich_text") -> list[dict[str, Any]]:
    """Normalise request rich text (or a plain string) into the API's full rich text objects."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [{"type": "text", "text": {"content": value}}]
    if not isinstance(value, list):
        raise validation(f"{field} should be an array, instead was `{type(value).__name__}`.")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise validation(f"{field}[{i}] should be an object.")
        kind = item.get("type") or ("mention" if "mention" in item else "text")
        annotations = {
            "bold": False,
            "italic": False,
            "strikethrough": False,
            "underline": False,
            "code": False,
            "color": "default",
            **(item.get("annotations") or {}),
        }
        if kind == "text":
            text = item.get("text")
            if not isinstance(text, dict) or not isinstance(text.get("content"), str):
                raise validation(
                    f"{field}[{i}].text.content should be defined, instead was `undefined`."
                )
            content = text["content"]
            if len(content) > MAX_TEXT:
                raise validation(
                    f"{field}[{i}].text.content.length should be ≤ `{MAX_TEXT}`, instead was `{len(content)}`."
                )
            link = text.get("link")
            out.append(
                {
                    "type": "text",
                    "text": {"content": content, "link": link},
                    "annotations": annotations,
                    "plain_text": content,
                    "href": (link or {}).get("url") if isinstance(link, dict) else None,
                }
            )
        elif kind == "mention":
            mention = item.get("mention") or {}
            plain = item.get("plain_text") or ""
            if "user" in mention:
                plain = plain or "@" + str(mention["user"].get("id", ""))
            elif "page" in mention:
                plain = plain or str(mention["page"].get("id", ""))
            elif "date" in mention:
                plain = plain or str(mention["date"].get("start", ""))
            out.append(
                {
                    "type": "mention",
                    "mention": mention,
                    "annotations": annotations,
                    "plain_text": plain,
                    "href": None,
                }
            )
        elif kind == "equation":
            expr = str((item.get("equation") or {}).get("expression", ""))
            out.append(
                {
                    "type": "equation",
                    "equation": {"expression": expr},
                    "annotations": annotations,
                    "plain_text": expr,
                    "href": None,
                }
            )
        else:
            raise validation(f"{field}[{i}].type should be `text`, `mention` or `equation`.")
    return out


# --------------------------------------------------------------------------- schemas, values


def _prop_id(ctx: WorldContext) -> str:
    return ctx.new_id(width=4)


def _options(ctx: WorldContext, raw: Any, field: str) -> list[dict[str, Any]]:
    out = []
    for o in raw or []:
        if not isinstance(o, dict) or not o.get("name"):
            raise validation(f"{field} options need a name.")
        color = o.get("color", "default")
        if color not in COLORS:
            raise validation(f"{field} option color should be one of {', '.join(COLORS)}.")
        out.append({"id": o.get("id") or _prop_id(ctx), "name": str(o["name"]), "color": color})
    return out


def _schema_entry(
    ctx: WorldContext, name: str, spec: Any, existing: dict[str, Any] | None
) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise validation(f"body.properties.{name} should be an object.")
    kinds = [k for k in spec if k in PROPERTY_TYPES] or ([spec["type"]] if spec.get("type") else [])
    if not kinds:
        if existing is not None:  # a rename only
            return {**existing, "name": str(spec.get("name") or name)}
        raise validation(
            f"body.properties.{name} should define its type: one of {', '.join(PROPERTY_TYPES)}."
        )
    kind = kinds[0]
    if kind not in PROPERTY_TYPES:
        raise validation(f"Property type `{kind}` is not supported by this mock.")
    config = spec.get(kind) or {}
    pid = existing["id"] if existing else ("title" if kind == "title" else _prop_id(ctx))
    entry: dict[str, Any] = {"id": pid, "name": str(spec.get("name") or name), "type": kind}
    if kind == "number":
        entry[kind] = {"format": config.get("format", "number")}
    elif kind in ("select", "multi_select"):
        entry[kind] = {"options": _options(ctx, config.get("options"), name)}
    elif kind == "status":
        opts = config.get("options") or [{"name": n, "color": c} for n, c, _ in STATUS_DEFAULT]
        options = _options(ctx, opts, name)
        groups: dict[str, list[str]] = {"To-do": [], "In progress": [], "Complete": []}
        for o in options:
            group = next((g for n, _, g in STATUS_DEFAULT if n == o["name"]), "To-do")
            groups[group].append(o["id"])
        entry[kind] = {
            "options": options,
            "groups": [
                {"id": _prop_id(ctx), "name": g, "color": "gray", "option_ids": ids}
                for g, ids in groups.items()
            ],
        }
    elif kind == "relation":
        target = normalize_id(config.get("database_id"))
        if not target or _get(ctx, NotionDatabase, target) is None:
            raise validation(f"body.properties.{name}.relation.database_id should be a database.")
        entry[kind] = {"database_id": target, "type": "single_property", "single_property": {}}
    else:
        entry[kind] = {}
    return entry


def _schema(ctx: WorldContext, props: Any) -> dict[str, Any]:
    if not isinstance(props, dict):
        raise validation("body.properties should be an object.")
    schema = {name: _schema_entry(ctx, name, spec, None) for name, spec in props.items()}
    titles = [n for n, e in schema.items() if e["type"] == "title"]
    if len(titles) != 1:
        raise validation("Databases need exactly one `title` property.")
    return {e["name"]: e for e in schema.values()}


def _date_value(v: Any, field: str) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict) or not v.get("start"):
        raise validation(f"{field}.start should be defined, instead was `undefined`.")
    for key in ("start", "end"):
        if v.get(key) is not None:
            _parse_date(v[key], f"{field}.{key}")
    return {"start": v["start"], "end": v.get("end"), "time_zone": v.get("time_zone")}


def _option(
    ctx: WorldContext, entry: dict[str, Any], v: Any, field: str, create: bool
) -> dict[str, Any]:
    if not isinstance(v, dict) or not (v.get("name") or v.get("id")):
        raise validation(f"{field} should have a `name` or `id`.")
    options = entry[entry["type"]]["options"]
    for o in options:
        if (v.get("id") and o["id"] == v["id"]) or (v.get("name") and o["name"] == v["name"]):
            return dict(o)
    if not create or not v.get("name"):
        raise validation(
            f"{field}: `{v.get('name') or v.get('id')}` is not an option of `{entry['name']}`."
        )
    new = {"id": _prop_id(ctx), "name": str(v["name"]), "color": v.get("color", "default")}
    options.append(new)
    return dict(new)


def _value(ctx: WorldContext, entry: dict[str, Any], v: Any, name: str) -> tuple[Any, bool]:
    """One property value from a request -> (stored value, schema changed?)."""
    kind = entry["type"]
    field = f"body.properties.{name}.{kind}"
    if kind in COMPUTED:
        raise validation(f"{name} is a computed property and cannot be set.")
    if kind in ("title", "rich_text"):
        return rich_text(v, field), False
    if kind == "number":
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise validation(f"{field} should be a number or `null`, instead was `{v!r}`.")
        return v, False
    if kind == "checkbox":
        if not isinstance(v, bool):
            raise validation(f"{field} should be a boolean, instead was `{v!r}`.")
        return v, False
    if kind in ("url", "email", "phone_number"):
        if v is not None and not isinstance(v, str):
            raise validation(f"{field} should be a string or `null`.")
        if kind == "email" and v and "@" not in v:
            raise validation(f"{field} should be an email address, instead was `{v}`.")
        return v, False
    if kind in ("select", "status"):
        if v is None:
            return None, False
        before = len(entry[kind]["options"])
        opt = _option(ctx, entry, v, field, create=kind == "select")
        return opt, len(entry[kind]["options"]) != before
    if kind == "multi_select":
        if not isinstance(v, list):
            raise validation(f"{field} should be an array.")
        before = len(entry[kind]["options"])
        return [_option(ctx, entry, o, field, True) for o in v], len(
            entry[kind]["options"]
        ) != before
    if kind == "date":
        return _date_value(v, field), False
    if kind == "people":
        if not isinstance(v, list):
            raise validation(f"{field} should be an array.")
        out = []
        for p in v:
            uid = normalize_id((p or {}).get("id") if isinstance(p, dict) else None)
            if not uid or _get(ctx, NotionUser, uid) is None:
                raise validation(f"{field}: user `{uid}` does not exist.")
            out.append(_user_ref(uid))
        return out, False
    if kind == "relation":
        if not isinstance(v, list):
            raise validation(f"{field} should be an array.")
        out = []
        for p in v:
            pid = normalize_id((p or {}).get("id") if isinstance(p, dict) else None)
            if not pid or _get(ctx, NotionPage, pid) is None:
                raise validation(f"{field}: page `{pid}` does not exist.")
            out.append({"id": pid})
        return out, False
    raise validation(f"Property type `{kind}` is not supported.")


def _unwrap(entry: dict[str, Any], v: Any, name: str) -> Any:
    """Requests give ``{"title": [...]}`` / ``{"number": 3}``; plain arrays for title are fine too."""
    kind = entry["type"]
    if isinstance(v, dict) and kind in v:
        return v[kind]
    if kind in ("title", "rich_text") and isinstance(v, (list, str)):
        return v
    if isinstance(v, dict) and "type" in v and v["type"] != kind:
        raise validation(f"{name} is expected to be {kind}.")
    raise validation(f"body.properties.{name}.{kind} should be defined, instead was `undefined`.")


# --------------------------------------------------------------------------- pages


def _parent_json(parent_type: str, parent_id: str) -> dict[str, Any]:
    if parent_type == "workspace":
        return {"type": "workspace", "workspace": True}
    return {"type": parent_type, parent_type: parent_id}


def _title_of_page(page: NotionPage) -> str:
    for value in page.properties.values():
        if value.get("type") == "title":
            return plain(value.get("title"))
    return ""


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


# --------------------------------------------------------------------------- blocks


def _block_content(kind: str, body: Any, field: str) -> dict[str, Any]:
    if kind in READ_ONLY_BLOCKS:
        raise validation(f"{field}: `{kind}` blocks are created through pages / databases.")
    if kind not in BLOCK_TYPES:
        raise validation(
            f"{field}.type should be one of {', '.join(BLOCK_TYPES)}, instead was `{kind}`."
        )
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise validation(f"{field}.{kind} should be an object.")
    if kind == "divider":
        return {}
    content: dict[str, Any] = {
        "rich_text": rich_text(
            body.get("rich_text", body.get("text")), f"{field}.{kind}.rich_text"
        ),
        "color": body.get("color", "default"),
    }
    if kind.startswith("heading_"):
        content["is_toggleable"] = bool(body.get("is_toggleable", False))
    if kind == "to_do":
        checked = body.get("checked", False)
        if not isinstance(checked, bool):
            raise validation(f"{field}.to_do.checked should be a boolean.")
        content["checked"] = checked
    if kind == "code":
        content.pop("color")
        content["language"] = str(body.get("language", "plain text"))
        content["caption"] = rich_text(body.get("caption"), f"{field}.code.caption")
    if kind == "callout":
        content["icon"] = body.get("icon") or {"type": "emoji", "emoji": "💡"}
    return content


def _insert_block(
    ctx: WorldContext,
    parent_type: str,
    parent_id: str,
    kind: str,
    content: dict[str, Any],
    actor: str,
    *,
    block_id: str | None = None,
    position: int | None = None,
) -> NotionBlock:
    if position is None:
        position = (
            ctx.session.scalar(
                select(func.max(NotionBlock.position)).where(
                    NotionBlock.world_id == ctx.world_id, NotionBlock.parent_id == parent_id
                )
            )
            or 0
        ) + 1
    now = ctx.now
    block = NotionBlock(
        world_id=ctx.world_id,
        id=block_id or _new_id(ctx),
        parent_type=parent_type,
        parent_id=parent_id,
        position=position,
        type=kind,
        content=content,
        created_time=now,
        last_edited_time=now,
        created_by=actor,
        last_edited_by=actor,
        archived=False,
        seq=_next_seq(ctx),
    )
    ctx.session.add(block)
    ctx.session.flush()
    return block


def child_blocks(ctx: WorldContext, parent_id: str) -> list[NotionBlock]:
    return list(
        ctx.session.scalars(
            select(NotionBlock)
            .where(
                NotionBlock.world_id == ctx.world_id,
                NotionBlock.parent_id == parent_id,
                NotionBlock.archived.is_(False),
            )
            .order_by(NotionBlock.position, NotionBlock.seq)
        )
    )


def block_json(ctx: WorldContext, b: NotionBlock) -> dict[str, Any]:
    has_children = bool(child_blocks(ctx, b.id)) if b.type not in READ_ONLY_BLOCKS else False
    if b.type == "child_page":
        has_children = bool(child_blocks(ctx, b.id))
    return {
        "object": "block",
        "id": b.id,
        "parent": _parent_json(b.parent_type, b.parent_id),
        "created_time": _iso(b.created_time),
        "last_edited_time": _iso(b.last_edited_time),
        "created_by": _user_ref(b.created_by),
        "last_edited_by": _user_ref(b.last_edited_by),
        "has_children": has_children,
        "archived": b.archived,
        "in_trash": b.archived,
        "type": b.type,
        b.type: b.content,
    }


def _container(ctx: WorldContext, block_id: str) -> tuple[str, str, bool]:
    """(parent_type, id, archived) for something that can hold blocks: a page or a block."""
    bid = normalize_id(block_id)
    page = _get(ctx, NotionPage, bid)
    if page is not None:
        return "page_id", page.id, page.archived
    block = _get(ctx, NotionBlock, bid)
    if block is not None:
        return "block_id", block.id, block.archived
    raise not_found(block_id)


def _append(
    ctx: WorldContext,
    parent_type: str,
    parent_id: str,
    children: Any,
    actor: str,
    after: str | None,
    depth: int = 0,
) -> list[NotionBlock]:
    if not isinstance(children, list):
        raise validation("body.children should be an array.")
    if len(children) > MAX_CHILDREN:
        raise validation(
            f"body.children.length should be ≤ `{MAX_CHILDREN}`, instead was `{len(children)}`."
        )
    if depth > 2:
        raise validation("Blocks can be nested at most two levels deep in one request.")
    # Validate every child before writing any.
    parsed = []
    for i, child in enumerate(children):
        field = f"body.children[{i}]"
        if not isinstance(child, dict):
            raise validation(f"{field} should be an object.")
        kind = child.get("type") or next(
            (k for k in child if k in BLOCK_TYPES or k in READ_ONLY_BLOCKS), None
        )
        if kind is None:
            raise validation(
                f"{field} should define a block type: one of {', '.join(BLOCK_TYPES)}."
            )
        body = child.get(kind)
        parsed.append(
            (
                kind,
                _block_content(kind, body, field),
                (body or {}).get("children") if isinstance(body, dict) else None,
            )
        )
    position = None
    if after:
        anchor = _get(ctx, NotionBlock, normalize_id(after))
        if anchor is None or anchor.parent_id != parent_id:
            raise validation(f"body.after should be a child block of {parent_id}.")
        position = anchor.position + 1
        for sib in child_blocks(ctx, parent_id):
            if sib.position >= position:
                sib.position += len(parsed)
    created = []
    for i, (kind, content, grandchildren) in enumerate(parsed):
        block = _insert_block(
            ctx,
            parent_type,
            parent_id,
            kind,
            content,
            actor,
            position=None if position is None else position + i,
        )
        created.append(block)
        if grandchildren:
            _append(ctx, "block_id", block.id, grandchildren, actor, None, depth + 1)
    return created


def append_children(
    ctx: WorldContext,
    *,
    block_id: str,
    children: Any,
    after: str | None = None,
    as_user: str | None = None,
) -> dict[str, Any]:
    actor = _actor(ctx, as_user)
    parent_type, parent_id, archived = _container(ctx, block_id)
    if archived:
        raise validation(
            "Can't edit block that is archived. You must unarchive the block before editing."
        )
    created = _append(ctx, parent_type, parent_id, children, actor, after)
    _touch(ctx, parent_type, parent_id, actor)
    ctx.record(
        APP,
        "blocks.children.append",
        {
            "block_id": parent_id,
            "children": [b.id for b in created],
            "types": [b.type for b in created],
            "user": actor,
        },
    )
    return _list([block_json(ctx, b) for b in created], None, "block")


def _touch(ctx: WorldContext, parent_type: str, parent_id: str, actor: str) -> None:
    """Editing a page's content edits the page (walk up through blocks)."""
    seen = 0
    while parent_type == "block_id" and seen < 50:
        block = _get(ctx, NotionBlock, parent_id)
        if block is None:
            return
        parent_type, parent_id = block.parent_type, block.parent_id
        seen += 1
    page = _get(ctx, NotionPage, parent_id) if parent_type == "page_id" else None
    if page is not None:
        page.last_edited_time = ctx.now
        page.last_edited_by = actor


def list_children(
    ctx: WorldContext,
    *,
    block_id: str,
    start_cursor: str | None = None,
    page_size: int | None = None,
) -> dict[str, Any]:
    workspace(ctx)
    _, parent_id, _ = _container(ctx, block_id)
    chunk, nxt = _paginate(child_blocks(ctx, parent_id), start_cursor, page_size, lambda b: b.id)
    return _list([block_json(ctx, b) for b in chunk], nxt, "block")


def retrieve_block(ctx: WorldContext, *, block_id: str) -> dict[str, Any]:
    workspace(ctx)
    bid = normalize_id(block_id)
    block = _get(ctx, NotionBlock, bid)
    if block is not None:
        return block_json(ctx, block)
    page = _get(ctx, NotionPage, bid)
    if page is None:
        raise not_found(block_id)
    # A top-level page seen through the blocks API.
    return {
        "object": "block",
        "id": page.id,
        "parent": _parent_json(page.parent_type, page.parent_id),
        "created_time": _iso(page.created_time),
        "last_edited_time": _iso(page.last_edited_time),
        "created_by": _user_ref(page.created_by),
        "last_edited_by": _user_ref(page.last_edited_by),
        "has_children": bool(child_blocks(ctx, page.id)),
        "archived": page.archived,
        "in_trash": page.archived,
        "type": "child_page",
        "child_page": {"title": _title_of_page(page)},
    }


def update_block(
    ctx: WorldContext,
    *,
    block_id: str,
    body: dict[str, Any],
    as_user: str | None = None,
) -> dict[str, Any]:
    """``PATCH /blocks/{id}``: new content for the block's own type, or ``archived``."""
    actor = _actor(ctx, as_user)
    block = _get(ctx, NotionBlock, normalize_id(block_id))
    if block is None:
        raise not_found(block_id)
    if block.type in READ_ONLY_BLOCKS:
        raise validation(f"`{block.type}` blocks are edited through the pages / databases API.")
    archived = body.get("archived", body.get("in_trash"))
    if block.archived and archived is not False:
        raise validation(
            "Can't edit block that is archived. You must unarchive the block before editing."
        )
    kinds = [k for k in body if k in BLOCK_TYPES or k in READ_ONLY_BLOCKS]
    if kinds:
        if kinds[0] != block.type:
            raise validation(
                f"Block type `{kinds[0]}` does not match the block's type `{block.type}`."
            )
        merged = {**body[kinds[0]]}
        for key in (
            "rich_text",
            "checked",
            "language",
            "color",
            "icon",
            "caption",
            "is_toggleable",
        ):
            if key not in merged and key in block.content:
                merged[key] = block.content[key]
        block.content = _block_content(block.type, merged, "body")
    if archived is not None:
        if not isinstance(archived, bool):
            raise validation("body.archived should be a boolean.")
        block.archived = archived
    block.last_edited_time = ctx.now
    block.last_edited_by = actor
    _touch(ctx, block.parent_type, block.parent_id, actor)
    ctx.record(
        APP,
        "blocks.update",
        {"block_id": block.id, "type": block.type, "archived": block.archived, "user": actor},
    )
    return block_json(ctx, block)


def delete_block(ctx: WorldContext, *, block_id: str, as_user: str | None = None) -> dict[str, Any]:
    """``DELETE /blocks/{id}``: archive it (deleting a page's block archives the page)."""
    actor = _actor(ctx, as_user)
    bid = normalize_id(block_id)
    block = _get(ctx, NotionBlock, bid)
    page = _get(ctx, NotionPage, bid)
    if block is None and page is None:
        raise not_found(block_id)
    if page is not None:
        page.archived = True
        page.last_edited_time = ctx.now
    if block is not None:
        block.archived = True
        block.last_edited_time = ctx.now
        block.last_edited_by = actor
        _touch(ctx, block.parent_type, block.parent_id, actor)
    ctx.record(APP, "blocks.delete", {"block_id": bid, "user": actor})
    return block_json(ctx, block) if block is not None else retrieve_block(ctx, block_id=bid)


# --------------------------------------------------------------------------- comments


def comment_json(c: NotionComment) -> dict[str, Any]:
    return {
        "object": "comment",
        "id": c.id,
        "parent": _parent_json(c.parent_type, c.parent_id),
        "discussion_id": c.discussion_id,
        "created_time": _iso(c.created_time),
        "last_edited_time": _iso(c.created_time),
        "created_by": _user_ref(c.created_by),
        "rich_text": c.rich_text,
    }


def create_comment(
    ctx: WorldContext,
    *,
    rich_text_value: Any,
    parent: Any = None,
    discussion_id: str | None = None,
    as_user: str | None = None,
) -> dict[str, Any]:
    """``POST /comments`` on a page (new discussion) or into an existing discussion."""
    actor = _actor(ctx, as_user)
    text = rich_text(rich_text_value, "body.rich_text")
    if not text:
        raise validation("body.rich_text should be a non-empty array.")
    if discussion_id:
        first = ctx.session.scalar(
            select(NotionComment)
            .where(
                NotionComment.world_id == ctx.world_id,
                NotionComment.discussion_id == normalize_id(discussion_id),
            )
            .order_by(NotionComment.seq)
        )
        if first is None:
            raise not_found(discussion_id, "discussion")
        parent_type, parent_id, did = first.parent_type, first.parent_id, first.discussion_id
    else:
        if not isinstance(parent, dict) or not parent.get("page_id"):
            raise validation("body.parent.page_id or body.discussion_id should be defined.")
        page = _page(ctx, parent["page_id"])
        parent_type, parent_id, did = "page_id", page.id, _new_id(ctx)
    c = NotionComment(
        world_id=ctx.world_id,
        id=_new_id(ctx),
        parent_type=parent_type,
        parent_id=parent_id,
        discussion_id=did,
        rich_text=text,
        created_time=ctx.now,
        created_by=actor,
        seq=_next_seq(ctx),
    )
    ctx.session.add(c)
    ctx.session.flush()
    ctx.record(
        APP,
        "comments.create",
        {
            "comment_id": c.id,
            "page_id": parent_id,
            "discussion_id": did,
            "text": plain(text),
            "user": actor,
        },
    )
    return comment_json(c)


def list_comments(
    ctx: WorldContext,
    *,
    block_id: str,
    start_cursor: str | None = None,
    page_size: int | None = None,
) -> dict[str, Any]:
    workspace(ctx)
    _, parent_id, _ = _container(ctx, block_id)
    rows = ctx.session.scalars(
        select(NotionComment)
        .where(NotionComment.world_id == ctx.world_id, NotionComment.parent_id == parent_id)
        .order_by(NotionComment.seq)
    ).all()
    chunk, nxt = _paginate(list(rows), start_cursor, page_size, lambda c: c.id)
    return _list([comment_json(c) for c in chunk], nxt, "comment")
