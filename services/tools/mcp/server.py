"""A stateless MCP server over streamable HTTP (the JSON-response subset of the transport).

Each POST carries one JSON-RPC message (or a batch); requests get ``application/json``
answers, notifications ``202``. Supported: ``initialize`` (protocol versions 2024-11-05 to
2025-11-25), ``ping``, ``tools/list``, ``tools/call``; ``server/discover`` and anything else
answer ``-32601`` (the official client then falls back to ``initialize``). No session id is
issued and no server-initiated stream is offered (``GET`` answers 405), which the transport
allows. Tool failures are results with ``isError: true`` carrying the app's own error body, so
a model sees them as observations; the world's session is rolled back for them.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError

from services.tools.context import WorldContext
from services.tools.mcp.registry import Tool
from services.tools.serial import retry_sync

log = logging.getLogger("k3stack.tools.mcp")

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
SERVER_INFO = {"name": "k3stack-tools", "title": "k3stack mock apps", "version": "0.1.0"}

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


def _error(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def _result(msg_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def _tool_error(body: Any) -> dict[str, Any]:
    text = body if isinstance(body, str) else json.dumps(body, default=str)
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _app_error_body(exc: Exception) -> Any:
    """An app error in the app's own shape (Slack ``{ok: false}``, Notion, Google)."""
    body = getattr(exc, "body", None)
    if callable(body):
        return body()
    return {"error": str(exc)}


def call_tool(ctx: WorldContext, tool: Tool, arguments: Any) -> dict[str, Any]:
    """Run one tool in the world; commit on success, roll back on failure."""
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
        if callable(getattr(exc, "body", None)):
            return _tool_error(_app_error_body(exc))
        log.exception("MCP tool %s failed", tool.name)
        return _tool_error({"error": "internal_error", "message": f"{type(exc).__name__}"})
    if result is None:
        result = {}
    text = json.dumps(result, default=str)
    out: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if isinstance(result, dict):
        out["structuredContent"] = result
    return out


def handle(ctx: WorldContext, tools: dict[str, Tool], message: Any) -> dict[str, Any] | None:
    """Answer one JSON-RPC message (``None`` for a notification or a response)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _error(None, INVALID_REQUEST, "expected a JSON-RPC 2.0 object")
    method = message.get("method")
    msg_id = message.get("id")
    if "id" not in message or method is None:
        return None  # a notification (or a client's response): accepted, no answer
    if not isinstance(method, str):
        return _error(msg_id, INVALID_REQUEST, "method must be a string")
    params = message.get("params") or {}
    if not isinstance(params, dict):
        return _error(msg_id, INVALID_PARAMS, "params must be an object")
    if method == "initialize":
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        return _result(
            msg_id,
            {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": SERVER_INFO,
                "instructions": "Tools over this world's mock apps; the world clock is simulated.",
            },
        )
    if method == "ping":
        return _result(msg_id, {})
    if method == "tools/list":
        return _result(msg_id, {"tools": [t.schema() for t in tools.values()]})
    if method == "tools/call":
        name = params.get("name")
        tool = tools.get(name) if isinstance(name, str) else None
        if tool is None:
            return _error(msg_id, INVALID_PARAMS, f"Unknown tool: {name}")
        return _result(msg_id, call_tool(ctx, tool, params.get("arguments")))
    return _error(msg_id, METHOD_NOT_FOUND, f"Method not found: {method}")
