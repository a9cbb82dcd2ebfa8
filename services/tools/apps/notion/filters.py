"""Notion's database query engine: filter conditions (text, number, date, select, people,
relation, checkbox; compound ``and`` / ``or``) and sorts over rendered page properties.

Kept apart from ``actions`` (which stores and renders pages) so each file does one job.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from services.tools.apps.notion.errors import validation
from services.tools.apps.notion.models import NotionPage
from services.tools.apps.notion.values import _find_prop, _iso, _parse_date, normalize_id, plain
from services.tools.context import WorldContext


def _prop_value(rendered: dict[str, Any], key: str, schema: dict[str, Any]) -> tuple[str, Any]:
    found = _find_prop(schema, key)
    if found is None:
        raise validation(f"Could not find property with name or id: {key}")
    name, entry = found
    prop = rendered[name]
    return entry["type"], prop[entry["type"]]


_TEXT_OPS = {
    "equals",
    "does_not_equal",
    "contains",
    "does_not_contain",
    "starts_with",
    "ends_with",
    "is_empty",
    "is_not_empty",
}


def _text_match(value: str, cond: dict[str, Any]) -> bool:
    op, arg = _single(cond)
    if op not in _TEXT_OPS:
        raise validation(f"`{op}` is not a valid text filter condition.")
    if op in ("is_empty", "is_not_empty"):
        if arg is not True:
            raise validation(f"text.{op} should be `true`.")
    elif not isinstance(arg, str):
        raise validation(f"text.{op} should be a string, instead was `{arg!r}`.")
    a = value.lower()
    b = str(arg).lower()
    if op == "equals":
        return a == b
    if op == "does_not_equal":
        return a != b
    if op == "contains":
        return b in a
    if op == "does_not_contain":
        return b not in a
    if op == "starts_with":
        return a.startswith(b)
    if op == "ends_with":
        return a.endswith(b)
    if op == "is_empty":
        return a == ""
    return a != ""


def _single(cond: Any) -> tuple[str, Any]:
    if not isinstance(cond, dict) or len(cond) != 1:
        raise validation("Each filter condition should have exactly one operator.")
    return next(iter(cond.items()))


def _number_match(value: Any, cond: dict[str, Any]) -> bool:
    op, arg = _single(cond)
    if op == "is_empty":
        return value is None
    if op == "is_not_empty":
        return value is not None
    if not isinstance(arg, (int, float)) or isinstance(arg, bool):
        raise validation(f"number.{op} should be a number.")
    if value is None:
        return op == "does_not_equal"
    ops = {
        "equals": value == arg,
        "does_not_equal": value != arg,
        "greater_than": value > arg,
        "less_than": value < arg,
        "greater_than_or_equal_to": value >= arg,
        "less_than_or_equal_to": value <= arg,
    }
    if op not in ops:
        raise validation(f"`{op}` is not a valid number filter condition.")
    return ops[op]


def _date_match(ctx: WorldContext, value: str | None, cond: dict[str, Any]) -> bool:
    op, arg = _single(cond)
    if op == "is_empty":
        return value is None
    if op == "is_not_empty":
        return value is not None
    now = ctx.now
    relative = {
        "past_week": (now - timedelta(days=7), now),
        "past_month": (now - timedelta(days=30), now),
        "past_year": (now - timedelta(days=365), now),
        "next_week": (now, now + timedelta(days=7)),
        "next_month": (now, now + timedelta(days=30)),
        "next_year": (now, now + timedelta(days=365)),
        "this_week": (
            datetime.combine(
                (now - timedelta(days=now.weekday())).date(), datetime.min.time(), UTC
            ),
            datetime.combine((now - timedelta(days=now.weekday())).date(), datetime.min.time(), UTC)
            + timedelta(days=7),
        ),
    }
    if op in relative:
        if value is None:
            return False
        lo, hi = relative[op]
        v = _parse_date(value)
        return lo <= v <= hi
    if value is None:
        return False
    v = _parse_date(value)
    a = _parse_date(arg, f"date.{op}")
    date_only = isinstance(arg, str) and len(arg) == 10
    if date_only or len(value) == 10:
        v_d, a_d = v.date(), a.date()
        ops = {
            "equals": v_d == a_d,
            "before": v_d < a_d,
            "after": v_d > a_d,
            "on_or_before": v_d <= a_d,
            "on_or_after": v_d >= a_d,
        }
    else:
        ops = {
            "equals": v == a,
            "before": v < a,
            "after": v > a,
            "on_or_before": v <= a,
            "on_or_after": v >= a,
        }
    if op not in ops:
        raise validation(f"`{op}` is not a valid date filter condition.")
    return ops[op]


def _list_match(ids: list[str], cond: dict[str, Any], kind: str) -> bool:
    op, arg = _single(cond)
    if op == "is_empty":
        return not ids
    if op == "is_not_empty":
        return bool(ids)
    if op == "contains":
        return (
            str(arg) in ids if kind != "people" and kind != "relation" else normalize_id(arg) in ids
        )
    if op == "does_not_contain":
        return (str(arg) if kind not in ("people", "relation") else normalize_id(arg)) not in ids
    raise validation(f"`{op}` is not a valid {kind} filter condition.")


_TEXT_FILTERS = ("title", "rich_text", "url", "email", "phone_number")
_FILTER_FOR = {
    **{k: _TEXT_FILTERS for k in _TEXT_FILTERS},
    "created_time": ("created_time", "date"),
    "last_edited_time": ("last_edited_time", "date"),
    "created_by": ("created_by", "people"),
    "last_edited_by": ("last_edited_by", "people"),
}


def _matches(
    ctx: WorldContext, page: NotionPage, rendered: dict[str, Any], schema: dict[str, Any], flt: Any
) -> bool:
    if not isinstance(flt, dict):
        raise validation("body.filter should be an object.")
    if "and" in flt or "or" in flt:
        key = "and" if "and" in flt else "or"
        parts = flt[key]
        if not isinstance(parts, list):
            raise validation(f"body.filter.{key} should be an array.")
        results = [_matches(ctx, page, rendered, schema, p) for p in parts]
        return all(results) if key == "and" else any(results)
    if "timestamp" in flt:
        ts = flt["timestamp"]
        if ts not in ("created_time", "last_edited_time"):
            raise validation(
                "body.filter.timestamp should be `created_time` or `last_edited_time`."
            )
        value = _iso(page.created_time if ts == "created_time" else page.last_edited_time)
        return _date_match(ctx, value, flt.get(ts) or {})
    if "property" not in flt:
        raise validation("body.filter should define `property`, `timestamp`, `and` or `or`.")
    kind, value = _prop_value(rendered, flt["property"], schema)
    conds = [k for k in flt if k != "property"]
    if len(conds) != 1:
        raise validation("A property filter needs exactly one type key, e.g. `select`.")
    ftype = conds[0]
    cond = flt[ftype]
    if ftype not in _FILTER_FOR.get(kind, (kind,)):
        raise validation(
            f"The filter type `{ftype}` does not match the type of property "
            f"`{flt['property']}` (`{kind}`)."
        )
    if ftype in ("title", "rich_text", "url", "email", "phone_number"):
        text = plain(value) if kind in ("title", "rich_text") else (value or "")
        return _text_match(text, cond)
    if ftype == "number":
        return _number_match(value, cond)
    if ftype == "checkbox":
        op, arg = _single(cond)
        if op not in ("equals", "does_not_equal") or not isinstance(arg, bool):
            raise validation("checkbox filters are `equals` / `does_not_equal` with a boolean.")
        return (bool(value) == arg) if op == "equals" else (bool(value) != arg)
    if ftype in ("select", "status"):
        op, arg = _single(cond)
        name = (value or {}).get("name") if isinstance(value, dict) else None
        if op == "equals":
            return name == arg
        if op == "does_not_equal":
            return name != arg
        if op == "is_empty":
            return name is None
        if op == "is_not_empty":
            return name is not None
        raise validation(f"`{op}` is not a valid {ftype} filter condition.")
    if ftype == "multi_select":
        return _list_match([o["name"] for o in value or []], cond, ftype)
    if ftype in ("people", "created_by", "last_edited_by"):
        ids = [p["id"] for p in value] if isinstance(value, list) else [value["id"]]
        return _list_match(ids, cond, "people")
    if ftype == "relation":
        return _list_match([r["id"] for r in value or []], cond, "relation")
    if ftype in ("date", "created_time", "last_edited_time"):
        start = value.get("start") if isinstance(value, dict) else value
        return _date_match(ctx, start, cond)
    raise validation(f"Filter type `{ftype}` is not supported.")


def _sort_key(kind: str, value: Any) -> Any:
    if kind in ("title", "rich_text"):
        return plain(value).lower()
    if kind in ("select", "status"):
        return (value or {}).get("name", "")
    if kind == "multi_select":
        return ",".join(o["name"] for o in value or [])
    if kind == "date":
        return _parse_date(value["start"]) if value else None
    if kind in ("people", "relation"):
        return ",".join(p["id"] for p in value or [])
    if kind in ("created_by", "last_edited_by"):
        return value["id"]
    return value
