"""The MCP server of a world's apps, on the official ``mcp`` SDK (its low-level ``Server`` and
its streamable-HTTP transport, stateless, JSON responses).

The SDK owns the protocol: ``initialize`` and version negotiation, ``ping``, JSON-RPC framing
and errors, notifications (``202``), the ``Accept`` / ``Content-Type`` rules. This module
supplies the two handlers, ``tools/list`` and ``tools/call``, which read which world and which
apps a request is for from the HTTP request the transport hands them (``routes.py`` puts it
there after checking the world token). Each request runs on a fresh stateless transport, so
no ``Mcp-Session-Id`` is issued and nothing outlives the request.

Tool failures are results with ``isError: true`` carrying the app's own error body (Slack's
``{"ok": false}``, Notion's error object, Google's ``{"error": ...}``), so a model sees them as
observations; the world's session is rolled back for them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from services.tools.context import WorldContext, open_world
from services.tools.mcp.registry import Tool, tools_for
from services.tools.serial import lock_world, retry_sync, world_lock

log = logging.getLogger("k3stack.tools.mcp")
# The SDK logs each stateless request's start and end at INFO; one line per tool call is noise.
for _name in ("mcp.server.streamable_http_manager", "mcp.server.streamable_http"):
    logging.getLogger(_name).setLevel(logging.WARNING)

ROUTE_KEY = "k3stack.mcp"  # the ASGI scope key routes.py stores the request's world under
INSTRUCTIONS = "Tools over this world's mock apps; the world clock is simulated."


@dataclass(frozen=True)
class WorldRoute:
    """What one MCP request is for: a world (already authenticated) and the apps it serves."""

    db: Any  # shared.db.ServiceDatabase
    world_id: str
    apps: tuple[str, ...]


def _tool_error(body: Any) -> dict[str, Any]:
    text = body if isinstance(body, str) else json.dumps(body, default=str)
    return {"content": [{"type": "text", "text": text}], "isError": True}


def call_tool(ctx: WorldContext, tool: Tool, arguments: Any) -> dict[str, Any]:
    """Run one tool in the world; commit on success, roll back on failure. Returns the MCP
    ``CallToolResult`` as JSON (the in-process scenario driver uses it directly)."""
    try:
        args = tool.args.model_validate(arguments or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
        )
        return _tool_error(
            {
                "error": "invalid_arguments",
                "message": f"invalid arguments for {tool.name}: {problems}",
            }
        )

    def attempt() -> Any:
        lock_world(ctx.session, ctx.world_id)  # again after a retry's rollback released it
        out = tool.handler(ctx, args)
        if tool.read_only:
            ctx.session.rollback()  # a read never changes the world, by construction
        else:
            ctx.session.commit()
        return out

    try:
        result = retry_sync(attempt, ctx.session.rollback)
    except Exception as exc:  # noqa: BLE001 - every failure is an observation for the agent
        ctx.session.rollback()
        body = getattr(exc, "body", None)
        if callable(body):
            return _tool_error(body())
        log.exception("MCP tool %s failed", tool.name)
        return _tool_error({"error": "internal_error", "message": f"{type(exc).__name__}"})
    if result is None:
        result = {}
    out: dict[str, Any] = {
        "content": [{"type": "text", "text": json.dumps(result, default=str)}],
        "isError": False,
    }
    if isinstance(result, dict):
        out["structuredContent"] = result
    return out


def _route(ctx: Any) -> WorldRoute:
    request = ctx.request
    route = request.scope.get(ROUTE_KEY) if request is not None else None
    if not isinstance(route, WorldRoute):  # only reachable if someone mounts the SDK app bare
        raise MCPError(code=types.INVALID_REQUEST, message="no world for this MCP request")
    return route


def _run_in_world(route: WorldRoute, tool: Tool, arguments: Any) -> dict[str, Any]:
    with route.db.session() as session, open_world(session, route.world_id) as ctx:
        return call_tool(ctx, tool, arguments)


async def _list_tools(
    ctx: Any, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    tools = tools_for(_route(ctx).apps)
    return types.ListToolsResult(
        tools=[types.Tool.model_validate(t.schema()) for t in tools.values()]
    )


async def _call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    route = _route(ctx)
    tool = tools_for(route.apps).get(params.name)
    if tool is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    async with world_lock(route.world_id):  # one writer per world, as for the REST routes
        out = await run_in_threadpool(_run_in_world, route, tool, params.arguments)
    return types.CallToolResult.model_validate(out)


def make_server() -> Server[Any]:
    """The SDK server with the world's tools (stateless: one instance serves every world)."""
    return Server(
        "k3stack-tools",
        version="0.1.0",
        title="k3stack mock apps",
        instructions=INSTRUCTIONS,
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
    )


SERVER = make_server()


async def serve(route: WorldRoute, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer one streamable-HTTP request for ``route`` with the SDK's stateless transport.

    A session manager runs for just this request: its task group then lives on the request's
    own event loop, whichever loop (the server's, a test client's) that is.
    """
    manager = StreamableHTTPSessionManager(SERVER, json_response=True, stateless=True)
    scope = {**scope, ROUTE_KEY: route}
    async with manager.run():
        await manager.handle_request(scope, receive, send)
