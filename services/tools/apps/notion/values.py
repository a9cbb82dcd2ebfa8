"""Notion value helpers shared by the actions and the query engine (no state: pure functions)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, date, datetime
from typing import Any

from services.tools.apps.notion.errors import validation


def normalize_id(value: Any) -> str:
    """A Notion id with or without dashes -> the dashed lowercase form."""
    raw = re.sub(r"-", "", str(value or "")).lower()
    # Notion URLs end in the id; accept a whole URL or slug too.
    m = re.search(r"([0-9a-f]{32})$", raw)
    if not m:
        return str(value or "")
    h = m.group(1)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def plain(texts: Iterable[dict[str, Any]] | None) -> str:
    return "".join(t.get("plain_text", "") for t in texts or [])


def _find_prop(schema: dict[str, Any], key: str) -> tuple[str, dict[str, Any]] | None:
    if key in schema:
        return key, schema[key]
    for name, entry in schema.items():
        if entry["id"] == key:
            return name, entry
    return None


def _parse_date(value: Any, field: str = "date") -> datetime:
    text = str(value)
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    except ValueError:
        raise validation(
            f"{field} should be a valid ISO 8601 date string, instead was `{text}`."
        ) from None


def _iso(dt: datetime) -> str:
    dt = dt if dt.tzinfo else dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
