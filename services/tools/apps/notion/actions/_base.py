"""Notion's shared plumbing: constants, the world's workspace and ids, the acting user, parents,
pagination.
"""

from __future__ import annotations

from typing import Any

from services.tools.apps.notion.errors import validation
from services.tools.apps.notion.models import (
    NotionMeta,
    NotionPage,
    NotionUser,
)
from services.tools.apps.notion.values import normalize_id, plain
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


def _parent_json(parent_type: str, parent_id: str) -> dict[str, Any]:
    if parent_type == "workspace":
        return {"type": "workspace", "workspace": True}
    return {"type": parent_type, parent_type: parent_id}


def _title_of_page(page: NotionPage) -> str:
    for value in page.properties.values():
        if value.get("type") == "title":
            return plain(value.get("title"))
    return ""
