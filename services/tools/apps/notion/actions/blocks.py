"""Notion's blocks endpoints (append, list children, retrieve, update, delete) and block JSON."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from services.tools.apps.notion.actions._base import (
    APP,
    BLOCK_TYPES,
    MAX_CHILDREN,
    READ_ONLY_BLOCKS,
    _actor,
    _get,
    _list,
    _new_id,
    _next_seq,
    _paginate,
    _parent_json,
    _title_of_page,
    _user_ref,
    workspace,
)
from services.tools.apps.notion.actions.properties import rich_text
from services.tools.apps.notion.errors import not_found, validation
from services.tools.apps.notion.models import (
    NotionBlock,
    NotionPage,
)
from services.tools.apps.notion.values import _iso, normalize_id
from services.tools.context import WorldContext

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
