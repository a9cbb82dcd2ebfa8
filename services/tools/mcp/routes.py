"""MCP endpoints: ``/worlds/{world_id}/mcp`` (every app's tools) and
``/worlds/{world_id}/mcp/{app}`` (one app's, like the separate public servers).

Auth is the world token (``Authorization: Bearer``), as for the apps' REST routes.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from services.tools.context import WorldCtx
from services.tools.mcp.registry import tool_apps, tools_for
from services.tools.mcp.server import INVALID_REQUEST, PARSE_ERROR, _error, handle
from services.tools.serial import world_lock

router = APIRouter(prefix="/worlds/{world_id}/mcp", tags=["mcp"])


async def _serve(ctx: Any, request: Request, apps: tuple[str, ...]) -> Response:
    raw = await request.body()
    try:
        message = json.loads(raw)
    except ValueError:
        return JSONResponse(_error(None, PARSE_ERROR, "Parse error"), status_code=400)
    tools = tools_for(apps)
    async with world_lock(str(request.path_params.get("world_id", ""))):
        return await _answer(ctx, tools, message)


async def _answer(ctx: Any, tools: Any, message: Any) -> Response:
    if isinstance(message, list):
        if not message:
            return JSONResponse(_error(None, INVALID_REQUEST, "empty batch"), status_code=400)
        answers = [
            a for m in message if (a := await run_in_threadpool(handle, ctx, tools, m)) is not None
        ]
        return JSONResponse(answers) if answers else Response(status_code=202)
    answer = await run_in_threadpool(handle, ctx, tools, message)
    if answer is None:
        return Response(status_code=202)
    return JSONResponse(answer)


@router.post("", operation_id="mcp_all")
async def mcp_all(ctx: WorldCtx, request: Request) -> Response:
    """MCP streamable HTTP endpoint with every app's tools."""
    return await _serve(ctx, request, tool_apps())


@router.post("/{app}", operation_id="mcp_app")
async def mcp_app(ctx: WorldCtx, app: str, request: Request) -> Response:
    """MCP streamable HTTP endpoint with one app's tools (slack, notion, calendar, gmail)."""
    if app not in tool_apps():
        known = ", ".join(tool_apps())
        return JSONResponse(
            _error(None, INVALID_REQUEST, f"unknown app {app!r}; use one of {known}"),
            status_code=404,
        )
    return await _serve(ctx, request, (app,))


@router.get("", operation_id="mcp_stream", include_in_schema=False)
@router.get("/{app}", operation_id="mcp_app_stream", include_in_schema=False)
@router.delete("", operation_id="mcp_close", include_in_schema=False)
@router.delete("/{app}", operation_id="mcp_app_close", include_in_schema=False)
async def no_stream(world_id: str) -> Response:
    """No server-initiated stream and no sessions to close (stateless server)."""
    return Response(status_code=405, headers={"Allow": "POST"})
