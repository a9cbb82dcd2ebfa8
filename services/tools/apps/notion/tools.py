"""Notion MCP tools, named as Notion's open-source MCP server names them (``API-<operationId>``).

Arguments are the Notion API's own request bodies (2022-06-28), plus the path ids.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.tools.apps.notion import actions as notion
from services.tools.context import WorldContext
from services.tools.mcp.registry import tool

Json = dict[str, Any]


class Paging(BaseModel):
    start_cursor: str | None = Field(None, description="next_cursor from the previous page.")
    page_size: int | None = Field(None, ge=1, le=100, description="At most 100.")


class Search(Paging):
    query: str | None = Field(None, description="Text to find in page and database titles.")
    filter: Json | None = Field(
        None, description='{"property": "object", "value": "page" | "database"}'
    )
    sort: Json | None = Field(
        None,
        description='{"direction": "ascending" | "descending", "timestamp": "last_edited_time"}',
    )


@tool("notion", "API-post-search", Search, read_only=True)
def post_search(ctx: WorldContext, a: Search) -> Any:
    """Search by title: pages and databases shared with the integration."""
    return notion.search(
        ctx,
        query=a.query,
        filter=a.filter,
        sort=a.sort,
        start_cursor=a.start_cursor,
        page_size=a.page_size,
    )


class PageId(BaseModel):
    page_id: str = Field(description="The page's id (with or without dashes).")


@tool("notion", "API-retrieve-a-page", PageId, read_only=True)
def retrieve_page(ctx: WorldContext, a: PageId) -> Any:
    """Retrieve a page and its properties."""
    return notion.retrieve_page(ctx, page_id=a.page_id)


class PostPage(BaseModel):
    parent: Json = Field(description='{"page_id": "..."} or {"database_id": "..."}')
    properties: Json = Field(
        description="Property values by name, e.g. "
        '{"Name": {"title": [{"text": {"content": "Q3 plan"}}]}, "Status": {"status": {"name": "Done"}}}'
    )
    children: list[Json] | None = Field(None, description="Block objects for the page body.")
    icon: Json | None = None
    cover: Json | None = None


@tool("notion", "API-post-page", PostPage)
def post_page(ctx: WorldContext, a: PostPage) -> Any:
    """Create a page under a page or as a row of a database."""
    return notion.create_page(
        ctx,
        parent=a.parent,
        properties=a.properties,
        children=a.children,
        icon=a.icon,
        cover=a.cover,
    )


class PatchPage(BaseModel):
    page_id: str = Field(description="The page's id.")
    properties: Json | None = Field(None, description="Property values to change, by name.")
    archived: bool | None = Field(None, description="true archives (trashes) the page.")
    icon: Json | None = None
    cover: Json | None = None


@tool("notion", "API-patch-page", PatchPage)
def patch_page(ctx: WorldContext, a: PatchPage) -> Any:
    """Update page properties, or archive / restore the page."""
    fields = a.model_fields_set
    return notion.update_page(
        ctx,
        page_id=a.page_id,
        properties=a.properties,
        archived=a.archived,
        icon=a.icon if "icon" in fields else ...,
        cover=a.cover if "cover" in fields else ...,
    )


class QueryDatabase(Paging):
    database_id: str = Field(description="The database's id.")
    filter: Json | None = Field(
        None,
        description='e.g. {"property": "Status", "status": {"equals": "Done"}} or '
        '{"and": [...]} / {"or": [...]}',
    )
    sorts: list[Json] | None = Field(
        None, description='e.g. [{"property": "Due", "direction": "ascending"}]'
    )


@tool("notion", "API-post-database-query", QueryDatabase, read_only=True)
def query_database(ctx: WorldContext, a: QueryDatabase) -> Any:
    """Query a database: rows (pages) matching a filter, sorted, paginated."""
    return notion.query_database(
        ctx,
        database_id=a.database_id,
        filter=a.filter,
        sorts=a.sorts,
        start_cursor=a.start_cursor,
        page_size=a.page_size,
    )


class DatabaseId(BaseModel):
    database_id: str = Field(description="The database's id.")


@tool("notion", "API-retrieve-a-database", DatabaseId, read_only=True)
def retrieve_database(ctx: WorldContext, a: DatabaseId) -> Any:
    """Retrieve a database's title and property schema."""
    return notion.retrieve_database(ctx, database_id=a.database_id)


class CreateDatabase(BaseModel):
    parent: Json = Field(description='{"page_id": "..."}')
    title: list[Json] | None = Field(None, description="Rich text title.")
    properties: Json = Field(
        description='Schema by property name, e.g. {"Name": {"title": {}}, "Done": {"checkbox": {}}}'
    )


@tool("notion", "API-create-a-database", CreateDatabase)
def create_database(ctx: WorldContext, a: CreateDatabase) -> Any:
    """Create a database inside a page."""
    return notion.create_database(ctx, parent=a.parent, title=a.title, properties=a.properties)


class UpdateDatabase(BaseModel):
    database_id: str = Field(description="The database's id.")
    title: list[Json] | None = None
    description: list[Json] | None = None
    properties: Json | None = Field(
        None, description="Schema changes by name; null removes a property."
    )


@tool("notion", "API-update-a-database", UpdateDatabase)
def update_database(ctx: WorldContext, a: UpdateDatabase) -> Any:
    """Update a database's title, description or property schema."""
    return notion.update_database(
        ctx,
        database_id=a.database_id,
        title=a.title,
        description=a.description,
        properties=a.properties,
    )


class BlockChildren(Paging):
    block_id: str = Field(description="A page id or block id.")


@tool("notion", "API-get-block-children", BlockChildren, read_only=True)
def get_block_children(ctx: WorldContext, a: BlockChildren) -> Any:
    """List the blocks (content) of a page or block."""
    return notion.list_children(
        ctx, block_id=a.block_id, start_cursor=a.start_cursor, page_size=a.page_size
    )


class AppendChildren(BaseModel):
    block_id: str = Field(description="A page id or block id.")
    children: list[Json] = Field(
        description='Blocks, e.g. [{"type": "paragraph", "paragraph": {"rich_text": '
        '[{"text": {"content": "Hello"}}]}}]'
    )
    after: str | None = Field(None, description="Insert after this child block id.")


@tool("notion", "API-patch-block-children", AppendChildren)
def patch_block_children(ctx: WorldContext, a: AppendChildren) -> Any:
    """Append blocks to a page or block."""
    return notion.append_children(ctx, block_id=a.block_id, children=a.children, after=a.after)


class BlockId(BaseModel):
    block_id: str = Field(description="The block's id.")


@tool("notion", "API-retrieve-a-block", BlockId, read_only=True)
def retrieve_block(ctx: WorldContext, a: BlockId) -> Any:
    """Retrieve one block."""
    return notion.retrieve_block(ctx, block_id=a.block_id)


class UpdateBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    block_id: str = Field(description="The block's id.")
    archived: bool | None = Field(None, description="true archives the block.")


@tool("notion", "API-update-a-block", UpdateBlock)
def update_block(ctx: WorldContext, a: UpdateBlock) -> Any:
    """Update a block: pass its type key with new content, e.g. {"to_do": {"checked": true}}."""
    body = dict(a.model_extra or {})
    if a.archived is not None:
        body["archived"] = a.archived
    return notion.update_block(ctx, block_id=a.block_id, body=body)


@tool("notion", "API-delete-a-block", BlockId)
def delete_block(ctx: WorldContext, a: BlockId) -> Any:
    """Archive (delete) a block."""
    return notion.delete_block(ctx, block_id=a.block_id)


class CreateComment(BaseModel):
    parent: Json | None = Field(None, description='{"page_id": "..."} for a new discussion.')
    discussion_id: str | None = Field(None, description="Reply into an existing discussion.")
    rich_text: list[Json] = Field(description='[{"text": {"content": "..."}}]')


@tool("notion", "API-create-a-comment", CreateComment)
def create_comment(ctx: WorldContext, a: CreateComment) -> Any:
    """Comment on a page, or reply in a discussion."""
    return notion.create_comment(
        ctx, rich_text_value=a.rich_text, parent=a.parent, discussion_id=a.discussion_id
    )


@tool("notion", "API-retrieve-a-comment", BlockChildren, read_only=True)
def retrieve_comments(ctx: WorldContext, a: BlockChildren) -> Any:
    """List the comments on a page or block."""
    return notion.list_comments(
        ctx, block_id=a.block_id, start_cursor=a.start_cursor, page_size=a.page_size
    )


@tool("notion", "API-get-users", Paging, read_only=True)
def get_users(ctx: WorldContext, a: Paging) -> Any:
    """List the workspace's users."""
    return notion.users_list(ctx, start_cursor=a.start_cursor, page_size=a.page_size)


class UserId(BaseModel):
    user_id: str = Field(description="The user's id.")


@tool("notion", "API-get-user", UserId, read_only=True)
def get_user(ctx: WorldContext, a: UserId) -> Any:
    """Retrieve a user."""
    return notion.users_retrieve(ctx, user_id=a.user_id)


class NoArgs(BaseModel):
    pass


@tool("notion", "API-get-self", NoArgs, read_only=True)
def get_self(ctx: WorldContext, a: NoArgs) -> Any:
    """Retrieve the integration's own bot user."""
    return notion.users_me(ctx)
