"""Notion's comments endpoints (create, list) and the comment JSON."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from services.tools.apps.notion.actions._base import (
    APP,
    _actor,
    _list,
    _new_id,
    _next_seq,
    _paginate,
    _parent_json,
    _user_ref,
    workspace,
)
from services.tools.apps.notion.actions.blocks import _container
from services.tools.apps.notion.actions.pages import _page
from services.tools.apps.notion.actions.properties import rich_text
from services.tools.apps.notion.errors import not_found, validation
from services.tools.apps.notion.models import (
    NotionComment,
)
from services.tools.apps.notion.values import _iso, normalize_id, plain
from services.tools.context import WorldContext

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
