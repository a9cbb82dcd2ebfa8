"""Slack's shared plumbing: constants, world-row lookup, ``ts`` parsing, cursors and paging."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from services.tools.apps.slack.errors import SlackError
from services.tools.context import WorldContext

APP = "slack"
MAX_TEXT = 40_000
SCHEDULE_HORIZON = timedelta(days=120)
_CHANNEL_NAME = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,79}$")
_TYPES = {"public_channel": "public", "private_channel": "private", "im": "im", "mpim": "mpim"}


def _get(ctx: WorldContext, model: Any, *keys: Any) -> Any:
    """A row of this world by its own key columns (in declaration order), or None."""
    names = [c.key for c in model.__mapper__.primary_key if c.key != "world_id"]
    return ctx.session.get(model, {"world_id": ctx.world_id, **dict(zip(names, keys, strict=True))})


DEFAULT_AGENT = "assistant@k3stack.test"


def normalize_ts(value: str | float | int | None, field: str = "ts") -> str | None:
    """``"1718000000.0001"`` / ``1718000000`` -> ``"1718000000.000100"`` (comparable as text)."""
    if value is None or value == "":
        return None
    text = str(value).strip()
    m = re.fullmatch(r"(\d{1,12})(?:\.(\d{1,6}))?", text)
    if not m:
        raise SlackError("invalid_arguments", f"{field} must look like 1718000000.000100")
    return f"{int(m.group(1)):010d}.{(m.group(2) or '0').ljust(6, '0')}"


def _ts_datetime(ts: str) -> datetime:
    sec, _, frac = ts.partition(".")
    return datetime.fromtimestamp(int(sec), UTC) + timedelta(microseconds=int(frac or 0))


def _now_s(ctx: WorldContext) -> int:
    return int(ctx.now.timestamp())


def _encode_cursor(kind: str, value: str | int) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{value}".encode()).decode()


def _decode_cursor(cursor: str | None, kind: str) -> str | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor.encode() + b"=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise SlackError("invalid_cursor", "the cursor was not issued by this method") from None
    prefix, _, value = raw.partition(":")
    if prefix != kind or not value:
        raise SlackError("invalid_cursor", "the cursor was not issued by this method")
    return value


def _offset(cursor: str | None) -> int:
    value = _decode_cursor(cursor, "offset")
    if value is None:
        return 0
    if not value.isdigit():
        raise SlackError("invalid_cursor")
    return int(value)


def _limit(limit: int | None, default: int, maximum: int) -> int:
    if limit is None or limit <= 0:
        return default
    return min(limit, maximum)


def _page(items: list[Any], cursor: str | None, limit: int) -> tuple[list[Any], str]:
    start = _offset(cursor)
    chunk = items[start : start + limit]
    nxt = _encode_cursor("offset", start + limit) if start + limit < len(items) else ""
    return chunk, nxt


# --------------------------------------------------------------------------- helpers


def _split(values: str | Sequence[str] | None) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        items: Iterable[str] = values.split(",")
    else:
        items = values
    return [v.strip() for v in items if v and v.strip()]
