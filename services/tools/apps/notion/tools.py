"""Notion MCP tools, named as Notion's open-source MCP server names them (``API-<operationId>``).

Arguments are the Notion API's own request bodies (2022-06-28), plus the path ids. Each
tool is its arguments model (its docstring the description); most pass them straight on to
the action of the same meaning (``forward``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.tools.apps.notion import actions as notion
from services.tools.context import WorldContext
from services.tools.mcp.registry import NoArgs, forward, tool

Json = dict[str, Any]


def _id(what: str) -> Any:
    return Field(description=f"The {what}'s id.")


DELETE = "Archive (delete) a block."


class Paging(BaseModel):
    """One page of a list."""

    start_cursor: str | None = Field(None, description="next_cursor from the previous page.")
    page_size: int | None = Field(None, ge=1, le=100, description="At most 100.")


class Search(Paging):
    """Search by title: pages and databases shared with the integration."""

    query: str | None = Field(None, description="Text to find in page and database titles.")
    filter: Json | None = Field(
        None, description='{"property": "object", "value": "page" | "database"}'
    )
    sort: Json | None = Field(
        None,
        description='{"direction": "ascending" | "descending", "timestamp": "last_edited_time"}',
    )


class PageId(BaseModel):
    """Retrieve a page and its properties."""

    page_id: str = Field(description="The page's id (with or without dashes).")


class PostPage(BaseModel):
    """Create a page under a page or as a row of a database."""

    parent: Json = Field(description='{"page_id": "..."} or {"database_id": "..."}')
    properties: Json = Field(
        description="Property values by name, e.g. "
        '{"Name": {"title": [{"text": {"content": "Q3 plan"}}]}, "Status": {"status": {"name": "Done"}}}'
    )
    children: list[Json] | None = Field(None, description="Block objects for the page body.")
    icon: Json | None = None
    cover: Json | None = None


class PatchPage(BaseModel):
    """Update page properties, or archive / restore the page."""

    page_id: str = Field(description="The page's id.")
    properties: Json | None = Field(None, description="Property values to change, by name.")
    archived: bool | None = Field(None, description="true archives (trashes) the page.")
    icon: Json | None = None
    cover: Json | None = None


class QueryDatabase(Paging):
    """Query a database: rows (pages) matching a filter, sorted, paginated."""

    database_id: str = _id("database")
    filter: Json | None = Field(
        None,
        description='e.g. {"property": "Status", "status": {"equals": "Done"}} or '
        '{"and": [...]} / {"or": [...]}',
    )
    sorts: list[Json] | None = Field(
        None, description='e.g. [{"property": "Due", "direction": "ascending"}]'
    )


class DatabaseId(BaseModel):
    """Retrieve a database's title and property schema."""

    database_id: str = _id("database")


class CreateDatabase(BaseModel):
    """Create a database inside a page."""

    parent: Json = Field(description='{"page_id": "..."}')
    title: list[Json] | None = Field(None, description="Rich text title.")
    properties: Json = Field(
        description='Schema by property name, e.g. {"Name": {"title": {}}, "Done": {"checkbox": {}}}'
    )


class UpdateDatabase(BaseModel):
    """Update a database's title, description or property schema."""

    database_id: str = _id("database")
    title: list[Json] | None = None
    description: list[Json] | None = None
    properties: Json | None = Field(
        None, description="Schema changes by name; null removes a property."
    )


class BlockChildren(Paging):
    """List the blocks (content) of a page or block."""

    block_id: str = Field(description="A page id or block id.")


class AppendChildren(BaseModel):
    """Append blocks to a page or block."""

    block_id: str = Field(description="A page id or block id.")
    children: list[Json] = Field(
        description='Blocks, e.g. [{"type": "paragraph", "paragraph": {"rich_text": '
        '[{"text": {"content": "Hello"}}]}}]'
    )
    after: str | None = Field(None, description="Insert after this child block id.")


class BlockId(BaseModel):
    """Retrieve one block."""

    block_id: str = _id("block")


class CreateComment(BaseModel):
    """Comment on a page, or reply in a discussion."""

    parent: Json | None = Field(None, description='{"page_id": "..."} for a new discussion.')
    discussion_id: str | None = Field(None, description="Reply into an existing discussion.")
    rich_text: list[Json] = Field(description='[{"text": {"content": "..."}}]')


class UserId(BaseModel):
    """Retrieve a user."""

    user_id: str = _id("user")


# In the public server's order (tools/list lists them so).
forward("notion", "API-post-search", Search, notion.search, read_only=True)
forward("notion", "API-retrieve-a-page", PageId, notion.retrieve_page, read_only=True)
forward("notion", "API-post-page", PostPage, notion.create_page)
# only the fields given: an absent icon / cover is left alone, a null one cleared
forward("notion", "API-patch-page", PatchPage, notion.update_page, only_set=True)
forward("notion", "API-post-database-query", QueryDatabase, notion.query_database, read_only=True)
forward("notion", "API-retrieve-a-database", DatabaseId, notion.retrieve_database, read_only=True)
forward("notion", "API-create-a-database", CreateDatabase, notion.create_database)
forward("notion", "API-update-a-database", UpdateDatabase, notion.update_database)
forward("notion", "API-get-block-children", BlockChildren, notion.list_children, read_only=True)
forward("notion", "API-patch-block-children", AppendChildren, notion.append_children)
forward("notion", "API-retrieve-a-block", BlockId, notion.retrieve_block, read_only=True)


class UpdateBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    block_id: str = _id("block")
    archived: bool | None = Field(None, description="true archives the block.")


@tool("notion", "API-update-a-block", UpdateBlock)
def update_block(ctx: WorldContext, a: UpdateBlock) -> Any:
    """Update a block: pass its type key with new content, e.g. {"to_do": {"checked": true}}."""
    body = dict(a.model_extra or {})
    if a.archived is not None:
        body["archived"] = a.archived
    return notion.update_block(ctx, block_id=a.block_id, body=body)


forward("notion", "API-delete-a-block", BlockId, notion.delete_block, description=DELETE)
forward(
    "notion",
    "API-create-a-comment",
    CreateComment,
    notion.create_comment,
    rename={"rich_text": "rich_text_value"},
)
forward(
    "notion",
    "API-retrieve-a-comment",
    BlockChildren,
    notion.list_comments,
    read_only=True,
    description="List the comments on a page or block.",
)
forward(
    "notion",
    "API-get-users",
    Paging,
    notion.users_list,
    read_only=True,
    description="List the workspace's users.",
)
forward("notion", "API-get-user", UserId, notion.users_retrieve, read_only=True)
forward(
    "notion",
    "API-get-self",
    NoArgs,
    notion.users_me,
    read_only=True,
    description="Retrieve the integration's own bot user.",
)
