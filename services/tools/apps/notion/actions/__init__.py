"""Notion's operations (API version 2022-06-28) as plain functions over a world.

Each function takes the :class:`~services.tools.context.WorldContext` first, takes the request
body's fields as the public API names them, and returns the API's JSON object, or raises
:class:`NotionError` (``validation_error`` / ``object_not_found`` ...). The acting user is the
integration's bot user unless ``as_user`` names a person (NPC edits and comments). Every write
is recorded with ``ctx.record("notion", "<endpoint>", ...)``.

Ids are UUIDs (with dashes in responses; paths accept them with or without), derived from the
world's deterministic id counter.

One module per section of the API reference (``users``, ``pages``, ``databases``, ``query``
with search, ``blocks``, ``comments``) over ``properties`` (rich text, schemas, values) and
``_base`` (workspace, ids, pagination); the query engine (``filters``) and the pure value
helpers (``values``) sit beside the package. It re-exports every name, so callers keep using
``actions.<operation>``.
"""

from __future__ import annotations

from services.tools.apps.notion.actions import (
    _base,
    blocks,
    comments,
    databases,
    pages,
    properties,
    query,
    users,
)
from services.tools.apps.notion.actions._base import (
    APP,
    BLOCK_TYPES,
    COLORS,
    COMPUTED,
    DATA_SOURCES_VERSION,
    MAX_CHILDREN,
    MAX_PAGE_SIZE,
    MAX_TEXT,
    NOTION_VERSION,
    PROPERTY_TYPES,
    READ_ONLY_BLOCKS,
    STATUS_DEFAULT,
    TEXT_BLOCKS,
    VERSIONS,
    data_sources,
    setup_workspace,
    workspace,
)
from services.tools.apps.notion.actions.blocks import (
    append_children,
    block_json,
    child_blocks,
    delete_block,
    list_children,
    retrieve_block,
    update_block,
)
from services.tools.apps.notion.actions.comments import (
    comment_json,
    create_comment,
    list_comments,
)
from services.tools.apps.notion.actions.databases import (
    create_database,
    data_source_json,
    database_json,
    retrieve_data_source,
    retrieve_database,
    update_database,
)
from services.tools.apps.notion.actions.pages import (
    create_page,
    page_json,
    retrieve_page,
    retrieve_page_property,
    update_page,
)
from services.tools.apps.notion.actions.properties import (
    rich_text,
)
from services.tools.apps.notion.actions.query import (
    query_database,
    search,
)
from services.tools.apps.notion.actions.users import (
    create_user,
    user_json,
    users_list,
    users_me,
    users_retrieve,
)
from services.tools.apps.packages import names_of

__all__ = [
    "APP",
    "BLOCK_TYPES",
    "COLORS",
    "COMPUTED",
    "DATA_SOURCES_VERSION",
    "MAX_CHILDREN",
    "MAX_PAGE_SIZE",
    "MAX_TEXT",
    "NOTION_VERSION",
    "PROPERTY_TYPES",
    "READ_ONLY_BLOCKS",
    "STATUS_DEFAULT",
    "TEXT_BLOCKS",
    "VERSIONS",
    "append_children",
    "block_json",
    "child_blocks",
    "comment_json",
    "create_comment",
    "create_database",
    "create_page",
    "create_user",
    "data_source_json",
    "data_sources",
    "database_json",
    "delete_block",
    "list_children",
    "list_comments",
    "page_json",
    "query_database",
    "retrieve_block",
    "retrieve_data_source",
    "retrieve_database",
    "retrieve_page",
    "retrieve_page_property",
    "rich_text",
    "search",
    "setup_workspace",
    "update_block",
    "update_database",
    "update_page",
    "user_json",
    "users_list",
    "users_me",
    "users_retrieve",
    "workspace",
]


# a name the package does not export (actions._get, actions.plain ...), from its modules
__getattr__ = names_of(
    __name__, (_base, users, properties, pages, databases, query, blocks, comments)
)
