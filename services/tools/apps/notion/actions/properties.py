"""Notion's rich text, database property schemas and page property values: validation and
normalisation shared by pages, databases and blocks.
"""

from __future__ import annotations

from typing import Any

from services.tools.apps.notion.actions._base import (
    COLORS,
    COMPUTED,
    MAX_TEXT,
    PROPERTY_TYPES,
    STATUS_DEFAULT,
    _get,
    _user_ref,
)
from services.tools.apps.notion.errors import validation
from services.tools.apps.notion.models import (
    NotionDatabase,
    NotionPage,
    NotionUser,
)
from services.tools.apps.notion.values import _parse_date, normalize_id
from services.tools.context import WorldContext

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
