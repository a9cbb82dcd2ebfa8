"""Notion API routes (``/worlds/{world_id}/notion/v1/...``), Notion-Version 2022-06-28.

The pinned API version is **2022-06-28** (databases hold their schema and are queried with
``POST /v1/databases/{id}/query``), what ``notion-client`` 2.x (pinned 2.5.0) sends by default.
``2025-09-03`` (``notion-client`` 3.x's default) is accepted for its data-source paths, with one
data source per database sharing the database's id: ``GET/PATCH /v1/data_sources/{id}``,
``POST /v1/data_sources/{id}/query``, ``parent: {"data_source_id"}``, ``initial_data_source``,
search filter ``"data_source"``; databases then list ``data_sources`` instead of ``properties``.
A missing header answers ``missing_version``; any other version a ``validation_error`` naming
the supported ones, so a client never silently gets other semantics.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from services.tools.app_common import json_object_body
from services.tools.apps.notion import actions as A
from services.tools.apps.notion.errors import NotionError, NotionRoute, to_notion_error, validation
from services.tools.context import WorldContext, WorldCtx, json_body_doc, rejects

router = APIRouter(prefix="/worlds/{world_id}/notion/v1", tags=["notion"], route_class=NotionRoute)


def notion_context(
    ctx: WorldCtx,
    request: Request,
    version: Annotated[
        str,
        Header(
            alias="Notion-Version",
            description="The API version; a missing header answers `missing_version`.",
            json_schema_extra={"enum": list(A.VERSIONS)},
        ),
    ],
) -> WorldContext:
    """Check ``Notion-Version`` (declared, so the OpenAPI document requires the header) and
    keep the context on the request (for rollback on errors)."""
    request.state.world_ctx = ctx
    if version not in A.VERSIONS:
        raise validation(
            f"Notion-Version `{version}` is not supported by this mock; send "
            f"`{A.NOTION_VERSION}` (or `{A.DATA_SOURCES_VERSION}` for the data-source paths)."
        )
    ctx.notion_version = version  # type: ignore[attr-defined] - read by actions.data_sources
    return ctx


NotionCtx = Annotated[WorldContext, Depends(notion_context)]


class NotionErrorBody(BaseModel):
    """Notion's error body (``{"object": "error", status, code, message}``), documented in
    OpenAPI for every Notion route."""

    object: str = "error"
    status: int
    code: str
    message: str


ERROR_MODEL = NotionErrorBody


def error_response(status: int, message: str) -> JSONResponse:
    """Notion's style for failures the tools app catches outside these routes."""
    from shared.errors import APIError

    if status in (404, 405):
        err = NotionError(400, "invalid_request_url", f"Invalid request URL. ({message})")
    else:
        err = to_notion_error(APIError(status, "error", message))
    return JSONResponse(err.body(), status_code=err.status)


json_body = json_object_body(
    lambda: NotionError(400, "invalid_json", "Error parsing JSON body."),
    lambda: validation("body should be an object."),
)


Body = Annotated[dict[str, Any], Depends(json_body)]


def _page_size(request: Request) -> int | None:
    value = request.query_params.get("page_size")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise validation("page_size should be a number.") from None


OBJECT = {"type": "object"}
ARRAY = {"type": "array"}
# Notion validates a body's objects (parents, property values, blocks, rich text) further than
# the fields declared here: those answer ``validation_error``, as Notion's own API does.
SHAPE_400 = rejects(
    "`validation_error`: a parent, property value, block or rich text of a shape Notion "
    "rejects (or, for the data-source paths, a `Notion-Version` other than 2025-09-03)"
)


# --------------------------------------------------------------------------- search, users


@router.post("/search", operation_id="notion_search")
def search(ctx: NotionCtx, body: Body) -> dict[str, Any]:
    """Search pages and databases by title."""
    return A.search(
        ctx,
        query=body.get("query"),
        filter=body.get("filter"),
        sort=body.get("sort"),
        start_cursor=body.get("start_cursor"),
        page_size=body.get("page_size"),
    )


@router.get("/users", operation_id="notion_listUsers")
def list_users(ctx: NotionCtx, request: Request) -> dict[str, Any]:
    return A.users_list(
        ctx, start_cursor=request.query_params.get("start_cursor"), page_size=_page_size(request)
    )


@router.get("/users/me", operation_id="notion_getSelf")
def get_self(ctx: NotionCtx) -> dict[str, Any]:
    return A.users_me(ctx)


@router.get("/users/{user_id}", operation_id="notion_getUser")
def get_user(ctx: NotionCtx, user_id: str) -> dict[str, Any]:
    return A.users_retrieve(ctx, user_id=user_id)


# --------------------------------------------------------------------------- pages


@router.post(
    "/pages",
    operation_id="notion_createPage",
    openapi_extra=json_body_doc({"parent": OBJECT}, properties=OBJECT, children=ARRAY),
    responses=SHAPE_400,
)
def create_page(ctx: NotionCtx, body: Body) -> dict[str, Any]:
    return A.create_page(
        ctx,
        parent=body.get("parent"),
        properties=body.get("properties"),
        children=body.get("children"),
        icon=body.get("icon"),
        cover=body.get("cover"),
    )


@router.get("/pages/{page_id}", operation_id="notion_retrievePage")
def retrieve_page(ctx: NotionCtx, page_id: str) -> dict[str, Any]:
    return A.retrieve_page(ctx, page_id=page_id)


@router.patch("/pages/{page_id}", operation_id="notion_updatePage")
def update_page(ctx: NotionCtx, page_id: str, body: Body) -> dict[str, Any]:
    return A.update_page(
        ctx,
        page_id=page_id,
        properties=body.get("properties"),
        archived=body.get("archived"),
        in_trash=body.get("in_trash"),
        icon=body.get("icon", ...),
        cover=body.get("cover", ...),
    )


@router.get("/pages/{page_id}/properties/{property_id}", operation_id="notion_retrievePageProperty")
def retrieve_page_property(
    ctx: NotionCtx, page_id: str, property_id: str, request: Request
) -> dict[str, Any]:
    return A.retrieve_page_property(
        ctx,
        page_id=page_id,
        property_id=property_id,
        start_cursor=request.query_params.get("start_cursor"),
        page_size=_page_size(request),
    )


# --------------------------------------------------------------------------- databases


@router.post(
    "/databases",
    operation_id="notion_createDatabase",
    openapi_extra=json_body_doc({"parent": OBJECT}, properties=OBJECT, initial_data_source=OBJECT),
    responses=rejects(
        "`validation_error`: no `properties` (nor `initial_data_source.properties`), or a parent, title or property schema of a shape Notion rejects"
    ),
)
def create_database(ctx: NotionCtx, body: Body) -> dict[str, Any]:
    properties = body.get("properties")
    initial = body.get("initial_data_source")
    if properties is None and isinstance(initial, dict):
        properties = initial.get("properties")  # 2025-09-03: the schema is the data source's
    if properties is None:
        raise validation("body.properties should be defined, instead was `undefined`.")
    return A.create_database(
        ctx,
        parent=body.get("parent"),
        title=body.get("title"),
        properties=properties,
        description=body.get("description"),
        icon=body.get("icon"),
        cover=body.get("cover"),
        is_inline=bool(body.get("is_inline", False)),
    )


@router.get("/databases/{database_id}", operation_id="notion_retrieveDatabase")
def retrieve_database(ctx: NotionCtx, database_id: str) -> dict[str, Any]:
    return A.retrieve_database(ctx, database_id=database_id)


@router.patch("/databases/{database_id}", operation_id="notion_updateDatabase")
def update_database(ctx: NotionCtx, database_id: str, body: Body) -> dict[str, Any]:
    return A.update_database(
        ctx,
        database_id=database_id,
        title=body.get("title"),
        description=body.get("description"),
        properties=body.get("properties"),
        archived=body.get("archived", body.get("in_trash")),
    )


@router.post("/databases/{database_id}/query", operation_id="notion_queryDatabase")
def query_database(ctx: NotionCtx, database_id: str, body: Body) -> dict[str, Any]:
    return A.query_database(
        ctx,
        database_id=database_id,
        filter=body.get("filter"),
        sorts=body.get("sorts"),
        start_cursor=body.get("start_cursor"),
        page_size=body.get("page_size"),
    )


# --------------------------------------------------------------------------- data sources
# Notion-Version 2025-09-03 splits a database's schema and rows into data sources; here each
# database has exactly one, with the database's id.


@router.get("/data_sources/{data_source_id}", operation_id="notion_retrieveDataSource")
def retrieve_data_source(ctx: NotionCtx, data_source_id: str) -> dict[str, Any]:
    return A.retrieve_data_source(ctx, data_source_id=data_source_id)


@router.patch("/data_sources/{data_source_id}", operation_id="notion_updateDataSource")
def update_data_source(ctx: NotionCtx, data_source_id: str, body: Body) -> dict[str, Any]:
    A.update_database(
        ctx,
        database_id=data_source_id,
        title=body.get("title"),
        properties=body.get("properties"),
        archived=body.get("archived", body.get("in_trash")),
    )
    return A.retrieve_data_source(ctx, data_source_id=data_source_id)


@router.post("/data_sources/{data_source_id}/query", operation_id="notion_queryDataSource")
def query_data_source(ctx: NotionCtx, data_source_id: str, body: Body) -> dict[str, Any]:
    return A.query_database(
        ctx,
        database_id=data_source_id,
        filter=body.get("filter"),
        sorts=body.get("sorts"),
        start_cursor=body.get("start_cursor"),
        page_size=body.get("page_size"),
    )


@router.post(
    "/data_sources",
    operation_id="notion_createDataSource",
    responses=rejects(
        "`validation_error`, always: this mock keeps one data source per database (create a database instead)"
    ),
)
def create_data_source(ctx: NotionCtx, body: Body) -> dict[str, Any]:
    raise validation("This mock keeps one data source per database; create a database instead.")


# --------------------------------------------------------------------------- blocks


@router.get("/blocks/{block_id}", operation_id="notion_retrieveBlock")
def retrieve_block(ctx: NotionCtx, block_id: str) -> dict[str, Any]:
    return A.retrieve_block(ctx, block_id=block_id)


@router.patch("/blocks/{block_id}", operation_id="notion_updateBlock")
def update_block(ctx: NotionCtx, block_id: str, body: Body) -> dict[str, Any]:
    return A.update_block(ctx, block_id=block_id, body=body)


@router.delete("/blocks/{block_id}", operation_id="notion_deleteBlock")
def delete_block(ctx: NotionCtx, block_id: str) -> dict[str, Any]:
    return A.delete_block(ctx, block_id=block_id)


@router.get("/blocks/{block_id}/children", operation_id="notion_listBlockChildren")
def list_children(ctx: NotionCtx, block_id: str, request: Request) -> dict[str, Any]:
    return A.list_children(
        ctx,
        block_id=block_id,
        start_cursor=request.query_params.get("start_cursor"),
        page_size=_page_size(request),
    )


@router.patch(
    "/blocks/{block_id}/children",
    operation_id="notion_appendBlockChildren",
    openapi_extra=json_body_doc({"children": ARRAY}),
    responses=SHAPE_400,
)
def append_children(ctx: NotionCtx, block_id: str, body: Body) -> dict[str, Any]:
    if "children" not in body:
        raise validation("body.children should be defined, instead was `undefined`.")
    return A.append_children(
        ctx, block_id=block_id, children=body.get("children"), after=body.get("after")
    )


# --------------------------------------------------------------------------- comments


@router.post(
    "/comments",
    operation_id="notion_createComment",
    openapi_extra=json_body_doc({"rich_text": ARRAY}, parent=OBJECT),
    responses=rejects(
        "`validation_error`: neither a `parent` nor a `discussion_id`, or rich text of a shape Notion rejects"
    ),
)
def create_comment(ctx: NotionCtx, body: Body) -> dict[str, Any]:
    return A.create_comment(
        ctx,
        rich_text_value=body.get("rich_text"),
        parent=body.get("parent"),
        discussion_id=body.get("discussion_id"),
    )


@router.get("/comments", operation_id="notion_listComments")
def list_comments(
    ctx: NotionCtx, request: Request, block_id: Annotated[str, Query(min_length=1)]
) -> dict[str, Any]:
    return A.list_comments(
        ctx,
        block_id=block_id,
        start_cursor=request.query_params.get("start_cursor"),
        page_size=_page_size(request),
    )


@router.api_route(
    "/{rest:path}",
    methods=["GET", "POST", "PATCH", "DELETE"],
    operation_id="notion_invalidUrl",
    include_in_schema=False,
)
def invalid_url(rest: str) -> dict[str, Any]:
    raise NotionError(400, "invalid_request_url", f"Invalid request URL: /v1/{rest}")
