"""MCP endpoints: ``/worlds/{world_id}/mcp`` (every app's tools) and
``/worlds/{world_id}/mcp/{app}`` (one app's, like the separate public servers).

Auth is the world token (``Authorization: Bearer``), checked by the same dependency as the
apps' REST routes; the request is then handed, with its world, to the SDK's transport
(``server.serve``), which writes the answer itself.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from services.tools.context import WorldCtx, json_body_doc
from services.tools.mcp.registry import tool_apps
from services.tools.mcp.server import WorldRoute, serve

router = APIRouter(prefix="/worlds/{world_id}/mcp", tags=["mcp"])


class _SDKAnswer(Response):
    """A response the SDK's transport writes (status, headers and body are all its own)."""

    def __init__(self, route: WorldRoute) -> None:
        super().__init__()
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await serve(self.route, scope, receive, send)


def _rpc_error(status: int, code: int, message: str) -> JSONResponse:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status)


def _answer(ctx: WorldCtx, request: Request, apps: tuple[str, ...]) -> Response:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/json":
        # the SDK answers this in plain text; the documented error body is JSON-RPC's
        return _rpc_error(400, -32600, "Content-Type must be application/json")
    return _SDKAnswer(WorldRoute(request.app.state.db, ctx.world_id, apps))


# A JSON-RPC 2.0 message (request or notification; ``id`` and ``params`` as the MCP SDK reads
# them, ``id`` left open: a notification carries none, and the SDK takes any extra member).
JSON_RPC = json_body_doc(
    {"jsonrpc": {"type": "string", "enum": ["2.0"]}, "method": {"type": "string"}},
    params={"type": ["object", "null"]},
    id={},
)


# A notification (no ``id``) or a client's response gets an empty 202, as the transport answers.
ACCEPTED = {202: {"description": "A notification or response accepted (no body)"}}


@router.post("", operation_id="mcp_all", openapi_extra=JSON_RPC, responses=ACCEPTED)
async def mcp_all(ctx: WorldCtx, request: Request) -> Response:
    """MCP streamable HTTP endpoint with every app's tools."""
    return _answer(ctx, request, tool_apps())


@router.post("/{app}", operation_id="mcp_app", openapi_extra=JSON_RPC, responses=ACCEPTED)
async def mcp_app(ctx: WorldCtx, app: str, request: Request) -> Response:
    """MCP streamable HTTP endpoint with one app's tools (slack, notion, calendar, gmail)."""
    if app not in tool_apps():
        known = ", ".join(tool_apps())
        return _rpc_error(404, -32600, f"unknown app {app!r}; use one of {known}")
    return _answer(ctx, request, (app,))


@router.get("", operation_id="mcp_stream", include_in_schema=False)
@router.get("/{app}", operation_id="mcp_app_stream", include_in_schema=False)
@router.delete("", operation_id="mcp_close", include_in_schema=False)
@router.delete("/{app}", operation_id="mcp_app_close", include_in_schema=False)
async def no_stream(world_id: str) -> Response:
    """No server-initiated stream and no sessions to close (stateless server)."""
    return Response(status_code=405, headers={"Allow": "POST"})
